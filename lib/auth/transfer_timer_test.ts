import assert from "node:assert/strict";
import type { CliError } from "../cli/mod.ts";
import { parseSeconds, TransferTimer } from "./transfer_timer.ts";

Deno.test("parseSeconds() takes plain decimal seconds; 0 only where it means no limit", () => {
  const cases: [string, boolean, number | null][] = [
    ["30", false, 30],
    ["0.5", false, 0.5],
    ["2147483", false, 2147483],
    ["0", true, 0],
    ["0", false, null],
    ["0.0001", false, null],
    ["2147484", false, null],
    ["1e3", false, null],
    ["-1", true, null],
    ["", true, null],
    ["abc", true, null],
    [" 5", false, null],
  ];
  for (const [value, zero, want] of cases) {
    if (want === null) {
      assert.throws(
        () => parseSeconds("--max-time", value, { zero }),
        (err: CliError) => err.exitCode === 2 && err.message.startsWith("--max-time must be"),
        value,
      );
    } else assert.equal(parseSeconds("--max-time", value, { zero }), want, value);
  }
});

Deno.test("TransferTimer: the idle limit runs only while waiting; --max-time ends a wait that never settles", async () => {
  const idle = new TransferTimer("GET http://x/", { maxTime: null, idleTimeout: 0.05 });
  idle.waiting();
  idle.busy(); // busy with data: no idle limit
  await new Promise((r) => setTimeout(r, 120));
  assert.equal(idle.signal.aborted, false);
  idle.waiting();
  await assert.rejects(
    idle.race(new Promise(() => {})),
    (err: CliError) => err.message === "GET http://x/: nothing received for 0.05 s",
  );
  idle.stop();

  const max = new TransferTimer("GET http://x/", { maxTime: 0.05, idleTimeout: null });
  await assert.rejects(
    max.race(new Promise(() => {})),
    (err: CliError) => err.message === "GET http://x/: not finished within 0.05 s",
  );
  max.stop();
});
