/**
 * lib/bump.
 *
 * @module
 */
import type { Command } from "../cli/mod.ts";

/** The commands lib/bump adds to forgekit. */
export const commands: Command[] = [];
