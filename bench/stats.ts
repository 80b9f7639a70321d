/**
 * The benchmarks' statistics over rounds: medians, and a figure's spread
 * across rounds as printed.
 *
 * @module
 */

/** The median (the upper one of an even count). */
export function median(xs: readonly number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
}

/** Per-round values as "median (lowest–highest)". */
export function spread(xs: readonly number[], digits = 2): string {
  const s = [...xs].sort((a, b) => a - b);
  return `${median(s).toFixed(digits)} (${s[0].toFixed(digits)}–${s.at(-1)!.toFixed(digits)})`;
}
