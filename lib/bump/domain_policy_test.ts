import assert from "node:assert/strict";
import { CliError } from "../cli/mod.ts";
import { addressProblem, decide, domainsOverlap } from "./domain_policy.ts";
import { isDialable, validateDomains } from "./host_validation.ts";

Deno.test("decide() applies allow, wildcard, block, IP-literal and port rules", () => {
  const policy = {
    allow: validateDomains(
      ["example.com", "*.wild.test", "127.0.0.9", "Upper.Test.", "2001:db8:0:0::1"],
      "--allow-domains",
    ),
    block: validateDomains(["bad.example.com"], "--block-domains"),
  };
  const cases: [string, number, boolean, string][] = [
    ["example.com", 443, true, "allow-domains:example.com"],
    ["api.example.com", 443, true, "allow-domains:example.com"],
    ["EXAMPLE.COM.", 80, true, "allow-domains:example.com"],
    ["badexample.com", 443, false, "no-rule"],
    ["a.wild.test", 443, true, "allow-domains:*.wild.test"],
    ["wild.test", 443, false, "no-rule"],
    ["bad.example.com", 443, false, "block-domains:bad.example.com"],
    ["x.bad.example.com", 443, false, "block-domains:bad.example.com"],
    ["127.0.0.1", 443, false, "ip-literal"],
    ["127.0.0.9", 443, true, "allow-domains:127.0.0.9"],
    ["[::1]", 443, false, "ip-literal"],
    ["example.com", 8443, false, "port:8443"],
    ["upper.test", 443, true, "allow-domains:upper.test"],
    // Other spellings of an IPv4 address (what the resolver makes of them) are IP literals too.
    ["2130706433", 443, false, "ip-literal"],
    ["127.1", 443, false, "ip-literal"],
    ["0x7f000001", 443, false, "ip-literal"],
    ["0x7f.0.0.1", 443, false, "ip-literal"],
    ["017700000001", 443, false, "ip-literal"],
    ["127.0.0.011", 443, false, "ip-literal"],
    ["127.0.0.9.", 443, true, "allow-domains:127.0.0.9"],
    ["[::ffff:127.0.0.9]", 443, false, "ip-literal"],
    // Any spelling of a listed IPv6 address is that address.
    ["[2001:db8::1]", 443, true, "allow-domains:2001:db8::1"],
    ["2001:DB8:0000:0:0:0:0:1", 443, true, "allow-domains:2001:db8::1"],
    ["[2001:db8::2]", 443, false, "ip-literal"],
  ];
  for (const [host, port, allowed, rule] of cases) {
    assert.deepEqual([decide(policy, host, port).allowed, decide(policy, host, port).rule], [
      allowed,
      rule,
    ], `${host}:${port}`);
  }
  assert.equal(
    decide({ allow: [], block: [] }, "example.com", 443).allowed,
    false,
    "an empty allow list blocks everything",
  );
});

Deno.test("validateDomains() rejects each bad entry with one line naming it", () => {
  const cases: [string, string][] = [
    ["", "empty entry"],
    ["*", "matches everything or a whole top-level domain"],
    ["*.*", "more than one wildcard"],
    ["*.com", "matches everything or a whole top-level domain"],
    ["*.*.example.com", "more than one wildcard"],
    ["a..example.com", "double dots or an empty label"],
    ["exa mple.com", "characters that are not valid in a host name"],
    ["exa_mple.com", "characters that are not valid in a host name"],
    ["foo*.example.com", 'a wildcard is only allowed as a leading "*."'],
    ["-bad.example.com", "a label that is not valid in a host name"],
    ["127.1", "an IP address not written as four decimal numbers (a.b.c.d)"],
    ["2130706433", "an IP address not written as four decimal numbers (a.b.c.d)"],
    ["0.1", "an IP address not written as four decimal numbers (a.b.c.d)"],
    ["10.0.0.010", "an IP address not written as four decimal numbers (a.b.c.d)"],
    ["x.0x10", "an IP address not written as four decimal numbers (a.b.c.d)"],
    // A single label is a whole top-level domain: `com` would allow every .com name.
    ["com", "matches everything or a whole top-level domain"],
    ["IO.", "matches everything or a whole top-level domain"],
    // A port is not part of a domain (it was taken for an IPv6 address and matched nothing).
    ["github.com:443", "characters that are not valid in a host name"],
    ["1::2::3", "an IPv6 address that is not valid"],
    ["[fe80::1%eth0]", "characters that are not valid in a host name"],
  ];
  for (const [entry, why] of cases) {
    try {
      validateDomains([entry], "--allow-domains");
      assert.fail(`accepted ${JSON.stringify(entry)}`);
    } catch (err) {
      assert.ok(err instanceof CliError);
      assert.equal(err.exitCode, 2);
      assert.equal(
        err.message,
        `--allow-domains: ${JSON.stringify(entry)} is not a valid domain: ${why}`,
      );
    }
  }
});

Deno.test("validateDomains() keeps localhost and IP addresses, normalised", () => {
  assert.deepEqual(
    validateDomains(["localhost", "::1", "[2001:DB8::1]", "10.0.0.1", "Api.Example.com."], "x"),
    ["localhost", "::1", "2001:db8::1", "10.0.0.1", "api.example.com"],
  );
});

Deno.test("addressProblem() refuses a name that reached this machine or a link-local address", () => {
  const cases: [string, string, boolean][] = [
    ["api.example.com", "140.82.112.6", false],
    ["api.example.com", "10.1.2.3", false],
    ["api.example.com", "2606:50c0:8000::153", false],
    ["rebind.example", "127.0.0.1", true],
    ["rebind.example", "127.8.9.10", true],
    ["rebind.example", "0.0.0.0", true],
    ["rebind.example", "169.254.169.254", true],
    ["rebind.example", "::1", true],
    ["rebind.example", "::", true],
    ["rebind.example", "fe80::1", true],
    ["rebind.example", "::ffff:127.0.0.1", true],
    ["rebind.example", "::ffff:7f00:1", true],
    ["rebind.example", "::ffff:169.254.169.254", true],
    ["rebind.example", "::ffff:8c52:7006", false],
    // What the user named as this machine, or listed as an address, was decided on already.
    ["localhost", "127.0.0.1", false],
    ["dev.localhost", "::1", false],
    ["127.0.0.1", "127.0.0.1", false],
    ["::1", "::1", false],
  ];
  for (const [host, address, refused] of cases) {
    const why = addressProblem(host, address);
    assert.equal(why !== null, refused, `${host} at ${address}: ${why}`);
  }
  assert.equal(
    addressProblem("rebind.example", "127.0.0.1"),
    "rebind.example resolves to 127.0.0.1, an address of this machine or a link-local one " +
      "(list the address in --allow-domains and connect to it by address to allow it)",
  );
});

Deno.test("isDialable() takes host names and IP literals, nothing another parser could split", () => {
  const cases: [string, boolean][] = [
    ["api.github.com", true],
    ["under_score.example", true],
    ["127.0.0.1", true],
    ["::ffff:127.0.0.1", true],
    ["evil.example/.allowed.example", false],
    ["evil.example#.allowed.example", false],
    ["evil.example?.allowed.example", false],
    ["evil.example\\.allowed.example", false],
    ["user@allowed.example", false],
    ["evil.example\t.allowed.example", false],
    ["evil.example\0.allowed.example", false],
    ["*.allowed.example", false],
    ["fe80::1%eth0", false],
    ["", false],
  ];
  for (const [host, want] of cases) assert.equal(isDialable(host), want, JSON.stringify(host));
});

Deno.test("domainsOverlap() holds when the two entries share a host", () => {
  const cases: [string, string, boolean][] = [
    ["example.com", "example.com", true],
    ["example.com", "*.example.com", true],
    ["*.example.com", "example.com", true],
    ["example.com", "api.example.com", true],
    ["*.example.com", "api.example.com", true],
    ["*.example.com", "*.api.example.com", true],
    ["api.example.com", "git.example.com", false],
    ["*.api.example.com", "git.example.com", false],
    ["example.com", "example.org", false],
    ["example.com", "badexample.com", false],
    ["10.0.0.1", "10.0.0.1", true],
    ["10.0.0.1", "10.0.0.2", false],
    ["10.0.0.1", "example.com", false],
  ];
  for (const [a, b, want] of cases) assert.equal(domainsOverlap(a, b), want, `${a} ${b}`);
});
