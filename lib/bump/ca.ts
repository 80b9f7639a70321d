/**
 * The session CA of `--ssl-bump`: one ECDSA P-256 CA per run, name-constrained
 * to the allowed domains, valid for at most a day, and leaves signed on demand
 * with one leaf key for the whole run (mitmproxy's certs.py is the model).
 *
 * @module
 */
import * as asn1js from "asn1js";
import * as pkijs from "pkijs";
import { domainProblem, isIpLiteral, normalizeDomain } from "./host_validation.ts";

pkijs.setEngine("webcrypto", new pkijs.CryptoEngine({ name: "webcrypto", crypto }));

/** Backdating of notBefore, for clock skew between the proxy and its clients. */
export const BACKDATE_MS = 5 * 60 * 1000;
/** Total validity of the CA, backdating included. */
export const CA_VALIDITY_MS = 24 * 60 * 60 * 1000;

const EC_KEY: EcKeyGenParams = { name: "ECDSA", namedCurve: "P-256" };
const OID = {
  commonName: "2.5.4.3",
  basicConstraints: "2.5.29.19",
  keyUsage: "2.5.29.15",
  subjectKeyId: "2.5.29.14",
  authorityKeyId: "2.5.29.35",
  nameConstraints: "2.5.29.30",
  subjectAltName: "2.5.29.17",
  extKeyUsage: "2.5.29.37",
  serverAuth: "1.3.6.1.5.5.7.3.1",
};

/** A leaf certificate and the run's leaf key, PEM encoded. */
export interface Leaf {
  cert: string;
  key: string;
}

/** The in-memory session CA. */
export interface SessionCa {
  /** The CA certificate, PEM. */
  certPem: string;
  /** The CA private key, PKCS#8 PEM (written to disk by the caller). */
  keyPem: string;
  /** The dNSName subtrees the CA permits (IP literals are iPAddress subtrees). */
  permitted: string[];
  notBefore: Date;
  notAfter: Date;
  /** Signs a leaf for one host name with the run's shared leaf key. */
  issueLeaf(host: string): Promise<Leaf>;
}

/**
 * Maps allow-list entries to permitted dNSName subtrees. Per RFC 5280 a
 * constraint `example.com` covers the name and every subdomain, which is
 * what OpenSSL, Go and rustls implement; `*.example.com` maps to
 * `example.com` too (the domain policy, not the CA, decides about the apex).
 * IP literals are left out: they become iPAddress subtrees (rustls refuses a
 * CA whose dNSName constraint is an IP address).
 *
 * @example
 * ```ts
 * permittedSubtrees(["*.example.com", "example.com", "Api.Org.net", "10.0.0.1"]);
 * // ["example.com", "api.org.net"]
 * ```
 */
export function permittedSubtrees(allowDomains: string[]): string[] {
  const out = new Set<string>();
  for (const d of allowDomains) {
    if (isIpLiteral(normalizeDomain(d))) continue;
    const name = d.trim().toLowerCase().replace(/^\*\./, "").replace(/^\./, "").replace(/\.$/, "");
    if (name !== "") out.add(name);
  }
  return [...out];
}

/** The 4 or 16 octets of an IP literal (IPv6 with or without brackets), or null. */
function ipOctets(literal: string): Uint8Array | null {
  const ip = normalizeDomain(literal);
  if (!isIpLiteral(ip)) return null;
  if (!ip.includes(":")) return new Uint8Array(ip.split(".").map(Number)); // isIpLiteral checked it
  let canonical: string; // the URL parser validates and compresses: "1::" or "::ffff:a00:1"
  try {
    canonical = new URL(`http://[${ip}]/`).hostname.slice(1, -1);
  } catch {
    return null;
  }
  const [head, tail] = canonical.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups = tail === undefined
    ? left
    : [...left, ...Array(8 - left.length - right.length).fill("0"), ...right];
  return new Uint8Array(groups.flatMap((g) => [parseInt(g, 16) >> 8, parseInt(g, 16) & 0xff]));
}

function ipName(octets: Uint8Array): pkijs.GeneralName {
  return new pkijs.GeneralName({ type: 7, value: new asn1js.OctetString({ valueHex: octets }) });
}

/**
 * Name constraints for the allow list: its domains as dNSName subtrees, its
 * IP literals as exact iPAddress subtrees, and every IPv4 or IPv6 address
 * excluded when none of that family is allowed (without an iPAddress
 * constraint, RFC 5280 leaves IP addresses unconstrained).
 */
function nameConstraints(allowDomains: string[]): pkijs.NameConstraints {
  const dns = permittedSubtrees(allowDomains);
  const ips = allowDomains.filter((d) => isIpLiteral(normalizeDomain(d))).map((d) => {
    const octets = ipOctets(d);
    if (!octets) {
      throw new RangeError(`Cannot constrain the session CA: not an IP address: ${d}`);
    }
    return octets;
  });
  if (dns.length === 0 && ips.length === 0) {
    throw new RangeError(
      "Cannot create a session CA without allowed domains: the allow list is empty",
    );
  }
  // With only IP addresses allowed, no DNS name may be: RFC 6761's "invalid" never resolves.
  if (dns.length === 0) dns.push("invalid");
  const subtree = (base: pkijs.GeneralName) => new pkijs.GeneralSubtree({ base });
  const withMask = (a: Uint8Array) => new Uint8Array([...a, ...a.map(() => 0xff)]);
  const excluded = [4, 16].filter((n) => !ips.some((a) => a.length === n))
    .map((n) => subtree(ipName(new Uint8Array(2 * n))));
  return new pkijs.NameConstraints({
    permittedSubtrees: [
      ...dns.map((d) => subtree(new pkijs.GeneralName({ type: 2, value: d }))),
      ...ips.map((a) => subtree(ipName(withMask(a)))),
    ],
    ...(excluded.length > 0 ? { excludedSubtrees: excluded } : {}),
  });
}

/** RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050. */
function time(date: Date): pkijs.Time {
  return new pkijs.Time({ type: date.getUTCFullYear() >= 2050 ? 1 : 0, value: date });
}

function pem(label: string, der: ArrayBuffer): string {
  const b64 = btoa(String.fromCharCode(...new Uint8Array(der)));
  return `-----BEGIN ${label}-----\n${b64.match(/.{1,64}/g)!.join("\n")}\n-----END ${label}-----\n`;
}

function serial(): asn1js.Integer {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[0] &= 0x7f;
  bytes[0] |= 0x01;
  return new asn1js.Integer({ valueHex: bytes.buffer });
}

/**
 * A subject of one common name (pkijs would put several attributes into one
 * multi-valued RDN), or an empty one for `null`.
 */
function name(cn: string | null): pkijs.RelativeDistinguishedNames {
  const rdn = new pkijs.RelativeDistinguishedNames();
  if (cn !== null) {
    rdn.typesAndValues.push(
      new pkijs.AttributeTypeAndValue({
        type: OID.commonName,
        value: new asn1js.Utf8String({ value: cn }),
      }),
    );
  }
  return rdn;
}

function ext(extnID: string, critical: boolean, value: { toSchema(): asn1js.AsnType }) {
  return new pkijs.Extension({
    extnID,
    critical,
    extnValue: value.toSchema().toBER(false),
  });
}

function rawExt(extnID: string, critical: boolean, value: asn1js.AsnType) {
  return new pkijs.Extension({ extnID, critical, extnValue: value.toBER(false) });
}

async function keyId(publicKey: CryptoKey): Promise<ArrayBuffer> {
  const raw = await crypto.subtle.exportKey("raw", publicKey);
  return await crypto.subtle.digest("SHA-1", raw);
}

/** Key usage bits: digitalSignature = 0x80, keyCertSign = 0x04, cRLSign = 0x02. */
function keyUsage(bits: number, unused: number): asn1js.BitString {
  return new asn1js.BitString({ valueHex: new Uint8Array([bits]).buffer, unusedBits: unused });
}

/** Options of {@linkcode createSessionCa}. */
export interface SessionCaOptions {
  /** Names the session in the CA subject. */
  sessionId: string;
  /** The run's allow list; the CA is constrained to exactly these domains. */
  allowDomains: string[];
  /** The clock, for tests. */
  now?: Date;
}

/**
 * Creates the session CA and the run's leaf key.
 *
 * @example
 * ```ts
 * const ca = await createSessionCa({ sessionId: "20260101-1", allowDomains: ["github.com"] });
 * const leaf = await ca.issueLeaf("api.github.com");
 * ```
 */
export async function createSessionCa(options: SessionCaOptions): Promise<SessionCa> {
  const constraints = nameConstraints(options.allowDomains);
  const permitted = constraints.permittedSubtrees!.filter((s) => s.base.type === 2)
    .map((s) => s.base.value as string);
  const now = options.now ?? new Date();
  const notBefore = new Date(Math.floor((now.getTime() - BACKDATE_MS) / 1000) * 1000);
  const notAfter = new Date(notBefore.getTime() + CA_VALIDITY_MS);
  const caKeys = await crypto.subtle.generateKey(EC_KEY, true, ["sign", "verify"]);
  const leafKeys = await crypto.subtle.generateKey(EC_KEY, true, ["sign", "verify"]);
  const caKeyId = await keyId(caKeys.publicKey);
  const caName = name(`forgekit session CA ${options.sessionId}`);

  const ca = new pkijs.Certificate();
  ca.version = 2;
  ca.serialNumber = serial();
  ca.issuer = caName;
  ca.subject = caName;
  ca.notBefore = time(notBefore);
  ca.notAfter = time(notAfter);
  ca.extensions = [
    ext(OID.basicConstraints, true, new pkijs.BasicConstraints({ cA: true, pathLenConstraint: 0 })),
    rawExt(OID.keyUsage, true, keyUsage(0x06, 1)),
    rawExt(OID.subjectKeyId, false, new asn1js.OctetString({ valueHex: caKeyId })),
    ext(OID.nameConstraints, true, constraints),
    // Server certificates only: verifiers that chain EKU (OpenSSL, Go, rustls) refuse
    // anything else it might sign, such as a client certificate.
    ext(OID.extKeyUsage, false, new pkijs.ExtKeyUsage({ keyPurposes: [OID.serverAuth] })),
  ];
  await ca.subjectPublicKeyInfo.importKey(caKeys.publicKey);
  await ca.sign(caKeys.privateKey, "SHA-256");
  const certPem = pem("CERTIFICATE", ca.toSchema(true).toBER(false));
  const keyPem = pem("PRIVATE KEY", await crypto.subtle.exportKey("pkcs8", caKeys.privateKey));
  const leafKeyPem = pem(
    "PRIVATE KEY",
    await crypto.subtle.exportKey("pkcs8", leafKeys.privateKey),
  );
  const leafKeyId = await keyId(leafKeys.publicKey);
  // Exported once: every leaf carries the same public key (an export costs as much as a signature).
  const leafSpki = new pkijs.PublicKeyInfo();
  await leafSpki.importKey(leafKeys.publicKey);

  async function issueLeaf(rawHost: string): Promise<Leaf> {
    const host = normalizeDomain(rawHost);
    const ip = ipOctets(host);
    if (!ip && (isIpLiteral(host) || host.includes("*") || domainProblem(host) !== null)) {
      throw new RangeError(
        `Cannot issue a certificate: not a host name or IP address: ${JSON.stringify(rawHost)}`,
      );
    }
    // A common name is at most 64 characters (X.520) and never an IP address (OpenSSL
    // would check it against the dNSName constraints); without one the SAN is critical.
    const cn = !ip && host.length <= 64 ? host : null;
    const leaf = new pkijs.Certificate();
    leaf.version = 2;
    leaf.serialNumber = serial();
    leaf.issuer = caName;
    leaf.subject = name(cn);
    leaf.notBefore = time(notBefore);
    leaf.notAfter = time(notAfter);
    leaf.extensions = [
      ext(OID.basicConstraints, true, new pkijs.BasicConstraints({ cA: false })),
      rawExt(OID.keyUsage, true, keyUsage(0x80, 7)),
      ext(OID.extKeyUsage, false, new pkijs.ExtKeyUsage({ keyPurposes: [OID.serverAuth] })),
      ext(
        OID.subjectAltName,
        cn === null,
        new pkijs.AltName({
          altNames: [ip ? ipName(ip) : new pkijs.GeneralName({ type: 2, value: host })],
        }),
      ),
      rawExt(OID.subjectKeyId, false, new asn1js.OctetString({ valueHex: leafKeyId })),
      ext(
        OID.authorityKeyId,
        false,
        new pkijs.AuthorityKeyIdentifier({
          keyIdentifier: new asn1js.OctetString({ valueHex: caKeyId }),
        }),
      ),
    ];
    leaf.subjectPublicKeyInfo = leafSpki;
    await leaf.sign(caKeys.privateKey, "SHA-256");
    return { cert: pem("CERTIFICATE", leaf.toSchema(true).toBER(false)), key: leafKeyPem };
  }

  return { certPem, keyPem, permitted, notBefore, notAfter, issueLeaf };
}
