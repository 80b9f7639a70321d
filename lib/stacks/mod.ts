/**
 * lib/stacks.
 *
 * @module
 */
import type { Command } from "../cli/mod.ts";

/** The commands lib/stacks adds to forgekit. */
export const commands: Command[] = [];
