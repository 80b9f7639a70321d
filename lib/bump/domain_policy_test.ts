import assert from "node:assert/strict";
import { CliError } from "../cli/mod.ts";
import { decide } from "./domain_policy.ts";
import { validateDomains } from "./host_validation.ts";

Deno.test("decide() applies allow, wildcard, block, IP-literal and port rules", () => {
  const policy = {
    allow: validateDomains(
      ["example.com", "*.wild.test", "127.0.0.9", "Upper.Test."],
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
