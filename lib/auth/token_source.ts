/**
 * Resolving an entry's token: inline, from an environment variable, from the
 * cloud vendor's CLI (`az`), or by the OAuth 2.0 client-credentials flow.
 * Acquired tokens are cached until shortly before they expire, and callers
 * asking at the same time share one request.
 */
import { CliError, maskSecret } from "../cli/mod.ts";
import type { AuthEntry } from "./config.ts";
import { jsonErrorWithoutText } from "./redact.ts";

/** The resource id of the cloud-devops service in the vendor's directory. */
export const CLOUD_DEVOPS_RESOURCE = "499b84ac-1321-427f-aa17-267ca6975798";
/** Default login host of the directory (sovereign clouds set authority_host). */
export const DEFAULT_AUTHORITY = "login.microsoftonline.com";
/** A cached token is renewed this long before it expires. */
const EXPIRY_MARGIN_MS = 5 * 60_000;

/** A resolved token, or why the entry is skipped. */
export type TokenResult =
  | { token: string; source: string }
  | { token: null; reason: string };

/** How an entry's token would be found, for messages; never the token itself. */
export function tokenSourceLabel(entry: AuthEntry): string {
  switch (entry.auth) {
    case "cloud-cli":
      return "az CLI (az account get-access-token)";
    case "cloud-ad":
      return `client credentials ${entry.client_id} @ ${
        entry.authority_host ?? DEFAULT_AUTHORITY
      }/${entry.tenant_id}, secret $${entry.client_secret_env}`;
    default:
      return entry.token_env ? `$${entry.token_env}` : "inline token";
  }
}

/**
 * A variable is re-read at most this often, as auth.json itself is: a burst
 * of requests reads it once, and a changed variable is seen within the
 * interval. (Reading the environment is a call into the runtime, and costs
 * more than everything else the wrapper does per request.)
 */
const ENV_RECHECK_MS = 500;
const staticCache = new WeakMap<AuthEntry, { at: number; result: TokenResult }>();

/** Resolves a static (inline / env) token without any I/O beyond the environment. */
export function staticToken(entry: AuthEntry): TokenResult {
  const now = performance.now();
  const hit = staticCache.get(entry);
  if (hit !== undefined && now - hit.at < ENV_RECHECK_MS) return hit.result;
  const result = readStaticToken(entry);
  staticCache.set(entry, { at: now, result });
  return result;
}

/**
 * A token as it is sent: without the spaces and tabs around it and the line
 * breaks after it (a file read into a variable ends with one). A header's
 * value would lose them anyway; a basic credential or git's password would
 * not, and fail.
 */
function trimToken(token: string): string {
  return token.replace(/^[\t ]+|[\t\n\r ]+$/g, "");
}

/**
 * Whether a (trimmed) token cannot travel in a header: a control character
 * (such as a line break) inside it, or a character beyond Latin-1. The
 * runtime would refuse the header, for a line break with an error that
 * quotes it in full; in git's answer the token would be a line of its own.
 */
function unsendable(token: string): boolean {
  return /[^\x20-\x7e\x80-\xff]/.test(token);
}

const UNSENDABLE = "holds a line break or another character a header cannot carry";

function readStaticToken(entry: AuthEntry): TokenResult {
  if (entry.token_env) {
    const raw = Deno.env.get(entry.token_env);
    const v = raw === undefined ? "" : trimToken(raw);
    if (unsendable(v)) return { token: null, reason: `$${entry.token_env} ${UNSENDABLE}` };
    if (v) return { token: v, source: `$${entry.token_env} ${maskSecret(v)}` };
    if (!entry.token) {
      const why = raw === undefined || raw === "" ? "is not set" : "holds only white space";
      return { token: null, reason: `$${entry.token_env} ${why}` };
    }
  }
  const inline = trimToken(entry.token ?? "");
  if (unsendable(inline)) return { token: null, reason: `the inline token ${UNSENDABLE}` };
  if (inline) return { token: inline, source: `inline token ${maskSecret(inline)}` };
  return { token: null, reason: "no token" };
}

/** An acquired token and when it expires (ms since the epoch). */
export interface Cached {
  token: string;
  expiresAt: number;
}

const tokenCache = new Map<string, Cached>();
const inflight = new Map<string, Promise<Cached>>();

async function cachedToken(key: string, acquire: () => Promise<Cached>): Promise<string> {
  const hit = tokenCache.get(key);
  if (hit && hit.expiresAt - EXPIRY_MARGIN_MS > Date.now()) return hit.token;
  let pending = inflight.get(key);
  if (!pending) {
    pending = acquire().finally(() => inflight.delete(key));
    inflight.set(key, pending);
  }
  const got = await pending;
  tokenCache.set(key, got);
  return got.token;
}

/** Forgets acquired tokens (tests). */
export function clearTokenCache(): void {
  tokenCache.clear();
}

/** Counts `az` runs and token requests, for tests and `-v`. */
export const acquisitions = { cli: 0, ad: 0 };

async function azToken(): Promise<Cached> {
  acquisitions.cli++;
  const args = [
    "account",
    "get-access-token",
    "--resource",
    CLOUD_DEVOPS_RESOURCE,
    "--output",
    "json",
  ];
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("az", { args, stdout: "piped", stderr: "piped", stdin: "null" })
      .output();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new CliError("cloud-cli: the az command was not found on PATH", {
        hint: "install the Azure CLI and run: az login",
        cause: err,
      });
    }
    throw new CliError("cloud-cli: cannot run az", { cause: err });
  }
  if (!out.success) {
    const detail = new TextDecoder().decode(out.stderr).trim().split("\n").at(-1) ?? "";
    throw new CliError(`cloud-cli: az account get-access-token failed: ${detail}`, {
      hint: "run: az login",
    });
  }
  return azTokenFromOutput(new TextDecoder().decode(out.stdout), Date.now());
}

/**
 * The token and its expiry in what `az account get-access-token --output json`
 * printed. Throws a CliError for output that is not that JSON, never quoting
 * it (it may hold the token). Pure.
 *
 * @example
 * ```ts
 * azTokenFromOutput('{"accessToken": "eyJ…", "expires_on": 4070908800}', Date.now());
 * ```
 */
export function azTokenFromOutput(stdout: string, now: number): Cached {
  let parsed: unknown;
  try {
    parsed = JSON.parse(stdout);
  } catch (err) {
    throw new CliError("cloud-cli: az printed no JSON", {
      hint: "run: az login",
      cause: new SyntaxError(jsonErrorWithoutText(err)),
    });
  }
  const fields = (typeof parsed === "object" && parsed !== null ? parsed : {}) as Record<
    string,
    unknown
  >;
  const token = acquiredToken("cloud-cli: az printed", "accessToken", fields.accessToken, {
    hint: "run: az login",
  });
  let expiresAt = now + 30 * 60_000;
  const epoch = Number(fields.expires_on);
  if (fields.expires_on !== undefined && fields.expires_on !== "" && Number.isFinite(epoch)) {
    expiresAt = epoch * 1000;
  } else if (typeof fields.expiresOn === "string") {
    const t = Date.parse(fields.expiresOn.replace(" ", "T"));
    if (!Number.isNaN(t)) expiresAt = t;
  }
  return { token, expiresAt };
}

/**
 * A token acquired from az or a token endpoint, as it is sent (trimmed, as
 * a static one is); throws a CliError, without quoting it, when it is
 * missing, not a string, or holds a character no header can carry.
 */
function acquiredToken(
  from: string,
  field: string,
  value: unknown,
  options: { hint: string },
): string {
  const token = typeof value === "string" ? trimToken(value) : "";
  if (token === "") throw new CliError(`${from} no ${field}`, options);
  if (unsendable(token)) throw new CliError(`${from} an ${field} that ${UNSENDABLE}`, options);
  return token;
}

async function adToken(
  entry: AuthEntry,
  secret: string,
  doFetch: (url: string, init: RequestInit) => Promise<Response>,
): Promise<Cached> {
  acquisitions.ad++;
  const authority = entry.authority_host ?? DEFAULT_AUTHORITY;
  const url = `https://${authority}/${encodeURIComponent(entry.tenant_id!)}/oauth2/v2.0/token`;
  const body = new URLSearchParams({
    grant_type: "client_credentials",
    client_id: entry.client_id!,
    client_secret: secret,
    scope: `${CLOUD_DEVOPS_RESOURCE}/.default`,
  });
  let res: Response;
  try {
    res = await doFetch(url, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
      body,
      // A 307/308 would replay the client secret to wherever it points.
      redirect: "manual",
    });
  } catch (err) {
    throw new CliError(`cloud-ad: token request to ${authority} failed`, {
      hint: "check the network and authority_host",
      cause: err,
    });
  }
  const text = await res.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text);
  } catch { /* reported below */ }
  if (!res.ok || typeof json.access_token !== "string") {
    const desc = String(json.error_description ?? json.error ?? `${res.status} ${res.statusText}`)
      .split(/\r?\n/)[0].replaceAll(secret, maskSecret(secret));
    throw new CliError(
      `cloud-ad: the token request for client ${entry.client_id} was rejected: ${desc}`,
      { hint: `check tenant_id, client_id and the secret in $${entry.client_secret_env}` },
    );
  }
  const token = acquiredToken(
    `cloud-ad: ${authority} answered client ${entry.client_id} with`,
    "access_token",
    json.access_token,
    { hint: "check authority_host" },
  );
  const expiresIn = Number(json.expires_in ?? 3600);
  return { token, expiresAt: Date.now() + (Number.isFinite(expiresIn) ? expiresIn : 3600) * 1000 };
}

/**
 * What can be told of an entry's token without I/O: the static token, or
 * why the entry is skipped (also a `cloud-ad` entry whose secret variable
 * is unset); null when only asking (az, the token endpoint) would tell.
 */
export function tokenWithoutIo(entry: AuthEntry): TokenResult | null {
  if (entry.auth === "cloud-cli") return null;
  if (entry.auth === "cloud-ad") {
    if (Deno.env.get(entry.client_secret_env!)) return null;
    return { token: null, reason: `$${entry.client_secret_env} is not set` };
  }
  return staticToken(entry);
}

/**
 * Resolves the token of any entry. Tokens the entry cannot resolve (an unset
 * variable) skip it; a failing `az` or a rejected secret is an error.
 */
export async function resolveToken(
  entry: AuthEntry,
  doFetch: (url: string, init: RequestInit) => Promise<Response>,
): Promise<TokenResult> {
  const known = tokenWithoutIo(entry);
  if (known !== null) return known;
  if (entry.auth === "cloud-cli") {
    const token = await cachedToken("cli", azToken);
    return { token, source: `az CLI ${maskSecret(token)}` };
  }
  if (entry.auth === "cloud-ad") {
    const secret = Deno.env.get(entry.client_secret_env!)!;
    const key = `ad|${
      entry.authority_host ?? DEFAULT_AUTHORITY
    }|${entry.tenant_id}|${entry.client_id}`;
    const token = await cachedToken(key, () => adToken(entry, secret, doFetch));
    return { token, source: `client credentials ${maskSecret(token)}` };
  }
  return staticToken(entry);
}
