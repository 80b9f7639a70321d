import assert from "node:assert/strict";
import { CliError, exitCodeOf, formatError, maskSecret, usageError } from "./errors.ts";

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
