/**
 * The shape of a forgekit command. main.ts dispatches to these; each part
 * (`lib/auth`, `lib/stacks`, `lib/bump`) exports its commands from mod.ts.
 */

/** A top-level command such as `fetch` or `firewall`. */
export interface Command {
  /** The word on the command line. */
  name: string;
  /** One line for `forgekit help`. */
  summary: string;
  /** Runs the command with the arguments after its name; resolves to the exit code. */
  run(args: string[]): Promise<number>;
}
