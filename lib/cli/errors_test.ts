import assert from "node:assert/strict";
import { CliError, exitCodeOf, formatError, maskSecret, usageError } from "./errors.ts";
import { printable } from "./output.ts";

Deno.test("formatError() prints one line: what, causes, then the hint", () => {
  const cases: [unknown, string][] = [
    [
      new CliError("GET https://x/ returned 404 Not Found"),
      "error: GET https://x/ returned 404 Not Found",
    ],
    [
      usageError("Unknown option --frob", "run: forgekit fetch --help"),
      "error: Unknown option --frob (run: forgekit fetch --help)",
    ],
    [
      new CliError("Cannot read auth.json", { cause: new Error("Permission denied") }),
      "error: Cannot read auth.json: Permission denied",
    ],
    [new Error("two\nlines"), "error: two lines"],
    [
      usageError("Cannot read x", "check x", new Error("Permission denied. Really")),
      "error: Cannot read x: Permission denied. Really (check x)",
    ],
    [
      usageError(
        "Unknown option '--x'",
        "run: forgekit fetch --help",
        new TypeError("Unknown option '--x'. To specify a positional argument, use '--'"),
      ),
      "error: Unknown option '--x' (run: forgekit fetch --help)",
    ],
    ["plain", "error: plain"],
    [
      new CliError("Bad\x1b[2J\rthing\u009b31m", { hint: "y\u202ez\r\nnext" }),
      "error: Bad\\x1b[2J\\x0dthing\\x9b31m (y\\u202ez next)",
    ],
    [new Error("ünïcode 日本 ✓\tcolumn"), "error: ünïcode 日本 ✓\\x09column"],
  ];
  for (const [err, want] of cases) assert.equal(formatError(err), want);
});

Deno.test("exitCodeOf() is 2 for usage errors and 1 otherwise", () => {
  assert.equal(exitCodeOf(usageError("x")), 2);
  assert.equal(exitCodeOf(new CliError("x")), 1);
  assert.equal(exitCodeOf(new TypeError("x")), 1);
});

Deno.test("maskSecret() never shows more than four characters", () => {
  assert.equal(maskSecret("ghp_abcdefghijklmnop"), "ghp_****");
  assert.equal(maskSecret("short"), "****");
});

Deno.test("printable() escapes what a terminal would obey and keeps all other text", () => {
  const cases: [string, string][] = [
    ["plain ünïcode 日本 ✓", "plain ünïcode 日本 ✓"],
    ["\x1b]0;title\x07", "\\x1b]0;title\\x07"],
    ["a\rb\nc\x7f\x85\x9b", "a\\x0db\\x0ac\\x7f\\x85\\x9b"],
    ["l\u2028p\u2029", "l\\u2028p\\u2029"],
    ["\u202aab\u202e\u2066\u2069", "\\u202aab\\u202e\\u2066\\u2069"],
  ];
  for (const [text, want] of cases) assert.equal(printable(text), want, JSON.stringify(text));
});
