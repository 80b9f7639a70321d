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
    [["*.XN--Bcher-KVA.example."], ["xn--bcher-kva.example"]],
    // IP literals become iPAddress constraints, never dNSName ones.
    [["github.com", "10.1.2.3", "::1", "[2001:db8::1]"], ["github.com"]],
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
    assert.match(out, /Extended Key Usage:\s+TLS Web Server Authentication\n/);
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
      "-x509_strict",
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

/** A leaf for `san` (e.g. `IP:10.0.0.1`) signed with the session CA's key by openssl: a stolen key. */
async function forge(
  dir: string,
  ca: { certPem: string; keyPem: string },
  san: string,
  eku = "serverAuth",
) {
  const [caPem, caKey, key, csr, ext, out] = [
    "ca.pem",
    "ca-key.pem",
    "k.pem",
    "r.csr",
    "ext",
    "f.pem",
  ]
    .map((f) => join(dir, f));
  await Deno.writeTextFile(caPem, ca.certPem);
  await Deno.writeTextFile(caKey, ca.keyPem);
  await Deno.writeTextFile(
    ext,
    `subjectAltName=critical,${san}\nextendedKeyUsage=${eku}\nauthorityKeyIdentifier=keyid\n`,
  );
  for (
    const args of [
      ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key],
      ["req", "-new", "-key", key, "-subj", "/", "-out", csr],
      ["x509", "-req", "-in", csr, "-CA", caPem, "-CAkey", caKey, "-days", "1", "-extfile", ext],
    ]
  ) {
    const r = await openssl([...args, ...(args[0] === "x509" ? ["-out", out] : [])]);
    assert.equal(r.code, 0, r.out);
  }
  return out;
}

Deno.test("with no IP address allowed, a leaf for any IP address fails openssl verify", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-ca-test-" });
  try {
    const ca = await createSessionCa({ sessionId: "s", allowDomains: ["github.com"] });
    for (const [san, ip] of [["IP:10.0.0.1", "10.0.0.1"], ["IP:::1", "::1"]]) {
      const leaf = await forge(dir, ca, san);
      const v = await openssl([
        "verify",
        "-CAfile",
        join(dir, "ca.pem"),
        "-verify_ip",
        ip,
        leaf,
      ]);
      assert.notEqual(v.code, 0, `${san}: ${v.out}`);
      assert.match(v.out, /excluded subtree violation/);
    }
    // The constraint constrains: the same forgery for an allowed name verifies.
    const ok = await forge(dir, ca, "DNS:api.github.com");
    const v = await openssl(["verify", "-x509_strict", "-CAfile", join(dir, "ca.pem"), ok]);
    assert.equal(v.code, 0, v.out);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an allowed IP literal is an exact iPAddress constraint and its leaf names it as an IP", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-ca-test-" });
  try {
    const ca = await createSessionCa({
      sessionId: "s",
      allowDomains: ["github.com", "10.1.2.3", "[2001:db8::1]"],
    });
    await Deno.writeTextFile(join(dir, "ca.pem"), ca.certPem);
    const text = (await openssl(["x509", "-text", "-noout", "-in", join(dir, "ca.pem")])).out;
    assert.match(
      text,
      /Permitted:\s+DNS:github\.com\s+IP:10\.1\.2\.3\/255\.255\.255\.255\s+IP:2001:DB8:0:0:0:0:0:1\/FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF\n/,
    );
    assert.doesNotMatch(text, /Excluded/);
    for (const ip of ["10.1.2.3", "2001:db8::1"]) {
      await Deno.writeTextFile(join(dir, "leaf.pem"), (await ca.issueLeaf(ip)).cert);
      const leaf = (await openssl(["x509", "-text", "-noout", "-in", join(dir, "leaf.pem")])).out;
      assert.match(leaf, /Subject: ?\n/); // an IP is no common name
      assert.match(leaf, /Subject Alternative Name: critical\s+IP Address:/);
      const v = await openssl([
        "verify",
        "-x509_strict",
        "-CAfile",
        join(dir, "ca.pem"),
        "-verify_ip",
        ip,
        join(dir, "leaf.pem"),
      ]);
      assert.equal(v.code, 0, `${ip}: ${v.out}`);
    }
    const other = await forge(dir, ca, "IP:10.1.2.4");
    const v = await openssl(["verify", "-CAfile", join(dir, "ca.pem"), other]);
    assert.match(v.out, /permitted subtree violation/);
    // rustls (Deno's TLS client) refused the whole CA when an IP was a dNSName constraint.
    assert.equal(
      await denoVerifies(ca.certPem, await ca.issueLeaf("api.github.com"), "api.github.com"),
      "ok",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("with only IP addresses allowed, no DNS name is permitted", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-ca-test-" });
  try {
    const ca = await createSessionCa({ sessionId: "s", allowDomains: ["10.1.2.3"] });
    const leaf = await forge(dir, ca, "DNS:github.com");
    const v = await openssl(["verify", "-CAfile", join(dir, "ca.pem"), leaf]);
    assert.match(v.out, /permitted subtree violation/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("validity dates from 2050 on are GeneralizedTime, earlier ones UTCTime", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-ca-test-" });
  try {
    const ca = await createSessionCa({
      sessionId: "s",
      allowDomains: ["github.com"],
      now: new Date("2049-12-31T12:00:00Z"),
    });
    await Deno.writeTextFile(join(dir, "ca.pem"), ca.certPem);
    await Deno.writeTextFile(join(dir, "leaf.pem"), (await ca.issueLeaf("github.com")).cert);
    for (const f of ["ca.pem", "leaf.pem"]) {
      const { out } = await openssl(["x509", "-noout", "-dates", "-in", join(dir, f)]);
      assert.match(out, /notBefore=Dec 31 11:55:00 2049 GMT/);
      assert.match(out, /notAfter=Jan {1,2}1 11:55:00 2050 GMT/);
      const der = (await openssl(["asn1parse", "-in", join(dir, f)])).out;
      assert.match(der, /UTCTIME +:491231115500Z\n.*GENERALIZEDTIME +:20500101115500Z\n/);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a leaf names the host exactly: lower case, no trailing dot, CN only up to 64 characters", async () => {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-ca-test-" });
  try {
    const ca = await createSessionCa({ sessionId: "s", allowDomains: ["github.com"] });
    await Deno.writeTextFile(join(dir, "ca.pem"), ca.certPem);
    const long = `${"a".repeat(60)}.github.com`;
    const cases: [string, RegExp][] = [
      [
        "API.GitHub.com.",
        /Subject: CN ?= ?api\.github\.com\n[^]*Alternative Name: \n\s+DNS:api\.github\.com\n/,
      ],
      // X.520 bounds a common name to 64 characters: a longer host is named by a critical SAN only.
      [long, new RegExp(`Subject: ?\\n[^]*Alternative Name: critical\\n\\s+DNS:${long}\\n`)],
    ];
    for (const [host, want] of cases) {
      await Deno.writeTextFile(join(dir, "leaf.pem"), (await ca.issueLeaf(host)).cert);
      const { out } = await openssl(["x509", "-text", "-noout", "-in", join(dir, "leaf.pem")]);
      assert.match(out, want);
      const v = await openssl([
        "verify",
        "-x509_strict",
        "-CAfile",
        join(dir, "ca.pem"),
        "-verify_hostname",
        host.toLowerCase().replace(/\.$/, ""),
        join(dir, "leaf.pem"),
      ]);
      assert.equal(v.code, 0, v.out);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** Serves `leaf` on loopback and connects with Deno's TLS client (rustls) for `host`. */
async function denoVerifies(caPem: string, leaf: { cert: string; key: string }, host: string) {
  const listener = Deno.listenTls({ hostname: "127.0.0.1", port: 0, ...leaf });
  const accepted = (async () => {
    const c = await listener.accept();
    await c.handshake().catch(() => {});
    c.close();
  })();
  try {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
    const tls = await Deno.startTls(tcp, { hostname: host, caCerts: [caPem] });
    try {
      await tls.handshake();
      return "ok";
    } catch (e) {
      return (e as Error).message;
    } finally {
      tls.close();
    }
  } finally {
    await accepted;
    listener.close();
  }
}

Deno.test("curl, python's ssl, git (GnuTLS) and Deno accept a leaf for an allowed host and refuse one outside", async () => {
  const { dir, ca } = await written();
  try {
    const leaves = { "api.github.com": await ca.issueLeaf("api.github.com") } as Record<
      string,
      { cert: string; key: string }
    >;
    leaves["evil.example.net"] = await ca.issueLeaf("evil.example.net");
    for (const [host, leaf] of Object.entries(leaves)) {
      const ok = host === "api.github.com";
      const deno = await denoVerifies(ca.certPem, leaf, host);
      if (ok) assert.equal(deno, "ok");
      else assert.match(deno, /NameConstraintViolation/);

      const server = Deno.serve(
        { hostname: "127.0.0.1", port: 0, onListen() {}, ...leaf },
        () => new Response("hello\n", { status: 404 }),
      );
      try {
        const port = server.addr.port;
        const curl = await new Deno.Command("curl", {
          args: [
            "-sS",
            "--cacert",
            join(dir, "ca.pem"),
            "--resolve",
            `${host}:${port}:127.0.0.1`,
            `https://${host}:${port}/`,
          ],
          stdout: "piped",
          stderr: "piped",
        }).output();
        const py = await new Deno.Command("python3", {
          args: [
            "-c",
            `import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
ctx.verify_flags |= ssl.VERIFY_X509_STRICT
s = socket.create_connection(("127.0.0.1", int(sys.argv[3])))
try:
    ctx.wrap_socket(s, server_hostname=sys.argv[2]).close()
    print("ok")
except ssl.SSLError as e:
    print(e)`,
            join(dir, "ca.pem"),
            host,
            String(port),
          ],
          stdout: "piped",
        }).output();
        const pyOut = dec.decode(py.stdout);
        const git = await new Deno.Command("git", {
          args: [
            "-c",
            `http.curloptResolve=${host}:${port}:127.0.0.1`,
            "ls-remote",
            `https://${host}:${port}/x.git`,
          ],
          env: { GIT_SSL_CAINFO: join(dir, "ca.pem"), GIT_TERMINAL_PROMPT: "0" },
          stdout: "null",
          stderr: "piped",
        }).output();
        const gitErr = dec.decode(git.stderr);
        if (ok) {
          assert.equal(dec.decode(curl.stdout), "hello\n", dec.decode(curl.stderr));
          assert.equal(pyOut, "ok\n");
          assert.match(gitErr, /repository .* not found/); // TLS passed, the server said 404
        } else {
          assert.equal(curl.code, 60, dec.decode(curl.stderr));
          assert.match(pyOut, /permitted subtree violation/);
          assert.match(gitErr, /server certificate verification failed/);
        }
      } finally {
        await server.shutdown();
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the CA vouches for servers only: a client certificate its key signs fails openssl verify", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const ca = await createSessionCa({ allowDomains: ["github.com"], sessionId: "t" });
    const verify = async (leaf: string, purpose: string) =>
      await openssl(["verify", "-purpose", purpose, "-CAfile", join(dir, "ca.pem"), leaf]);
    const server = await forge(dir, ca, "DNS:github.com");
    assert.equal((await verify(server, "sslserver")).code, 0, "a server leaf passes");
    const client = await forge(dir, ca, "DNS:github.com", "clientAuth");
    const r = await verify(client, "sslclient");
    assert.notEqual(r.code, 0, "a client certificate from a stolen key is refused");
    assert.match(r.out, /unsuitable certificate purpose/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
