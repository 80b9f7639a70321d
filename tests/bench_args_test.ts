import assert from "node:assert/strict";
import { REPO_ROOT, runCommand } from "./support/cli.ts";

Deno.test("bench:firewall refuses an unknown part with one line and exit 2, before starting anything", async () => {
  const out = await runCommand(Deno.execPath(), ["run", "-A", "bench/firewall.ts", "spliced"], {
    cwd: REPO_ROOT,
  });
  assert.equal(out.code, 2);
  assert.equal(out.stdout, "");
  assert.equal(
    out.stderr,
    'error: unknown part "spliced"; use: deno task bench:firewall [splice|bump]\n',
  );
});
