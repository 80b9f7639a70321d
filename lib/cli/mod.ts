/**
 * Shared command-line plumbing: argument parsing, errors, colours, output.
 *
 * @module
 */
export * from "./args.ts";
export * from "./color.ts";
export type { Command } from "./command.ts";
export * from "./errors.ts";
export * from "./fs.ts";
export * from "./output.ts";
export * from "./signals.ts";
export * from "./url_secrets.ts";
