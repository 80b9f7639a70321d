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
