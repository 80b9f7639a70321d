import assert from "node:assert/strict";
import {
  BYTES_PER_FRAME,
  FRAME_ALLOWANCE,
  FrameAllowance,
  type FrameAllowanceOptions,
  FRAMES_PER_SECOND,
  FRAMES_PER_STREAM,
} from "./frame_allowance.ts";

/** What happens to a connection: frames without work at a time (ms), or work done. */
type Step =
  | { idle: number; at?: number }
  | { opened: number }
  | { bytes: number }
  | { framesSent: number }
  | { earn: number };

/** Runs `steps` from time 0: how many idle frames were allowed before the first refused (all: -1). */
function firstRefused(steps: Step[], options: FrameAllowanceOptions = {}): number {
  const frames = new FrameAllowance(0, options);
  let allowed = 0;
  for (const step of steps) {
    if ("idle" in step) {
      for (let i = 0; i < step.idle; i++) {
        if (!frames.idle(step.at ?? 0)) return allowed;
        allowed++;
      }
    } else if ("opened" in step) { for (let i = 0; i < step.opened; i++) frames.opened(); }
    else if ("bytes" in step) frames.bytes(step.bytes);
    else if ("framesSent" in step) frames.framesSent(step.framesSent);
    else frames.earn(step.earn);
  }
  return -1;
}

Deno.test("FrameAllowance: frames without work are allowed only as far as work and time pay for them", () => {
  const cases: [string, Step[], FrameAllowanceOptions, number][] = [
    ["a flood is refused once the allowance is spent", [{ idle: 5000 }], {}, FRAME_ALLOWANCE],
    ["the allowance, to the frame", [{ idle: FRAME_ALLOWANCE }], {}, -1],
    [
      "each stream opened pays for a few more",
      [{ opened: 3 }, { idle: 5000 }],
      {},
      FRAME_ALLOWANCE,
    ],
    [
      "streams opened while it is spent pay for theirs",
      [{ idle: FRAME_ALLOWANCE }, { opened: 3 }, { idle: 100 }],
      {},
      FRAME_ALLOWANCE + 3 * FRAMES_PER_STREAM,
    ],
    [
      "body bytes pay for frames",
      [{ idle: FRAME_ALLOWANCE }, { bytes: 64 * BYTES_PER_FRAME }, { idle: 100 }],
      {},
      FRAME_ALLOWANCE + 64,
    ],
    [
      "DATA frames sent pay nothing by default",
      [{ idle: FRAME_ALLOWANCE }, { framesSent: 100 }, { idle: 1 }],
      {},
      FRAME_ALLOWANCE,
    ],
    [
      "DATA frames sent pay when asked",
      [{ idle: FRAME_ALLOWANCE }, { framesSent: 100 }, { idle: 1000 }],
      { perFrameSent: 4 },
      FRAME_ALLOWANCE + 400,
    ],
    [
      "time pays for keep-alive frames",
      [{ idle: FRAME_ALLOWANCE }, { idle: FRAMES_PER_SECOND, at: 1000 }, { idle: 1, at: 1000 }],
      {},
      FRAME_ALLOWANCE + FRAMES_PER_SECOND,
    ],
    [
      "a PING a second forever is never refused",
      Array.from({ length: 100_000 }, (_, i) => ({ idle: 1, at: i * 1000 })),
      { frames: 10, perSecond: 1 },
      -1,
    ],
    [
      "work saves up no more than the allowance",
      [{ opened: 1000 }, { bytes: 1 << 30 }, { idle: 5000, at: 60_000 }],
      {},
      FRAME_ALLOWANCE,
    ],
    ["options set the allowance", [{ idle: 50 }], { frames: 20 }, 20],
    [
      "options set what work pays",
      [{ idle: 20 }, { opened: 1 }, { bytes: 2048 }, { idle: 20 }],
      { frames: 20, perStream: 3, bytesPerFrame: 1024 },
      25,
    ],
    [
      "earn() adds what the caller says",
      [{ idle: FRAME_ALLOWANCE }, { earn: 7 }, { idle: 10 }],
      {},
      FRAME_ALLOWANCE + 7,
    ],
  ];
  for (const [name, steps, options, refused] of cases) {
    assert.equal(firstRefused(steps, options), refused, name);
  }
});

Deno.test("FrameAllowance: left counts down, below zero once spent out", () => {
  const frames = new FrameAllowance(0, { frames: 2 });
  assert.deepEqual([frames.idle(0), frames.idle(0), frames.idle(0)], [true, true, false]);
  assert.equal(frames.left, -1);
});
