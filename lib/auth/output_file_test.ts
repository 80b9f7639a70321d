import assert from "node:assert/strict";
import { join } from "node:path";
import { outputMode } from "./output_file.ts";

Deno.test("outputMode() renames over regular files, writes through devices and pipes", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const file = join(dir, "f");
    await Deno.writeTextFile(file, "", { mode: 0o600 });
    await Deno.chmod(file, 0o640);
    const fifo = join(dir, "p");
    await new Deno.Command("mkfifo", { args: [fifo] }).output();
    const cases: [Deno.FileInfo | null, unknown][] = [
      [null, { kind: "create" }],
      [await Deno.stat(file), { kind: "replace", mode: 0o640 }],
      [await Deno.stat("/dev/null"), { kind: "direct" }],
      [await Deno.stat(fifo), { kind: "direct" }],
      [await Deno.stat(dir), { problem: "is a directory" }],
    ];
    for (const [info, want] of cases) assert.deepEqual(outputMode(info), want);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
