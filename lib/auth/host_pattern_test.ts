import assert from "node:assert/strict";
import { hostPatternProblem, matchHost, normalizeHost, normalizePattern } from "./host_pattern.ts";

Deno.test("matchHost() follows the exact and *. rules", () => {
  const cases: [string, string, boolean][] = [
    ["api.github.com", "api.github.com", true],
    ["api.github.com", "API.GitHub.com.", true],
    ["api.github.com", "api.github.com:8443", true],
    ["api.github.com", "github.com", false],
    ["*.example.com", "a.example.com", true],
    ["*.example.com", "a.b.example.com", true],
    ["*.example.com", "example.com", false],
    ["*.example.com", "badexample.com", false],
    ["*.example.com", "a.badexample.com", false],
    ["bücher.example", "xn--bcher-kva.example", true],
    ["*.ghe.com", "api.tenant.ghe.com", true],
  ];
  for (const [pattern, host, want] of cases) {
    assert.equal(
      matchHost(normalizePattern(pattern), normalizeHost(host)!),
      want,
      `${pattern} ~ ${host}`,
    );
  }
});

Deno.test("hostPatternProblem() accepts exact hosts and *. and names every other form", () => {
  const cases: [string, string | null][] = [
    ["github.com", null],
    ["*.visualstudio.com", null],
    ["github.com.", null],
    ["127.0.0.1", null],
    ["*example.com", "is not a supported pattern"],
    ["*", "is not a supported pattern"],
    ["*.com", "matches a whole top-level domain"],
    ["a?.example.com", "is not a supported pattern"],
    ["*.*.example.com", "is not a supported pattern"],
    ["https://github.com", "has a scheme"],
    ["github.com/org", "has a path"],
    ["github.com:443", "has a port"],
    ["git hub.com", "contains whitespace"],
    ["", "is empty"],
    ["-bad.example.com", "is not a valid host name"],
    ["*.127.0.0.1", "is not a supported pattern"],
  ];
  for (const [pattern, want] of cases) assert.equal(hostPatternProblem(pattern), want, pattern);
});

Deno.test("normalizeHost() reads IPv6 literals, bare or in brackets, never as host and port", () => {
  const cases: [string, string | null][] = [
    ["::1", "::1"],
    ["[::1]", "::1"],
    ["[::1]:8443", "::1"],
    ["0:0:0:0:0:0:0:1", "::1"],
    ["2001:db8:0:0:0:0:0:1", "2001:db8::1"],
    ["2001:DB8::1", "2001:db8::1"],
    ["fe80::", "fe80::"],
    ["1::", "1::"],
    ["[fe80::1%eth0]", null],
    ["[::1]x", null],
    ["[not-an-address]", null],
    ["[::1", null],
    ["github.com:443", "github.com"],
  ];
  for (const [host, want] of cases) assert.equal(normalizeHost(host), want, host);
});

Deno.test("hostPatternProblem() accepts IPv6 addresses and refuses ports and globs on them", () => {
  const cases: [string, string | null][] = [
    ["::1", null],
    ["[::1]", null],
    ["2001:db8::1", null],
    ["2001:db8:0:0:0:0:0:1", null],
    ["fe80::", null],
    ["[::1]:443", "has a port"],
    ["*.::1", "is not a supported pattern"],
    ["*.[::1]", "is not a supported pattern"],
    ["2001:db8::zz", "is not a valid IPv6 address"],
    ["[::1", "is not a valid IPv6 address"],
  ];
  for (const [pattern, want] of cases) assert.equal(hostPatternProblem(pattern), want, pattern);
});

Deno.test("an IPv6 pattern matches its address in any spelling, and nothing else", () => {
  const cases: [string, string, boolean][] = [
    ["::1", "[::1]", true],
    ["[::1]", "[0:0:0:0:0:0:0:1]", true],
    ["2001:db8:0:0:0:0:0:1", "[2001:db8::1]", true],
    ["fe80::", "[fe80::]", true],
    ["fe80::", "fe80", false],
    ["1::", "0.0.0.1", false],
    ["::1", "localhost", false],
  ];
  for (const [pattern, host, want] of cases) {
    assert.equal(
      matchHost(normalizePattern(pattern), normalizeHost(host)!),
      want,
      `${pattern} ~ ${host}`,
    );
  }
});
