import assert from "node:assert/strict";
import { join } from "node:path";
import { createBumpSession } from "./ssl_bump.ts";

function options(sessionDir: string) {
  return {
    sessionDir,
    sessionId: "test",
    allowDomains: ["github.com"],
    patterns: [],
    upstreamCaCerts: [],
    upstream: { noProxy: [] },
    log: () => {},
  };
}

Deno.test("createBumpSession never overwrites a key file it did not create", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fw-test-" });
  try {
    // A directory someone else prepared, with the key path pointing at a victim file.
    const victim = join(dir, "victim");
    await Deno.writeTextFile(victim, "precious");
    await Deno.mkdir(join(dir, "ssl"));
    await Deno.symlink(victim, join(dir, "ssl", "ca-key.pem"));
    await assert.rejects(createBumpSession(options(dir)), /Cannot write the session CA/);
    assert.equal(await Deno.readTextFile(victim), "precious");
    assert.ok((await Deno.lstat(join(dir, "ssl", "ca-key.pem"))).isSymlink);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("close() overwrites the key file with zeros in place, then deletes it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fw-test-" });
  const old = Deno.umask(0o077);
  try {
    const bump = await createBumpSession(options(dir));
    const key = join(bump.sslDir, "ca-key.pem");
    const modes = await Promise.all(
      [bump.sslDir, key, bump.caCertPath, bump.trustBundlePath].map(async (p) =>
        (await Deno.stat(p)).mode! & 0o777
      ),
    );
    // The certificates are for the sandboxed user too, whatever the umask.
    assert.deepEqual(modes, [0o700, 0o600, 0o644, 0o644]);
    const pem = await Deno.readTextFile(key);
    assert.match(pem, /^-----BEGIN PRIVATE KEY-----\n/);
    await Deno.link(key, join(dir, "same-inode"));
    await bump.close();
    await assert.rejects(Deno.stat(key), Deno.errors.NotFound);
    assert.deepEqual(await Deno.readFile(join(dir, "same-inode")), new Uint8Array(pem.length));
  } finally {
    Deno.umask(old);
    await Deno.remove(dir, { recursive: true });
  }
});
