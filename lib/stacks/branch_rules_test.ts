import assert from "node:assert/strict";
import { branchCycle, pairProblem } from "./branch_rules.ts";

Deno.test("pairProblem() refuses a head that is its own base and a second open pull request for one pair", () => {
  const open = [{ number: 1, base_ref: "main" }, { number: 2, base_ref: "b2" }];
  const cases: [{ head: string; base: string; number?: number }, string | null][] = [
    [{ head: "b1", base: "main" }, "A pull request already exists for alice:b1."],
    [{ head: "b1", base: "b3" }, null],
    [{ head: "b1", base: "b1" }, "No commits between b1 and b1"],
    // An existing pull request does not clash with itself.
    [{ head: "b1", base: "main", number: 1 }, null],
    [{ head: "b1", base: "main", number: 2 }, "A pull request already exists for alice:b1."],
    [{ head: "b1", base: "b1", number: 1 }, "No commits between b1 and b1"],
  ];
  for (const [pair, want] of cases) {
    assert.equal(
      pairProblem(pair, open, { owner: "alice" })?.message ?? null,
      want,
      JSON.stringify(pair),
    );
  }
  assert.deepEqual(pairProblem({ head: "b1", base: "b1" }, [], { owner: "alice" }), {
    field: "base",
    code: "custom",
    message: "No commits between b1 and b1",
  });
});

Deno.test("branchCycle() finds the pull request whose head the stack already passed", () => {
  const cases: [string, string[], string | null][] = [
    ["main", ["a", "b", "c"], null],
    ["main", [], null],
    [
      "main",
      ["a", "b", "a"],
      "Pull request #3 would make the stack a cycle: its head a is already the head of #1",
    ],
    [
      "main",
      ["a", "main"],
      "Pull request #2 would make the stack a cycle: its head main is already the stack's base",
    ],
    [
      "main",
      ["main"],
      "Pull request #1 would make the stack a cycle: its head main is already the stack's base",
    ],
    [
      "dev",
      ["a", "b", "b", "a"],
      "Pull request #3 would make the stack a cycle: its head b is already the head of #2",
    ],
  ];
  for (const [base, heads, want] of cases) {
    const chain = heads.map((head_ref, i) => ({ number: i + 1, head_ref }));
    assert.equal(branchCycle(base, chain)?.message ?? null, want, `${base}: ${heads}`);
  }
  assert.deepEqual(branchCycle("main", [{ number: 7, head_ref: "main" }])?.field, "pull_requests");
});
