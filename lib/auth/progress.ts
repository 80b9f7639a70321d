/** A progress bar on stderr for long downloads, only when stderr is a terminal. */
import { colorEnabled } from "../cli/mod.ts";

const MIN_SIZE = 1 << 20;

/** A progress reporter; a no-op unless stderr is a TTY and the body is large. */
export function progressBar(total: number): { add(n: number): void; done(): void } {
  const on = Deno.stderr.isTerminal() && (Number.isNaN(total) || total >= MIN_SIZE);
  if (!on) return { add() {}, done() {} };
  let seen = 0;
  let last = 0;
  const enc = new TextEncoder();
  const draw = (final: boolean) => {
    const mb = (seen / 1048576).toFixed(1);
    let line: string;
    if (Number.isNaN(total)) line = `${mb} MiB`;
    else {
      const frac = Math.min(1, seen / total);
      const width = 30;
      const fill = "#".repeat(Math.round(frac * width)).padEnd(width, colorEnabled() ? "·" : "-");
      line = `[${fill}] ${(frac * 100).toFixed(0).padStart(3)}% ${mb}/${
        (total / 1048576).toFixed(1)
      } MiB`;
    }
    Deno.stderr.writeSync(enc.encode(`\r${line}${final ? "\n" : ""}`));
  };
  return {
    add(n) {
      seen += n;
      const now = Date.now();
      if (now - last > 100) {
        last = now;
        draw(false);
      }
    },
    done() {
      draw(true);
    },
  };
}
