/** Colours: only on a terminal, never with NO_COLOR. */

/** Whether to colour output written to the given stream. */
export function colorEnabled(stream: { isTerminal(): boolean } = Deno.stderr): boolean {
  const noColor = Deno.env.get("NO_COLOR");
  if (noColor !== undefined && noColor !== "") return false;
  return stream.isTerminal();
}

/**
 * A painter. `on` defaults to whether stderr takes colours: text meant for
 * stdout must pass `colorEnabled(Deno.stdout)`, or a report redirected to a
 * file would get escape codes whenever stderr is a terminal.
 */
function paint(code: number) {
  return (text: string, on = colorEnabled()): string => on ? `\x1b[${code}m${text}\x1b[0m` : text;
}

/** Red text when colours are on. */
export const red = paint(31);
/** Yellow text when colours are on. */
export const yellow = paint(33);
/** Green text when colours are on. */
export const green = paint(32);
/** Dim text when colours are on. */
export const dim = paint(2);
/** Bold text when colours are on. */
export const bold = paint(1);
