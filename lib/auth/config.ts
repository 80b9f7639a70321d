/**
 * auth.json: its types and its strict validation. Pure: text in, entries out.
 */
import { maskSecret, usageError } from "../cli/mod.ts";
import { hostPatternProblem, normalizePattern } from "./host_pattern.ts";
import { jsonErrorWithoutText } from "./redact.ts";

/** Provider keys (canonical). */
export type Provider = "codehost" | "cloud-devops" | "repohost";
/** Auth schemes (canonical). */
export type Scheme = "bearer" | "basic-pat" | "basic" | "cloud-cli" | "cloud-ad";

/** One validated entry of `providers`. */
export interface AuthEntry {
  /** Position in the file: `providers[index]`. */
  index: number;
  /** Normalised host patterns. */
  hosts: string[];
  provider: Provider;
  auth: Scheme;
  token?: string;
  token_env?: string;
  username?: string;
  tenant_id?: string;
  client_id?: string;
  client_secret_env?: string;
  /** Login host of cloud-ad; default `login.microsoftonline.com`. */
  authority_host?: string;
}

/** A validated auth.json. */
export interface AuthConfig {
  /** The file it came from. */
  path: string;
  entries: AuthEntry[];
}

const PROVIDERS: Record<string, Provider> = {
  codehost: "codehost",
  "cloud-devops": "cloud-devops",
  repohost: "repohost",
  github: "codehost",
  "azure-devops": "cloud-devops",
  bitbucket: "repohost",
};

const SCHEMES: Record<string, Scheme> = {
  bearer: "bearer",
  "basic-pat": "basic-pat",
  basic: "basic",
  "cloud-cli": "cloud-cli",
  "cloud-ad": "cloud-ad",
  "azure-cli": "cloud-cli",
  "azure-ad": "cloud-ad",
};

/** Which schemes each provider supports. */
export const SUPPORTED_SCHEMES: Record<Provider, Scheme[]> = {
  codehost: ["bearer"],
  "cloud-devops": ["basic-pat", "bearer", "cloud-cli", "cloud-ad"],
  repohost: ["bearer", "basic"],
};

const ENTRY_KEYS = [
  "hosts",
  "provider",
  "auth",
  "token",
  "token_env",
  "username",
  "tenant_id",
  "client_id",
  "client_secret_env",
  "authority_host",
];

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A key's value in a table, never one inherited from Object.prototype. */
function lookup<T>(table: Record<string, T>, key: string): T | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}

/** A JSON value's kind, for messages about a field that may hold a secret. */
function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

/** Keys starting with `//` are comments, as written by `forgekit auth init`. */
function isComment(key: string): boolean {
  return key.startsWith("//");
}

function closest(key: string, options: string[]): string | undefined {
  const dist = (a: string, b: string) => {
    const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array(b.length).fill(0)]);
    for (let j = 1; j <= b.length; j++) d[0][j] = j;
    for (let i = 1; i <= a.length; i++) {
      for (let j = 1; j <= b.length; j++) {
        d[i][j] = Math.min(
          d[i - 1][j] + 1,
          d[i][j - 1] + 1,
          d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1),
        );
      }
    }
    return d[a.length][b.length];
  };
  let best: string | undefined;
  let bestD = 3;
  for (const o of options) {
    const dd = dist(key, o);
    if (dd < bestD) [best, bestD] = [o, dd];
  }
  return best;
}

/**
 * Parses and validates the text of an auth.json. Every problem is a usage
 * error (exit 2) naming the place and the fix.
 *
 * @param label how the file is named in messages, e.g. `auth.json`
 * @example
 * ```ts
 * const cfg = parseAuthConfig('{"providers": []}', "/home/me/.forgekit/auth.json");
 * ```
 */
export function parseAuthConfig(text: string, path: string, label = "auth.json"): AuthConfig {
  const fail = (where: string, what: string, hint: string): never => {
    throw usageError(`${label}${where ? ` ${where}` : ""}: ${what}`, hint);
  };
  let doc: unknown;
  try {
    // A byte order mark is what some editors put first; JSON.parse refuses it.
    doc = JSON.parse(text.startsWith("\uFEFF") ? text.slice(1) : text);
  } catch (err) {
    throw usageError(
      `${label}: not valid JSON`,
      `fix the syntax in ${path}, or run: forgekit auth init`,
      new SyntaxError(jsonErrorWithoutText(err)),
    );
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    fail("", 'must be a JSON object with a "providers" array', 'write {"providers": [...]}');
  }
  const top = doc as Record<string, unknown>;
  for (const key of Object.keys(top)) {
    if (key !== "providers" && !isComment(key)) {
      fail("", `unknown key "${key}"`, 'the only top-level key is "providers"');
    }
  }
  if (!Array.isArray(top.providers)) {
    fail("", 'has no "providers" array', 'write {"providers": [ … ]}; see: forgekit auth init');
  }
  const entries = (top.providers as unknown[]).map((raw, index) => parseEntry(raw, index, fail));
  return { path, entries };
}

type Fail = (where: string, what: string, hint: string) => never;

function parseEntry(raw: unknown, index: number, fail: Fail): AuthEntry {
  const at = `providers[${index}]`;
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    fail(
      at,
      "must be an object",
      'each entry looks like {"hosts": [...], "provider": ..., "auth": ...}',
    );
  }
  const e = raw as Record<string, unknown>;
  for (const key of Object.keys(e)) {
    if (ENTRY_KEYS.includes(key) || isComment(key)) continue;
    const near = closest(key, ENTRY_KEYS);
    fail(
      `${at}`,
      `unknown key "${key}"`,
      near ? `did you mean "${near}"?` : `known keys: ${ENTRY_KEYS.join(", ")}`,
    );
  }
  for (const key of ENTRY_KEYS) {
    if (key !== "hosts" && key in e && typeof e[key] !== "string") {
      // What lands in a secret's field (or its variable's name) by mistake is often the secret.
      const secretish = key === "token" || key === "token_env" || key === "client_secret_env";
      const got = secretish ? kindOf(e[key]) : JSON.stringify(e[key]);
      fail(`${at}.${key}`, `must be a string (got: ${got})`, "quote the value");
    }
  }
  const str = (key: string) => e[key] as string | undefined;

  if (!Array.isArray(e.hosts) || e.hosts.length === 0) {
    fail(
      `${at}.hosts`,
      "must be a non-empty array of host names",
      'e.g. "hosts": ["api.github.com"]',
    );
  }
  const hosts = (e.hosts as unknown[]).map((h, i) => {
    if (typeof h !== "string") {
      fail(
        `${at}.hosts[${i}]`,
        `must be a string (got: ${JSON.stringify(h)})`,
        "quote the host name",
      );
    }
    const problem = hostPatternProblem(h as string);
    if (problem) {
      fail(
        `${at}.hosts[${i}]`,
        `"${h}" ${
          problem === "is not a supported pattern"
            ? problem
            : `is not a supported pattern: it ${problem}`
        }`,
        'use an exact host or "*.example.com"',
      );
    }
    return normalizePattern(h as string);
  });

  if (str("provider") === undefined) {
    fail(`${at}`, 'has no "provider"', 'set "provider" to codehost, cloud-devops or repohost');
  }
  const provider = lookup(PROVIDERS, str("provider")!);
  if (!provider) {
    fail(
      `${at}.provider`,
      `unknown provider "${str("provider")}"`,
      "use codehost, cloud-devops or repohost (aliases: github, azure-devops, bitbucket)",
    );
  }
  if (str("auth") === undefined) {
    fail(
      `${at}`,
      'has no "auth"',
      `set "auth" to one of: ${SUPPORTED_SCHEMES[provider].join(", ")}`,
    );
  }
  const auth = lookup(SCHEMES, str("auth")!);
  if (!auth) {
    fail(
      `${at}.auth`,
      `unknown auth scheme "${str("auth")}"`,
      "use bearer, basic-pat, basic, cloud-cli or cloud-ad (aliases: azure-cli, azure-ad)",
    );
  }
  if (!SUPPORTED_SCHEMES[provider].includes(auth)) {
    fail(
      `${at}.auth`,
      `provider ${provider} does not support "${str("auth")}"`,
      `${provider} supports: ${SUPPORTED_SCHEMES[provider].join(", ")}`,
    );
  }
  for (const key of ["token_env", "client_secret_env"]) {
    const v = str(key);
    if (v !== undefined && !ENV_NAME.test(v)) {
      // Masked: what lands here by mistake is often the secret itself.
      fail(
        `${at}.${key}`,
        `"${maskSecret(v)}" is not an environment variable name`,
        "name the variable that holds the secret, e.g. GH_TOKEN",
      );
    }
  }
  if (["bearer", "basic-pat", "basic"].includes(auth)) {
    if (!str("token") && !str("token_env")) {
      fail(`${at}`, `${auth} needs "token" or "token_env"`, 'add "token_env": "NAME_OF_VARIABLE"');
    }
  } else if (str("token") !== undefined || str("token_env") !== undefined) {
    fail(
      `${at}`,
      `${auth} takes no "token" or "token_env"`,
      `remove them; ${auth} acquires its own token`,
    );
  }
  if (auth === "basic") {
    if (!str("username")) {
      fail(`${at}`, 'basic needs "username"', "for repohost API tokens it is the account email");
    }
  }
  if (str("username") !== undefined) {
    if (auth !== "basic") {
      fail(`${at}.username`, `is only used with auth "basic"`, "remove it");
    }
    const username = str("username")!;
    if (/\p{Cc}/u.test(username)) {
      // Not quoted: what follows a line break is often a pasted token. A
      // line break would also split git's credential answer (key=value lines).
      fail(
        `${at}.username`,
        "contains a control character",
        "a Basic username is one line of text, e.g. the account email",
      );
    }
    if (username.includes(":")) {
      // What follows the colon is often the token ("user:token").
      fail(
        `${at}.username`,
        `"${username.slice(0, username.indexOf(":"))}:****" contains ":"`,
        "a Basic username cannot contain a colon",
      );
    }
  }
  if (auth === "cloud-ad") {
    for (const key of ["tenant_id", "client_id", "client_secret_env"]) {
      if (!str(key)) fail(`${at}`, `cloud-ad needs "${key}"`, `add "${key}"`);
    }
    const authority = str("authority_host");
    // A login host is a name: no pattern, and no IPv6 address (which a URL would need in brackets).
    if (
      authority !== undefined && hostPatternProblem(authority) !== null ||
      authority?.startsWith("*.") || authority?.includes(":")
    ) {
      fail(
        `${at}.authority_host`,
        `"${authority}" is not a host name`,
        "e.g. login.microsoftonline.us for a sovereign cloud",
      );
    }
  } else {
    for (const key of ["tenant_id", "client_id", "client_secret_env", "authority_host"]) {
      if (str(key) !== undefined) {
        fail(`${at}.${key}`, `is only used with auth "cloud-ad"`, "remove it");
      }
    }
  }
  return {
    index,
    hosts,
    provider,
    auth,
    token: str("token"),
    token_env: str("token_env"),
    username: str("username"),
    tenant_id: str("tenant_id"),
    client_id: str("client_id"),
    client_secret_env: str("client_secret_env"),
    authority_host: str("authority_host"),
  };
}
