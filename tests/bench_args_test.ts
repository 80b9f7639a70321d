import assert from "node:assert/strict";
import { REPO_ROOT } from "./support/cli.ts";

Deno.test("bench:firewall refuses an unknown part with one line and exit 2, before starting anything", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "bench/firewall.ts", "spliced"],
    cwd: REPO_ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 2);
  assert.equal(new TextDecoder().decode(out.stdout), "");
  assert.equal(
    new TextDecoder().decode(out.stderr),
    'error: unknown part "spliced"; use: deno task bench:firewall [splice|bump]\n',
  );
});
