import assert from "node:assert/strict";
import { runForgekit } from "./support/cli.ts";
import denoJson from "../deno.json" with { type: "json" };

Deno.test("forgekit --version prints the version from deno.json", async () => {
  const r = await runForgekit(["--version"]);
  assert.equal(r.code, 0);
  assert.equal(r.stdout.trim(), `forgekit ${denoJson.version}`);
});

Deno.test("forgekit help and --help list the commands and exit 0", async () => {
  for (const args of [["help"], ["--help"], ["-h"]]) {
    const r = await runForgekit(args);
    assert.equal(r.code, 0, args.join(" "));
    assert.match(r.stdout, /Usage: forgekit <command>/);
    for (const name of ["fetch", "auth", "stacks", "stack", "firewall"]) {
      assert.match(r.stdout, new RegExp(`^  ${name} `, "m"), `help lists ${name}`);
    }
  }
});

Deno.test("forgekit with no command prints help on stderr and exits 2", async () => {
  const r = await runForgekit([]);
  assert.equal(r.code, 2);
  assert.equal(r.stdout, "");
  assert.match(r.stderr, /Usage: forgekit/);
});

Deno.test("an unknown command is a one-line usage error with exit 2", async () => {
  const r = await runForgekit(["frobnicate"]);
  assert.equal(r.code, 2);
  assert.equal(r.stderr, "error: Unknown command: frobnicate (run: forgekit help)\n");
});

Deno.test("every command answers --help and `forgekit help <command>` with exit 0", async () => {
  for (const name of ["fetch", "auth", "stacks", "stack", "firewall"]) {
    const a = await runForgekit([name, "--help"]);
    assert.equal(a.code, 0, `${name} --help: ${a.stderr}`);
    assert.match(a.stdout, new RegExp(`forgekit ${name}`));
    const b = await runForgekit(["help", name]);
    assert.equal(b.code, 0);
    assert.equal(b.stdout, a.stdout);
  }
});
