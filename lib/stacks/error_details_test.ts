import assert from "node:assert/strict";
import { errorDetails } from "./error_details.ts";

Deno.test("errorDetails() takes strings as they are, objects by message or field and code, and skips the rest", () => {
  const cases: [unknown, string][] = [
    [["Pull request #3 is locked"], "Pull request #3 is locked"],
    [
      [{ resource: "Stack", field: "pull_requests", code: "invalid", message: "Too few" }],
      "Too few",
    ],
    [[{ resource: "Stack", field: "head", code: "missing_field" }], "head missing_field"],
    [[{ code: "invalid" }], "invalid"],
    [["a", { message: "b" }, { field: "c", code: "d" }], "a; b; c d"],
    [[null, 7, [], {}, "", "x"], "x"],
    [[{ message: { nested: 1 }, field: "f", code: "c" }], "f c"],
    [undefined, ""],
    [null, ""],
    ["not a list", ""],
    [{ 0: "x" }, ""],
  ];
  for (const [errors, want] of cases) {
    assert.equal(errorDetails(errors), want, JSON.stringify(errors));
  }
});
