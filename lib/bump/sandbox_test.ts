import assert from "node:assert/strict";
import { sudoUser } from "./sandbox.ts";

Deno.test("sudoUser() takes SUDO_UID and SUDO_GID only as root, and only both numbers", () => {
  const both = { SUDO_UID: "1000", SUDO_GID: "1001" };
  assert.deepEqual(sudoUser(0, both), { uid: 1000, gid: 1001 });
  // Run by another user (`sudo -u`): they name the invoker, whom it cannot switch to.
  assert.equal(sudoUser(1000, both), null);
  // One missing or not a number: COMMAND would run as root with that user's HOME.
  assert.equal(sudoUser(0, { SUDO_UID: "1000" }), null);
  assert.equal(sudoUser(0, { SUDO_GID: "1000" }), null);
  assert.equal(sudoUser(0, { SUDO_UID: "1000", SUDO_GID: "" }), null);
  assert.equal(sudoUser(0, { SUDO_UID: "-1", SUDO_GID: "1000" }), null);
  assert.equal(sudoUser(0, { SUDO_UID: "0x3e8", SUDO_GID: "1000" }), null);
  assert.equal(sudoUser(0, {}), null);
});
