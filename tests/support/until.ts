/**
 * Waits until `cond` holds, checking every 25 ms; throws `timed out waiting
 * for <what>` after `ms`.
 *
 * @example
 * ```ts
 * await until("the webhook delivery", () => received.length > 0);
 * ```
 */
export async function until(
  what: string,
  cond: () => boolean | Promise<boolean>,
  ms = 15_000,
): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
