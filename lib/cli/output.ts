/** Writing results: JSON for `--json`, text otherwise, never a terminal command. */

/**
 * What a terminal could take as a command rather than text: C0 and C1
 * controls (an escape sequence recolours, moves the cursor, retitles the
 * window; a carriage return overwrites the line), DEL, the line and
 * paragraph separators, and the bidirectional overrides and isolates that
 * show text in another order than it has.
 */
// deno-lint-ignore no-control-regex
const UNPRINTABLE = /[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
/** {@linkcode UNPRINTABLE} less what JSON.stringify escapes itself (C0). */
const UNPRINTABLE_IN_JSON = /[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

function hex(c: string, width: number): string {
  return c.charCodeAt(0).toString(16).padStart(width, "0");
}

/**
 * Text from elsewhere (a server, a file), made safe to show on a terminal:
 * each character of {@linkcode UNPRINTABLE} is written as `\xNN` (up to
 * U+00FF) or `\uNNNN`. Everything else, such as `ü` or `日本`, is kept.
 *
 * @example
 * ```ts
 * printable("F\x1b[2Jix\u202e"); // "F\\x1b[2Jix\\u202e"
 * ```
 */
export function printable(text: string): string {
  return text.replace(
    UNPRINTABLE,
    (c) => c.charCodeAt(0) <= 0xff ? `\\x${hex(c, 2)}` : `\\u${hex(c, 4)}`,
  );
}

/**
 * Prints a value as indented JSON on stdout. JSON escapes C0 controls; C1
 * controls, DEL, line separators and bidirectional overrides are escaped
 * too (`\u009b`), which keeps the JSON's value and the terminal safe.
 */
export function printJson(value: unknown): void {
  console.log(printableJson(JSON.stringify(value, null, 2)));
}

/**
 * JSON text made as safe for a terminal as {@linkcode printable} makes text,
 * with the same value: what JSON.stringify leaves raw (C1 controls, DEL,
 * line separators, bidirectional overrides) is written as `\u0085`.
 */
export function printableJson(json: string): string {
  return json.replace(UNPRINTABLE_IN_JSON, (c) => `\\u${hex(c, 4)}`);
}
