/** The session CA and its leaves, checked with the real openssl. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { CA_VALIDITY_MS, createSessionCa, permittedSubtrees } from "../lib/bump/ca.ts";

const dec = new TextDecoder();

async function openssl(args: string[]): Promise<{ code: number; out: string }> {
  const r = await new Deno.Command("openssl", { args, stdout: "piped", stderr: "piped" }).output();
  return { code: r.code, out: dec.decode(r.stdout) + dec.decode(r.stderr) };
}

async function written() {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-ca-test-" });
  const ca = await createSessionCa({
    sessionId: "20261123T000000",
    allowDomains: ["*.github.com", "example.org"],
  });
  await Deno.writeTextFile(join(dir, "ca.pem"), ca.certPem);
  const leaf = await ca.issueLeaf("api.github.com");
  await Deno.writeTextFile(join(dir, "leaf.pem"), leaf.cert);
  const outside = await ca.issueLeaf("evil.example.net");
  await Deno.writeTextFile(join(dir, "outside.pem"), outside.cert);
  return { dir, ca };
}

Deno.test("permittedSubtrees maps allow-list entries to name-constraint subtrees", () => {
  const cases: [string[], string[]][] = [
    [["example.com"], ["example.com"]],
    [["*.example.com"], ["example.com"]],
    [["*.example.com", "Example.COM", "api.org.net."], ["example.com", "api.org.net"]],
  ];
  for (const [input, want] of cases) assert.deepEqual(permittedSubtrees(input), want);
});

Deno.test("createSessionCa refuses an empty allow list", async () => {
  await assert.rejects(
    createSessionCa({ sessionId: "x", allowDomains: [] }),
    /allow list is empty/,
  );
});

Deno.test("the session CA is CA:TRUE pathlen:0, signs certificates only and is name-constrained", async () => {
  const { dir } = await written();
  try {
    const { out } = await openssl(["x509", "-text", "-noout", "-in", join(dir, "ca.pem")]);
    assert.match(out, /Basic Constraints: critical\s+CA:TRUE, pathlen:0/);
    assert.match(out, /Key Usage: critical\s+Certificate Sign, CRL Sign/);
    assert.match(
      out,
      /Name Constraints: critical\s+Permitted:\s+DNS:github\.com\s+DNS:example\.org/,
    );
    assert.match(out, /Subject: CN ?= ?forgekit session CA 20261123T000000\n/);
    assert.match(out, /Subject Key Identifier/);
    assert.match(out, /ASN1 OID: prime256v1/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the session CA is valid for at most one day, backdated a few minutes", async () => {
  const { dir, ca } = await written();
  try {
    const { out } = await openssl([
      "x509",
      "-noout",
      "-startdate",
      "-enddate",
      "-in",
      join(dir, "ca.pem"),
    ]);
    const start = Date.parse(out.match(/notBefore=(.*)/)![1]);
    const end = Date.parse(out.match(/notAfter=(.*)/)![1]);
    assert.ok(end - start <= 24 * 3600 * 1000, `validity ${end - start} ms`);
    assert.equal(end - start, CA_VALIDITY_MS);
    assert.ok(start < Date.now() - 60_000 && start > Date.now() - 15 * 60_000);
    assert.equal(ca.notBefore.getTime(), start);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a leaf carries SAN, AKI, serverAuth and CA:FALSE, and verifies against the CA", async () => {
  const { dir } = await written();
  try {
    const { out } = await openssl(["x509", "-text", "-noout", "-in", join(dir, "leaf.pem")]);
    assert.match(out, /Subject Alternative Name:\s+DNS:api\.github\.com/);
    assert.match(out, /Authority Key Identifier/);
    assert.match(out, /Extended Key Usage:\s+TLS Web Server Authentication/);
    assert.match(out, /Basic Constraints: critical\s+CA:FALSE/);
    const v = await openssl([
      "verify",
      "-CAfile",
      join(dir, "ca.pem"),
      "-verify_hostname",
      "api.github.com",
      join(dir, "leaf.pem"),
    ]);
    assert.equal(v.code, 0, v.out);
    assert.match(v.out, /leaf\.pem: OK/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a leaf for a host outside the name constraints fails openssl verify", async () => {
  const { dir } = await written();
  try {
    const v = await openssl(["verify", "-CAfile", join(dir, "ca.pem"), join(dir, "outside.pem")]);
    assert.notEqual(v.code, 0);
    assert.match(v.out, /permitted subtree violation/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("leaves share one key and get distinct random serials", async () => {
  const ca = await createSessionCa({ sessionId: "s", allowDomains: ["github.com"] });
  const a = await ca.issueLeaf("a.github.com");
  const b = await ca.issueLeaf("b.github.com");
  assert.equal(a.key, b.key);
  assert.notEqual(a.cert, b.cert);
  const dir = await Deno.makeTempDir();
  try {
    const serials = [];
    for (const [i, c] of [a.cert, b.cert].entries()) {
      await Deno.writeTextFile(join(dir, `${i}.pem`), c);
      serials.push(
        (await openssl(["x509", "-noout", "-serial", "-in", join(dir, `${i}.pem`)])).out,
      );
    }
    assert.notEqual(serials[0], serials[1]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
