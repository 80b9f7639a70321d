import assert from "node:assert/strict";
import {
  chainProblems,
  type ChainPull,
  type Mergeability,
  mergeability,
  mergePlan,
  requestedNumbers,
  stackOpen,
  unstackSplit,
} from "./chain.ts";

const pr = (
  number: number,
  base: string,
  head: string,
  over: Partial<ChainPull> = {},
): ChainPull => ({
  number,
  state: "open",
  merged: false,
  draft: false,
  head_ref: head,
  base_ref: base,
  stack_id: null,
  ...over,
});

const pulls = new Map<number, ChainPull>([
  [1, pr(1, "main", "a")],
  [2, pr(2, "a", "b")],
  [3, pr(3, "b", "c")],
  [4, pr(4, "main", "x")],
  [5, pr(5, "c", "d", { state: "closed" })],
  [6, pr(6, "c", "e", { stack_id: 9 })],
  [7, pr(7, "c", "f", { stack_id: 9 })],
]);

Deno.test("chainProblems() states each rule of create and add", () => {
  const cases: [number[], ChainPull | null, string[]][] = [
    [[1, 2, 3], null, []],
    [[1, 3], null, [
      "Pull requests must form a stack, where each PR's base ref is the previous PR's head ref",
    ]],
    [[1, 1], null, ["Pull request #1 appears more than once"]],
    [[1, 99], null, ["Pull request #99 does not exist"]],
    [[3, 5], null, ["Pull request #5 is not open"]],
    [[3, 6, 7], null, [
      "Pull requests #6, #7 are already stacked",
      "Pull requests must form a stack, where each PR's base ref is the previous PR's head ref",
    ]],
    [[3], pulls.get(2)!, []],
    [[4], pulls.get(2)!, [
      "Pull requests must form a stack, where each PR's base ref is the previous PR's head ref",
    ]],
  ];
  for (const [numbers, below, want] of cases) {
    assert.deepEqual(
      chainProblems(numbers, pulls, below).map((p) => p.message),
      want,
      numbers.join(","),
    );
  }
});

Deno.test("requestedNumbers() enforces the type and the 2..100 / 1..100 limits", () => {
  assert.deepEqual(requestedNumbers([1], 2, 100).problems.map((p) => p.message), [
    "Stack must contain at least two pull requests",
  ]);
  assert.deepEqual(requestedNumbers([], 1, 100).problems.map((p) => p.message), [
    "At least one pull request must be added",
  ]);
  assert.equal(
    requestedNumbers(Array.from({ length: 101 }, (_, i) => i + 1), 2, 100).problems.length,
    1,
  );
  assert.equal(
    requestedNumbers("1,2", 2, 100).problems[0].message,
    "pull_requests must be an array of pull request numbers",
  );
  assert.equal(requestedNumbers([1, 2.5], 2, 100).problems.length, 1);
});

Deno.test("requestedNumbers() takes only safe positive integers, which name exactly one pull request", () => {
  const bad: unknown[] = [
    [1, 2 ** 53 + 1],
    [1, 1e300],
    [1, 0],
    [1, -2],
    [1, "2"],
    [1, null],
    [1, true],
    [1, [2]],
  ];
  for (const value of bad) {
    assert.deepEqual(
      requestedNumbers(value, 2, 100).problems.map((p) => p.message),
      ["pull_requests must be an array of pull request numbers"],
      JSON.stringify(value),
    );
  }
  assert.deepEqual(requestedNumbers([1, 2 ** 53 - 1], 2, 100).problems, []);
});

Deno.test("mergePlan() cascades from the bottom, retargets the next, and is blocked by a closed PR below", () => {
  const s = [pr(1, "main", "a"), pr(2, "a", "b"), pr(3, "b", "c")];
  assert.deepEqual(mergePlan(s, 1), { ok: true, merge: [1, 2], retarget: 3 });
  assert.deepEqual(mergePlan(s, 2), { ok: true, merge: [1, 2, 3], retarget: null });
  const closedMiddle = [s[0], { ...s[1], state: "closed" as const }, s[2]];
  assert.equal(mergePlan(closedMiddle, 2).ok, false);
  // The closed #2 is retargeted, not #3 past it: the chain stays main ← b ← c for when #2 reopens.
  assert.deepEqual(mergePlan(closedMiddle, 0), { ok: true, merge: [1], retarget: 2 });
  const mergedBottom = [{ ...s[0], merged: true, state: "closed" as const }, s[1], s[2]];
  assert.deepEqual(mergePlan(mergedBottom, 1), { ok: true, merge: [2], retarget: 3 });
  assert.equal(mergePlan(mergedBottom, 0).ok, false);
});

Deno.test("stackOpen() and unstackSplit() follow the specification", () => {
  assert.equal(stackOpen([{ state: "closed" }, { state: "open" }]), true);
  assert.equal(stackOpen([{ state: "closed" }, { state: "closed" }]), false);
  const split = unstackSplit([{ merged: true, n: 1 }, { merged: false, n: 2 }]);
  assert.deepEqual(split.stay.map((p) => p.n), [1]);
  assert.deepEqual(split.leave.map((p) => p.n), [2]);
});

Deno.test("mergeability() says mergeable and mergeable_state as GitHub does, by the merge rules", () => {
  const s = [pr(1, "main", "a"), pr(2, "a", "b"), pr(3, "b", "c")];
  const merged = { state: "closed" as const, merged: true };
  const cases: [string, ChainPull[], number, boolean, Mergeability][] = [
    ["open, nothing below", s, 0, true, { mergeable: true, mergeable_state: "clean" }],
    ["open, open below (merged with it)", s, 2, true, {
      mergeable: true,
      mergeable_state: "clean",
    }],
    ["merged", [{ ...s[0], ...merged }], 0, true, { mergeable: null, mergeable_state: "unknown" }],
    [
      "closed, not merged",
      [{ ...s[0], state: "closed" }],
      0,
      true,
      { mergeable: null, mergeable_state: "unknown" },
    ],
    ["a draft", [{ ...s[0], draft: true }], 0, true, { mergeable: true, mergeable_state: "draft" }],
    [
      "a draft below",
      [s[0], { ...s[1], draft: true }, s[2]],
      2,
      true,
      { mergeable: true, mergeable_state: "blocked" },
    ],
    [
      "a closed one below",
      [{ ...s[0], state: "closed" }, s[1]],
      1,
      true,
      { mergeable: true, mergeable_state: "blocked" },
    ],
    [
      "merged ones below",
      [{ ...s[0], ...merged }, s[1]],
      1,
      true,
      { mergeable: true, mergeable_state: "clean" },
    ],
    ["no base branch", s, 0, false, { mergeable: false, mergeable_state: "dirty" }],
  ];
  for (const [what, stack, index, baseExists, want] of cases) {
    assert.deepEqual(mergeability(stack, index, baseExists), want, what);
  }
});
