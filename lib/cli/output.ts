/** Writing results: JSON for `--json`, text otherwise. */

/** Prints a value as indented JSON on stdout. */
export function printJson(value: unknown): void {
  console.log(JSON.stringify(value, null, 2));
}
