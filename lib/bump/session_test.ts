import assert from "node:assert/strict";
import { join } from "node:path";
import { createSession, removeStaleSessions } from "./session.ts";

Deno.test("removeStaleSessions() removes only sessions whose process is gone", async () => {
  const root = await Deno.makeTempDir({ prefix: "forgekit-sessions-" });
  try {
    const live = createSession(root);
    const dead = createSession(root);
    // A pid no process has: the largest pid Linux hands out is below 2^22.
    await Deno.writeTextFile(join(dead.dir, "pid"), "4194999\n");
    // Named like a session, but no pid file: e.g. a --log-dir named so.
    const logDir = join(root, "fw-20261124-060000-abcdef12");
    await Deno.mkdir(logDir);
    await Deno.writeTextFile(join(logDir, "access.log"), "{}\n");
    // Another user's stale session.
    const theirs = join(root, "fw-20261124-060001-abcdef13");
    await Deno.mkdir(theirs);
    await Deno.writeTextFile(join(theirs, "pid"), "4194999\n");
    await Deno.chown(theirs, 65534, 65534);
    // Not of the form at all.
    await Deno.mkdir(join(root, "fw-logs-20261124"));

    assert.equal(removeStaleSessions(root), 1);
    const left = [...Deno.readDirSync(root)].map((e) => e.name).sort();
    assert.deepEqual(
      left,
      [
        "fw-20261124-060000-abcdef12",
        "fw-20261124-060001-abcdef13",
        "fw-logs-20261124",
        `fw-${live.id}`,
      ].sort(),
    );
    live.remove();
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
