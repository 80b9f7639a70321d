/**
 * Test certificates made with the real `openssl` command: a CA per test run
 * and leaves for any set of host names, so that loopback servers can be
 * reached over real TLS under real names (github.com, api.bitbucket.org, …).
 */
import { join } from "node:path";

/** A leaf certificate and its key, PEM encoded. */
export interface TestLeaf {
  cert: string;
  key: string;
}

/** A certificate authority made for one test run. */
export interface TestCa {
  /** The CA certificate, PEM. */
  cert: string;
  /** Path of the CA certificate file (for DENO_CERT, curl --cacert, …). */
  certPath: string;
  /** Issues a server certificate for the given DNS names (and IP addresses). */
  issue(names: string[]): Promise<TestLeaf>;
}

async function openssl(args: string[], cwd: string): Promise<void> {
  const out = await new Deno.Command("openssl", { args, cwd, stdout: "piped", stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`openssl ${args[0]} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
}

const IP = /^(\d+\.\d+\.\d+\.\d+|[0-9a-f:]+)$/i;

/**
 * Makes a fresh CA in a temporary directory.
 *
 * @example
 * ```ts
 * const ca = await makeTestCa();
 * const leaf = await ca.issue(["api.github.com"]);
 * Deno.serve({ port: 0, cert: leaf.cert, key: leaf.key }, handler);
 * ```
 */
export async function makeTestCa(name = "forgekit test CA"): Promise<TestCa> {
  const dir = await Deno.makeTempDir({ prefix: "forgekit-ca-" });
  await openssl([
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
    "-days",
    "2",
    "-subj",
    `/CN=${name}`,
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
  ], dir);
  const certPath = join(dir, "ca.pem");
  let serial = 0;
  return {
    cert: await Deno.readTextFile(certPath),
    certPath,
    async issue(names: string[]): Promise<TestLeaf> {
      const id = `leaf${++serial}`;
      const san = names.map((n) => (IP.test(n) ? `IP:${n}` : `DNS:${n}`)).join(",");
      await Deno.writeTextFile(
        join(dir, `${id}.ext`),
        `subjectAltName=${san}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n`,
      );
      await openssl([
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        `${id}.key`,
        "-out",
        `${id}.csr`,
        "-subj",
        `/CN=${names[0]}`,
      ], dir);
      await openssl([
        "x509",
        "-req",
        "-in",
        `${id}.csr`,
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-set_serial",
        String(1000 + serial),
        "-out",
        `${id}.pem`,
        "-days",
        "1",
        "-extfile",
        `${id}.ext`,
      ], dir);
      return {
        cert: await Deno.readTextFile(join(dir, `${id}.pem`)),
        key: await Deno.readTextFile(join(dir, `${id}.key`)),
      };
    },
  };
}
