#!/usr/bin/env -S deno run -A
/**
 * forgekit: credentialed outbound requests, stacked pull requests, and an
 * egress firewall with HTTPS inspection.
 *
 * @module
 */
import { type Command, exitCodeOf, formatError, usageError } from "./lib/cli/mod.ts";
import { VERSION } from "./lib/version.ts";
import { commands as authCommands } from "./lib/auth/mod.ts";
import { commands as stacksCommands } from "./lib/stacks/mod.ts";
import { commands as bumpCommands } from "./lib/bump/mod.ts";

const COMMANDS: Command[] = [...authCommands, ...stacksCommands, ...bumpCommands];

function topHelp(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length), 7);
  const lines = COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return [
    `forgekit ${VERSION}: credentialed requests, stacked pull requests, an egress firewall`,
    "",
    "Usage: forgekit <command> [options]",
    "",
    "Commands:",
    ...lines,
    `  ${"help".padEnd(width)}  Show help for a command (forgekit help <command>)`,
    "",
    "Options:",
    "  -h, --help     Show help (at every level: forgekit <command> --help)",
    "  -V, --version  Print the version",
    "",
    "Exit codes: 0 success, 1 the operation failed, 2 usage or configuration error.",
  ].join("\n");
}

/** Runs forgekit with the given arguments; resolves to the exit code. */
export async function main(args: string[]): Promise<number> {
  const [name, ...rest] = args;
  if (name === undefined) {
    console.error(topHelp());
    return 2;
  }
  if (name === "--version" || name === "-V" || name === "version") {
    console.log(`forgekit ${VERSION}`);
    return 0;
  }
  if (name === "--help" || name === "-h") {
    console.log(topHelp());
    return 0;
  }
  if (name === "help") {
    if (rest.length === 0) {
      console.log(topHelp());
      return 0;
    }
    return await main([...rest, "--help"]);
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) {
    // Options come after the command: `forgekit fetch -v URL`, not `forgekit -v fetch URL`.
    if (name.startsWith("-")) {
      throw usageError(
        `Unknown option '${name}'`,
        "options follow the command; run: forgekit help",
      );
    }
    throw usageError(`Unknown command: ${name}`, "run: forgekit help");
  }
  return await command.run(rest);
}

if (import.meta.main) {
  let code: number;
  try {
    code = await main(Deno.args);
  } catch (err) {
    console.error(formatError(err));
    if (Deno.env.get("FORGEKIT_DEBUG") && err instanceof Error) console.error(err.stack);
    code = exitCodeOf(err);
  }
  Deno.exit(code);
}
