/**
 * `forgekit firewall` run by an unprivileged user: the sandbox then needs a
 * user namespace (`unshare --user --map-root-user`). As root, the test drops
 * to `nobody` with setpriv and runs the built bundle with a copy of the Deno
 * executable (both where `nobody` can read them); as any other user it runs
 * them as that user. Real curl inside, real origins on loopback through the
 * test upstream proxy, --ssl-bump with URL patterns.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { assertNamespaces, needsNamespaces } from "./support/namespaces.ts";
import { startOrigins } from "./support/origin.ts";
import { buildBundle } from "../build.ts";

const NOBODY = 65534;
const dec = new TextDecoder();

/** A world-readable directory holding deno, the bundle and the test CA, owned by the user. */
async function unprivilegedKit(
  caPem: string,
): Promise<{ dir: string; deno: string; bundle: string; ca: string }> {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-rootless-" });
  await Deno.chmod(dir, 0o755);
  const deno = join(dir, "deno");
  try {
    await Deno.link(Deno.execPath(), deno); // cheap when on the same file system
  } catch {
    await Deno.copyFile(Deno.execPath(), deno);
  }
  // The release bundle, copied where the user can read it (the clone may be under /root).
  const bundle = join(dir, "forgekit.js");
  await Deno.copyFile(await buildBundle(), bundle);
  const ca = join(dir, "ca.pem");
  await Deno.writeTextFile(ca, caPem);
  for (const sub of ["home", "deno-dir", "logs"]) {
    await Deno.mkdir(join(dir, sub), { mode: 0o700 });
    if (Deno.uid() === 0) await Deno.chown(join(dir, sub), NOBODY, NOBODY);
  }
  return { dir, deno, bundle, ca };
}

Deno.test(
  "an unprivileged user's firewall (user namespace) filters domains and URLs and hides the key",
  needsNamespaces,
  async () => {
    assertNamespaces();
    const o = await startOrigins(
      ["api.example", "other.example"],
      (_req, hit) => new Response(`hello ${hit.host} ${hit.path}\n`),
    );
    const kit = await unprivilegedKit(o.ca.cert);
    try {
      const asUser = Deno.uid() === 0
        ? ["setpriv", `--reuid=${NOBODY}`, `--regid=${NOBODY}`, "--clear-groups", "--"]
        : [];
      const curl = "curl -sS -m 10";
      const script = [
        `echo "ok $(${curl} https://api.example/repos/a/b)"`,
        `echo "path $(${curl} -o /dev/null -w '%{http_code}' https://api.example/admin)"`,
        `echo "domain $(${curl} -o /dev/null -w '%{http_connect}' https://other.example/ 2>/dev/null)"`,
        // This run's session directory is visible, its ssl/ directory empty (the key hidden),
        // and root inside cannot take the cover away.
        `for d in /tmp/fw-[0-9]*/ssl; do umount "$d" 2>/dev/null; echo "ssl $(ls -A "$d" | wc -l) $(cat "$d/ca-key.pem" 2>/dev/null | wc -c)"; done`,
        // The upstream proxy's password stays with forgekit.
        `echo "password $(grep -rls 'pw-cana[r]y' /tmp/fw-[0-9]*/ /proc/[0-9]*/environ 2>/dev/null | wc -l)"`,
        // Root inside is the invoking user outside: a user namespace.
        `echo "uid-map $(awk '{print $1, $2}' /proc/self/uid_map)"`,
        `echo "home $HOME"`,
      ].join("; ");
      const [cmd, ...pre] = [...asUser, kit.deno];
      const out = await new Deno.Command(cmd, {
        args: [
          ...pre,
          "run",
          "-A",
          kit.bundle,
          "firewall",
          "--log-dir",
          join(kit.dir, "logs"),
          "--allow-domains",
          "api.example",
          "--ssl-bump",
          "--upstream-ca",
          kit.ca,
          "--allow-urls",
          "https://api.example/repos/**",
          "--",
          "sh",
          "-c",
          script,
        ],
        clearEnv: true,
        env: {
          PATH: Deno.env.get("PATH")!,
          HOME: join(kit.dir, "home"),
          DENO_DIR: join(kit.dir, "deno-dir"),
          DENO_NO_UPDATE_CHECK: "1",
          NO_COLOR: "1",
          HTTPS_PROXY: o.proxy.url.replace("http://", "http://user:pw-canary@"),
          HTTP_PROXY: o.proxy.url,
          // As `sudo -u nobody forgekit …` sets them: the invoker, whom a
          // sandbox in a user namespace cannot switch to. Ignored.
          SUDO_UID: "1000",
          SUDO_GID: "1000",
        },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stdout = dec.decode(out.stdout);
      const stderr = dec.decode(out.stderr);
      assert.equal(out.code, 0, stderr);
      assert.deepEqual(stdout.trim().split("\n"), [
        "ok hello api.example /repos/a/b",
        "path 403",
        "domain 403",
        "ssl 0 0",
        "password 0",
        `uid-map 0 ${Deno.uid() === 0 ? NOBODY : Deno.uid()}`,
        `home ${join(kit.dir, "home")}`,
      ]);
      assert.match(stderr, /api\.example {2}1\n/, "the summary lists the blocked URL's host");
      assert.equal(
        o.hits.filter((h) => h.path === "/admin").length,
        0,
        "the blocked URL never left",
      );
      const log = (await Deno.readTextFile(join(kit.dir, "logs", "access.log"))).trim().split("\n")
        .map((l) => JSON.parse(l));
      assert.ok(
        log.some((e) => e.url === "https://api.example/repos/a/b" && e.status === 200),
        "the allowed URL is logged in full",
      );
    } finally {
      await o.close();
      await Deno.remove(kit.dir, { recursive: true });
    }
  },
);
