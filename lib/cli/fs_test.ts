import assert from "node:assert/strict";
import { join } from "node:path";
import { findCommand, makeDirs } from "./fs.ts";

Deno.test("makeDirs() returns the topmost directory it created, or null", async () => {
  const root = await Deno.makeTempDir();
  try {
    assert.equal(await makeDirs(join(root, "a", "b")), join(root, "a"));
    assert.ok((await Deno.stat(join(root, "a", "b"))).isDirectory);
    assert.equal(await makeDirs(join(root, "a", "b")), null);
    assert.equal(await makeDirs(root), null);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("makeDirs() names a part of the path that is a file, and creates nothing", async () => {
  const root = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(join(root, "f"), "");
    await assert.rejects(
      () => makeDirs(join(root, "f", "x", "y")),
      (err: Error) =>
        err instanceof Deno.errors.NotADirectory &&
        err.message === `${join(root, "f")} is not a directory`,
    );
    assert.deepEqual([...Deno.readDirSync(root)].map((e) => e.name), ["f"]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("findCommand() finds executables on PATH or by path, and nothing else", async () => {
  const root = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(join(root, "tool"), "#!/bin/sh\n", { mode: 0o755 });
    await Deno.writeTextFile(join(root, "data"), "", { mode: 0o644 });
    await Deno.mkdir(join(root, "dir"));
    const path = `/nonexistent::${root}`;
    const cases: [string, string | null][] = [
      ["tool", join(root, "tool")],
      [join(root, "tool"), join(root, "tool")],
      ["data", null],
      ["dir", null],
      ["missing", null],
      ["", null],
      [join(root, "missing"), null],
    ];
    for (const [cmd, want] of cases) assert.equal(findCommand(cmd, path), want, cmd);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
