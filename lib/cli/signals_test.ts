import assert from "node:assert/strict";
import { signalExitCode } from "./signals.ts";

Deno.test("signalExitCode() is 128 plus the signal's number", () => {
  const cases: [Deno.Signal, number][] = [
    ["SIGHUP", 129],
    ["SIGINT", 130],
    ["SIGKILL", 137],
    ["SIGTERM", 143],
  ];
  for (const [signal, want] of cases) assert.equal(signalExitCode(signal), want, signal);
});
