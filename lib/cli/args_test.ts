import assert from "node:assert/strict";
import { dispatchSubcommand, parseCommandArgs } from "./args.ts";
import type { CliError } from "./errors.ts";

const OPTIONS = {
  output: { type: "string", short: "o" },
  data: { type: "string", short: "d", allowEmpty: true },
  header: { type: "string", short: "H", multiple: true },
  verbose: { type: "boolean", short: "v" },
} as const;

Deno.test("parseCommandArgs() refuses repeated and empty options with exit 2", () => {
  const cases: [string[], string][] = [
    [["-o", "a", "--output", "b"], "--output is given more than once"],
    [["-v", "-v"], "--verbose is given more than once"],
    [["-o", ""], "--output must not be empty"],
    [["--output="], "--output must not be empty"],
    [["-H", ""], "--header must not be empty"],
    [["--bogus"], "Unknown option '--bogus'"],
  ];
  for (const [args, message] of cases) {
    assert.throws(
      () => parseCommandArgs("forgekit x", args, OPTIONS),
      (err: CliError) => err.exitCode === 2 && err.message === message,
      args.join(" "),
    );
  }
});

Deno.test("parseCommandArgs() keeps what is allowed: multiple, allowEmpty, positionals", () => {
  const { values, positionals } = parseCommandArgs(
    "forgekit x",
    ["-H", "a: b", "-H", "c: d", "-d", "", "url"],
    OPTIONS,
  );
  assert.deepEqual(values.header, ["a: b", "c: d"]);
  assert.equal(values.data, "");
  assert.deepEqual(positionals, ["url"]);
});

Deno.test("dispatchSubcommand() knows only its own subcommands", async () => {
  const subs = { run: () => Promise.resolve(0) };
  for (const args of [["constructor"], ["toString"], ["help", "bogus"], ["bogus"]]) {
    await assert.rejects(
      () => dispatchSubcommand("forgekit x", "help", args, subs),
      (err: CliError) => err.exitCode === 2 && /^Unknown command: forgekit x /.test(err.message),
      args.join(" "),
    );
  }
});
