/**
 * The one fetch wrapper every outbound request of forgekit goes through:
 * host matching, 401/403 fallback, a final unauthenticated request,
 * redirects followed here so that a token never crosses to a host outside
 * its entry, and release-download resolution.
 */
import { CliError } from "../cli/mod.ts";
import type { AuthConfig, AuthEntry } from "./config.ts";
import { loadAuthConfig, recentAuthConfig } from "./config_file.ts";
import { matchAnyHost, normalizeHost } from "./host_pattern.ts";
import { fetchReleaseAsset, parseReleaseDownload, releaseApiFor } from "./releases.ts";
import { authorizationHeader } from "./schemes.ts";
import { resolveToken, staticToken } from "./token_source.ts";

/** Options of {@linkcode authFetch}. */
export interface AuthFetchOptions {
  /** Path of auth.json; default FORGEKIT_AUTH_FILE or ~/.forgekit/auth.json. */
  authFile?: string;
  /** An already loaded config (null: no file); skips reading authFile. */
  config?: AuthConfig | null;
  /** Receives one line per attempt / redirect (tokens masked), for `-v`. */
  verbose?: (line: string) => void;
  /** A Deno HTTP client (custom CA or proxy); default Deno's, which honours HTTPS_PROXY and DENO_CERT. */
  client?: Deno.HttpClient;
  /** Resolve release-download URLs through the API (default true). */
  resolveReleases?: boolean;
}

/** At most this many redirects are followed. */
export const MAX_REDIRECTS = 10;

const REDIRECT = new Set([301, 302, 303, 307, 308]);

/** The web host of repohost cloud: it accepts neither scheme of the API host. */
const REPOHOST_WEB = "bitbucket.org";

/** Entries whose hosts match, in file order. */
export function matchingEntries(config: AuthConfig | null, host: string): AuthEntry[] {
  if (!config) return [];
  let byHost = matchCache.get(config);
  if (!byHost) matchCache.set(config, byHost = new Map());
  let found = byHost.get(host);
  if (found === undefined) {
    const h = normalizeHost(host);
    found = h === null
      ? []
      : config.entries.filter((e) =>
        matchAnyHost(e.hosts, h) && !(e.provider === "repohost" && h === REPOHOST_WEB)
      );
    if (byHost.size < 1024) byHost.set(host, found);
  }
  return found;
}

const matchCache = new WeakMap<AuthConfig, Map<string, AuthEntry[]>>();

interface Credential {
  header: string;
  /** The hosts the header may travel to. */
  hosts: readonly string[];
}

interface Prepared {
  method: string;
  headers: Headers;
  body: Uint8Array<ArrayBuffer> | null;
}

async function prepare(init: RequestInit): Promise<Prepared> {
  const method = (init.method ?? "GET").toUpperCase();
  const headers = new Headers(init.headers);
  let body: Uint8Array<ArrayBuffer> | null = null;
  if (init.body !== undefined && init.body !== null) {
    // Buffered once so that every attempt and 307/308 hop can replay it.
    const req = new Request("http://body.invalid/", { method: "POST", body: init.body, headers });
    body = new Uint8Array(await req.arrayBuffer());
    const type = req.headers.get("content-type");
    if (type && !headers.has("content-type")) headers.set("content-type", type);
  }
  return { method, headers, body };
}

function stripReason(cred: Credential, from: URL, to: URL): string | null {
  if (from.protocol === "https:" && to.protocol === "http:") return "https to http downgrade";
  const host = normalizeHost(to.hostname);
  if (host === null || !matchAnyHost(cred.hosts, host)) {
    return `${to.hostname} is outside the entry's hosts`;
  }
  return null;
}

async function followRedirects(
  start: URL,
  req: Prepared,
  cred: Credential | null,
  options: AuthFetchOptions,
): Promise<Response> {
  let url = start;
  let method = req.method;
  let body = req.body;
  let headers = req.headers;
  let authorized = cred !== null;
  for (let hop = 0;; hop++) {
    let h: HeadersInit = headers;
    if (authorized) {
      // Pairs, not a Headers copy: fetch converts either, and pairs are cheaper.
      const pairs: [string, string][] = [];
      headers.forEach((v, k) => {
        if (k !== "authorization") pairs.push([k, v]);
      });
      pairs.push(["authorization", cred!.header]);
      h = pairs;
    } else if (headers.has("authorization")) {
      const copy = new Headers(headers);
      copy.delete("authorization");
      h = copy;
    }
    const init: RequestInit & { client?: Deno.HttpClient } = {
      method,
      headers: h,
      redirect: "manual",
    };
    if (body !== null) init.body = body;
    if (options.client) init.client = options.client;
    const res = await fetch(url.href, init); // a string: a URL object costs a re-parse in fetch
    if (!REDIRECT.has(res.status)) return res;
    const location = res.headers.get("location");
    if (location === null) return res;
    await res.body?.cancel();
    if (hop >= MAX_REDIRECTS) {
      throw new CliError(`${req.method} ${start.href}: more than ${MAX_REDIRECTS} redirects`, {
        hint: "the server redirects in a loop",
      });
    }
    let next: URL;
    try {
      next = new URL(location, url);
    } catch (err) {
      throw new CliError(`${req.method} ${url.href} redirected to an invalid URL: ${location}`, {
        cause: err,
      });
    }
    if (next.protocol !== "https:" && next.protocol !== "http:") {
      throw new CliError(
        `${req.method} ${url.href} redirected to an unsupported URL: ${next.href}`,
      );
    }
    let note = "no authorization";
    if (authorized) {
      const why = stripReason(cred!, url, next);
      if (why) {
        authorized = false; // once stripped, never restored
        note = `authorization stripped: ${why}`;
      } else note = "authorization kept";
    }
    options.verbose?.(`* redirect ${res.status} -> ${next.href} (${note})`);
    if (
      (res.status === 303 && method !== "HEAD") ||
      ((res.status === 301 || res.status === 302) && method === "POST")
    ) {
      method = "GET";
      body = null;
      headers = new Headers(headers);
      headers.delete("content-type");
      headers.delete("content-length");
    }
    url = next;
  }
}

function describe(entry: AuthEntry): string {
  return `providers[${entry.index}] (${entry.provider} ${entry.auth})`;
}

/**
 * Fetches a URL with the credentials auth.json assigns to its host.
 *
 * Entries whose hosts match are tried in file order; a 401 or 403 moves on
 * to the next, and when all are exhausted exactly one unauthenticated
 * request is made. Redirects (at most 10) are followed here: the
 * Authorization header survives a hop only to a host inside the entry's
 * hosts and never from https to http.
 *
 * @example
 * ```ts
 * const res = await authFetch("https://api.github.com/user");
 * ```
 */
export async function authFetch(
  input: string | URL,
  init: RequestInit = {},
  options: AuthFetchOptions = {},
): Promise<Response> {
  const url = new URL(input);
  const config = options.config !== undefined
    ? options.config
    : recentAuthConfig(options.authFile) ?? await loadAuthConfig(options.authFile);
  const req = init.body === undefined || init.body === null
    ? {
      method: (init.method ?? "GET").toUpperCase(),
      headers: new Headers(init.headers),
      body: null,
    }
    : await prepare(init);
  const log = options.verbose;
  const doFetch = (u: string, i: RequestInit) =>
    authFetch(u, i, { ...options, config, resolveReleases: false });

  if (
    options.resolveReleases !== false && config && (req.method === "GET" || req.method === "HEAD")
  ) {
    const ref = parseReleaseDownload(url);
    const host = ref && normalizeHost(url.hostname);
    const api = host ? releaseApiFor(host, config.entries) : null;
    if (ref && api) return await fetchReleaseAsset(url, api, ref, doFetch, log);
  }

  // A caller's own Authorization header is used as is, for this host only.
  const own = req.headers.get("authorization");
  if (own !== null) {
    const host = normalizeHost(url.hostname) ?? url.hostname;
    log?.(`* ${req.method} ${url.href} with the caller's own Authorization header`);
    return await followRedirects(url, req, { header: own, hosts: [host] }, options);
  }

  const entries = matchingEntries(config, url.hostname);
  let attempt = 0;
  for (const entry of entries) {
    // Static tokens resolve without a promise; cloud-cli/cloud-ad may need I/O.
    const got = entry.auth === "cloud-cli" || entry.auth === "cloud-ad"
      ? await resolveToken(
        entry,
        (u, i) => fetch(u, { ...i, client: options.client } as RequestInit),
      )
      : staticToken(entry);
    if (got.token === null) {
      log?.(`* skipped ${describe(entry)}: ${got.reason}`);
      continue;
    }
    attempt++;
    log?.(
      `* attempt ${attempt}: ${describe(entry)}, token ${got.source}: ${req.method} ${url.href}`,
    );
    const res = await followRedirects(
      url,
      req,
      { header: authorizationHeader(entry, got.token), hosts: entry.hosts },
      options,
    );
    log?.(`* attempt ${attempt}: ${res.status} ${res.statusText}`);
    if (res.status !== 401 && res.status !== 403) return res;
    await res.body?.cancel();
  }
  log?.(`* attempt ${attempt + 1}: unauthenticated: ${req.method} ${url.href}`);
  const res = await followRedirects(url, req, null, options);
  log?.(`* attempt ${attempt + 1}: ${res.status} ${res.statusText}`);
  return res;
}
