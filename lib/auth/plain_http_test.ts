import assert from "node:assert/strict";
import { isLoopbackHost, plainHttpProblem } from "./plain_http.ts";

Deno.test("isLoopbackHost() is true only for this machine", () => {
  const cases: [string, boolean][] = [
    ["localhost", true],
    ["LOCALHOST:8080", true],
    ["app.localhost", true],
    ["127.0.0.1", true],
    ["127.1.2.3:9", true],
    ["[::1]", true],
    ["[::1]:8080", true],
    ["localhost.evil.example", false],
    ["127.0.0.1.evil.example", false],
    ["128.0.0.1", false],
    ["10.0.0.1", false],
    ["[::2]", false],
    ["api.github.com", false],
    ["", false],
    ["user@127.0.0.1", false],
  ];
  for (const [host, want] of cases) assert.equal(isLoopbackHost(host), want, host);
});

Deno.test("plainHttpProblem() refuses plain http:// except to loopback", () => {
  const cases: [string, string | null][] = [
    ["https://api.github.com/x", null],
    ["http://127.0.0.1:8080/x", null],
    ["http://localhost/x", null],
    ["http://[::1]:3000/x", null],
    ["http://api.github.com/x", "plain http:// to api.github.com (not loopback)"],
    ["http://10.0.0.5/x", "plain http:// to 10.0.0.5 (not loopback)"],
    ["http://127.0.0.1.nip.io/x", "plain http:// to 127.0.0.1.nip.io (not loopback)"],
  ];
  for (const [url, want] of cases) assert.equal(plainHttpProblem(new URL(url)), want, url);
});
