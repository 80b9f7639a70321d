/**
 * Argument parsing for every command: `node:util` parseArgs in strict mode,
 * with its errors turned into one-line usage errors (exit 2).
 */
import { parseArgs, type ParseArgsConfig } from "node:util";
import { usageError } from "./errors.ts";

/**
 * Options accepted by {@linkcode parseCommandArgs}: parseArgs options, plus
 * `allowEmpty` for the rare option whose value may be the empty string.
 */
export type OptionSpec = Record<
  string,
  NonNullable<ParseArgsConfig["options"]>[string] & { allowEmpty?: boolean }
>;

/** Whether the arguments ask for help (`-h`/`--help` before a bare `--`). */
export function wantsHelp(args: string[]): boolean {
  for (const a of args) {
    if (a === "--") return false;
    if (a === "--help" || a === "-h") return true;
  }
  return false;
}

/**
 * Parses `args` against `options`, strictly. Besides parseArgs' own checks,
 * an option given twice (unless `multiple`) and an empty value (unless
 * `allowEmpty`) are usage errors: in a script both are usually a mistake,
 * such as an unset variable, that would otherwise pass unnoticed.
 *
 * @param command the command's full name for messages, e.g. `forgekit fetch`
 * @example
 * ```ts
 * const { values, positionals } = parseCommandArgs("forgekit fetch", args, {
 *   output: { type: "string", short: "o" },
 * });
 * ```
 */
export function parseCommandArgs<T extends OptionSpec>(
  command: string,
  args: string[],
  options: T,
) {
  let parsed;
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true, tokens: true });
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    // parseArgs messages are multi-sentence; keep the first sentence.
    const first = msg.split(/\.\s|\n/)[0].replace(/\.$/, "");
    throw usageError(first, `run: ${command} --help`, err);
  }
  const seen = new Set<string>();
  for (const t of parsed.tokens) {
    if (t.kind !== "option") continue;
    const spec = options[t.name];
    if (!spec.multiple && seen.has(t.name)) {
      throw usageError(
        `--${t.name} is given more than once`,
        `give it once; run: ${command} --help`,
      );
    }
    seen.add(t.name);
    if (t.value === "" && !spec.allowEmpty) {
      throw usageError(`--${t.name} must not be empty`, `run: ${command} --help`);
    }
  }
  return { values: parsed.values, positionals: parsed.positionals };
}

/** Splits a comma-separated option value, trimming entries (empty entries are kept for validation). */
export function splitList(value: string | undefined): string[] {
  if (value === undefined) return [];
  return value.split(",").map((s) => s.trim());
}

/**
 * Dispatches to a subcommand: `forgekit auth doctor …`.
 * Prints help for `help`, `--help`, or no subcommand.
 */
export async function dispatchSubcommand(
  command: string,
  help: string,
  args: string[],
  subcommands: Record<string, (args: string[]) => Promise<number>>,
): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === "help" && rest[0] !== undefined) {
    return await dispatchSubcommand(command, help, [rest[0], "--help"], subcommands);
  }
  if (sub === undefined || sub === "help" || sub === "--help" || sub === "-h") {
    if (sub === undefined) {
      console.error(help);
      return 2;
    }
    console.log(help);
    return 0;
  }
  const run = Object.hasOwn(subcommands, sub) ? subcommands[sub] : undefined; // not "constructor"
  if (!run) {
    throw usageError(
      `Unknown command: ${command} ${sub}`,
      `run: ${command} --help; commands: ${Object.keys(subcommands).join(", ")}`,
    );
  }
  return await run(rest);
}
