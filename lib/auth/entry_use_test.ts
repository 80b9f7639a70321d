import assert from "node:assert/strict";
import { entriesNotUsedReason } from "./entry_use.ts";

Deno.test("entriesNotUsedReason() keeps entries to https and loopback http only, without URL credentials", () => {
  const cases: [string, string | null][] = [
    ["https://api.github.com/user", null],
    ["http://127.0.0.1:8080/x", null],
    ["http://[::1]:8080/x", null],
    ["http://localhost/x", null],
    ["http://ghe.corp.example/api/v3", "plain http:// to ghe.corp.example (not loopback)"],
    ["https://me:pw@ghe.corp.example/x", "the URL carries its own user name or password"],
    ["https://me@ghe.corp.example/x", "the URL carries its own user name or password"],
    ["http://me:pw@127.0.0.1/x", "the URL carries its own user name or password"],
    ["ftp://ghe.corp.example/x", "ftp: is neither https: nor http:"],
    ["file:///etc/passwd", "file: is neither https: nor http:"],
  ];
  for (const [url, want] of cases) assert.equal(entriesNotUsedReason(new URL(url)), want, url);
});
