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
import {
  fetchReleaseAsset,
  parseReleaseDownload,
  type ReleaseApi,
  releaseApiFor,
  releaseApiOnPort,
} from "./releases.ts";
import { authorizationHeader } from "./schemes.ts";
import { entriesNotUsedReason, hasUserinfo } from "./entry_use.ts";
import { plainHttpProblem } from "./plain_http.ts";
import { parseUrlArgument, redactUrl } from "./redact.ts";
import { resolveToken, staticToken, type TokenResult } from "./token_source.ts";

/** Options of {@linkcode authFetch}. */
export interface AuthFetchOptions {
  /** Path of auth.json; default FORGEKIT_AUTH_FILE or ~/.forgekit/auth.json. */
  authFile?: string;
  /** An already loaded config (null: no file); skips reading authFile. */
  config?: AuthConfig | null;
  /** Receives one line per attempt / redirect (tokens masked), for `-v`. */
  verbose?: (line: string) => void;
  /** Receives what was tried, as data (never a token), for callers that explain a failure. */
  onEvent?: (event: AuthEvent) => void;
  /** A Deno HTTP client (custom CA or proxy); default Deno's, which honours HTTPS_PROXY and DENO_CERT. */
  client?: Deno.HttpClient;
  /** Resolve release-download URLs through the API (default true). */
  resolveReleases?: boolean;
  /** Follow redirects (default true); false returns a 3xx as the answer (webhook deliveries). */
  followRedirects?: boolean;
}

/**
 * What {@linkcode authFetch} did for a request, in order: auth.json's
 * entries set aside, entries without a token, and each request sent with the
 * entry whose token it carried (null: none) and the status it got.
 */
export type AuthEvent =
  | { kind: "not-used"; host: string; reason: string }
  | { kind: "skipped"; entry: string; reason: string }
  | { kind: "answered"; attempt: number; entry: string | null; status: number; statusText: string };

/** At most this many redirects are followed. */
export const MAX_REDIRECTS = 10;

const REDIRECT = new Set([301, 302, 303, 307, 308]);

/** The web host of repohost cloud: it accepts neither scheme of the API host. */
const REPOHOST_WEB = "bitbucket.org";

/** Parsed request URLs by their text: clients ask for the same few URLs again and again. Never mutated. */
const urlCache = new Map<string, URL>();

function parseUrl(input: string | URL): URL {
  const text = typeof input === "string" ? input : input.href;
  let url = urlCache.get(text);
  if (url === undefined) {
    url = new URL(text);
    if (urlCache.size >= 256) urlCache.clear();
    urlCache.set(text, url);
  }
  return url;
}

/** The header last built for each entry, with the token it was built from. */
const headerCache = new WeakMap<AuthEntry, { token: string; header: string }>();

function headerFor(entry: AuthEntry, token: string): string {
  const hit = headerCache.get(entry);
  if (hit !== undefined && hit.token === token) return hit.header;
  const header = authorizationHeader(entry, token);
  headerCache.set(entry, { token, header });
  return header;
}

/**
 * Whether an entry's token may go to a (normalised) host: one of its hosts,
 * except a repohost token on the web host, which accepts none.
 */
function entryCovers(entry: AuthEntry, host: string): boolean {
  return matchAnyHost(entry.hosts, host) &&
    !(entry.provider === "repohost" && host === REPOHOST_WEB);
}

/** What a config decides for one host; cached, since it is pure. */
interface HostPlan {
  /** Entries whose hosts match, in file order. */
  entries: AuthEntry[];
  /** The API a release download on this host resolves through, if any. */
  releaseApi: ReleaseApi | null;
}

const planCache = new WeakMap<AuthConfig, Map<string, HostPlan>>();
const NO_PLAN: HostPlan = { entries: [], releaseApi: null };

/**
 * {@linkcode entriesNotUsedReason} of the parsed (cached, never mutated) URL
 * objects: a repeated request does not decide again (host checks cost a few
 * microseconds, as much as the rest of the wrapper).
 */
const notUsedCache = new WeakMap<URL, string | null>();

function notUsedReason(url: URL): string | null {
  let reason = notUsedCache.get(url);
  if (reason === undefined) notUsedCache.set(url, reason = entriesNotUsedReason(url));
  return reason;
}

function hostPlan(config: AuthConfig | null, host: string): HostPlan {
  if (!config) return NO_PLAN;
  let byHost = planCache.get(config);
  if (!byHost) planCache.set(config, byHost = new Map());
  let plan = byHost.get(host);
  if (plan === undefined) {
    const h = normalizeHost(host);
    plan = h === null ? NO_PLAN : {
      entries: config.entries.filter((e) => entryCovers(e, h)),
      releaseApi: releaseApiFor(h, config.entries),
    };
    if (byHost.size < 1024) byHost.set(host, plan);
  }
  return plan;
}

/** Entries whose hosts match, in file order. */
export function matchingEntries(config: AuthConfig | null, host: string): AuthEntry[] {
  return hostPlan(config, host).entries;
}

/**
 * The entries a request to `url` would try, in file order, as authFetch
 * decides: none when {@linkcode entriesNotUsedReason} gives a reason, which
 * is then returned too.
 */
export function entriesForUrl(
  config: AuthConfig | null,
  url: URL,
): { entries: AuthEntry[]; notUsed: string | null } {
  const notUsed = entriesNotUsedReason(url);
  return { entries: notUsed === null ? matchingEntries(config, url.hostname) : [], notUsed };
}

interface Credential {
  header: string;
  /** Whether the header may travel to a (normalised) host. */
  covers(host: string): boolean;
}

/** What one hop sends. */
interface Hop {
  method: string;
  /** Lower-case header pairs, never an Authorization header (that is per attempt). */
  headers: [string, string][];
  /** Bytes, or a Blob (such as a file's, read again by each fetch). */
  body: Uint8Array<ArrayBuffer> | Blob | null;
  signal: AbortSignal | null;
}

/** A request as every attempt and hop replays it. */
interface Prepared extends Hop {
  /** The caller's own Authorization header, if any. */
  own: string | null;
}

const NO_HEADERS: [string, string][] = [];

/**
 * A body every attempt and 307/308 hop can send again. Bytes and Blobs are
 * used as they are (a file's Blob stays on disk, a large upload is not
 * copied); any other kind is read once into bytes.
 */
async function replayableBody(
  body: BodyInit,
  headers: Headers,
): Promise<Uint8Array<ArrayBuffer> | Blob> {
  if (body instanceof Uint8Array && body.buffer instanceof ArrayBuffer) {
    return body as Uint8Array<ArrayBuffer>;
  }
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (body instanceof Blob) {
    if (body.type && !headers.has("content-type")) headers.set("content-type", body.type);
    return body;
  }
  const req = new Request("http://body.invalid/", { method: "POST", body, headers });
  const type = req.headers.get("content-type");
  if (type && !headers.has("content-type")) headers.set("content-type", type);
  return new Uint8Array(await req.arrayBuffer());
}

async function prepare(init: RequestInit): Promise<Prepared> {
  const method = init.method === undefined ? "GET" : init.method.toUpperCase();
  let headers = NO_HEADERS;
  let own: string | null = null;
  let body: Uint8Array<ArrayBuffer> | Blob | null = null;
  if (init.headers !== undefined || (init.body !== undefined && init.body !== null)) {
    const h = new Headers(init.headers);
    if (init.body !== undefined && init.body !== null) body = await replayableBody(init.body, h);
    headers = [];
    h.forEach((v, k) => {
      if (k === "authorization") own = v;
      else headers.push([k, v]);
    });
  }
  return { method, headers, own, body, signal: init.signal ?? null };
}

/** The port a URL connects to, given or implied by its scheme. */
function portOf(url: URL): string {
  return url.port || (url.protocol === "https:" ? "443" : "80");
}

/**
 * Why the Authorization header must not go on to `to`, or null when it may:
 * only to a host the credential covers, on the same scheme and port (another
 * port of one host may be another service, even another user's).
 */
function stripReason(cred: Credential, from: URL, to: URL): string | null {
  if (from.protocol === "https:" && to.protocol === "http:") return "https to http downgrade";
  if (from.protocol !== to.protocol) {
    return `scheme changes from ${from.protocol} to ${to.protocol}`;
  }
  if (portOf(from) !== portOf(to)) return `port changes from ${portOf(from)} to ${portOf(to)}`;
  const plain = plainHttpProblem(to);
  if (plain) return plain;
  const host = normalizeHost(to.hostname);
  if (host === null || !cred.covers(host)) {
    return `${to.hostname} is outside the entry's hosts`;
  }
  return null;
}

function initFor(hop: Hop, header: string | null, options: AuthFetchOptions): RequestInit {
  const init: RequestInit & { client?: Deno.HttpClient } = {
    method: hop.method,
    headers: header === null
      ? hop.headers
      : hop.headers.length === 0
      ? [["authorization", header]]
      : [...hop.headers, ["authorization", header]],
    redirect: "manual",
  };
  if (hop.body !== null) init.body = hop.body;
  if (hop.signal !== null) init.signal = hop.signal;
  if (options.client) init.client = options.client;
  return init;
}

/**
 * Body-less requests are built once per URL, method, headers and credential
 * and then reused as templates: fetch copies a Request it is given, which
 * costs less than building one from a URL and an init each time.
 */
const templates = new WeakMap<URL, Map<string, Request>>();

function firstHop(url: URL, req: Prepared, header: string | null, options: AuthFetchOptions) {
  // A string: a URL object costs a re-parse in fetch.
  if (req.body !== null || req.signal !== null || options.client) {
    return fetch(url.href, initFor(req, header, options));
  }
  let key = header === null ? req.method : `${req.method}\n${header}`;
  for (const [k, v] of req.headers) key += `\n${k}: ${v}`;
  let byKey = templates.get(url);
  if (byKey === undefined) templates.set(url, byKey = new Map());
  let template = byKey.get(key);
  if (template === undefined) {
    template = new Request(url.href, initFor(req, header, options));
    if (byKey.size < 16) byKey.set(key, template);
  }
  return fetch(template);
}

/**
 * One attempt: the request, then its redirects, then `settle` on the final
 * response. The first hop is a plain fetch with no await in between and one
 * continuation, so the common case costs little more than fetch itself.
 */
function send(
  url: URL,
  req: Prepared,
  cred: Credential | null,
  options: AuthFetchOptions,
  settle: (res: Response) => Response | Promise<Response> = (res) => res,
): Promise<Response> {
  return firstHop(url, req, cred && cred.header, options).then((res) =>
    REDIRECT.has(res.status) && res.headers.has("location") && options.followRedirects !== false
      ? followRedirects(url, req, cred, options, res).then(settle)
      : settle(res)
  );
}

/** Follows the redirects of a first response `res` (at most {@linkcode MAX_REDIRECTS}). */
async function followRedirects(
  start: URL,
  req: Prepared,
  cred: Credential | null,
  options: AuthFetchOptions,
  res: Response,
): Promise<Response> {
  let url = start;
  let hop: Hop = req;
  let authorized = cred !== null;
  for (let hops = 0;; hops++) {
    if (!REDIRECT.has(res.status)) return res;
    const location = res.headers.get("location");
    if (location === null) return res;
    await res.body?.cancel();
    if (hops >= MAX_REDIRECTS) {
      throw new CliError(
        `${req.method} ${redactUrl(start)}: more than ${MAX_REDIRECTS} redirects`,
        { hint: "the server redirects in a loop" },
      );
    }
    let next: URL;
    try {
      next = parseUrlArgument(location, url);
    } catch (err) {
      throw new CliError(
        `${req.method} ${redactUrl(url)} redirected to a Location that is no URL`,
        {
          cause: err,
        },
      );
    }
    if (next.protocol !== "https:" && next.protocol !== "http:") {
      throw new CliError(
        `${req.method} ${redactUrl(url)} redirected to an unsupported URL: ${redactUrl(next)}`,
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
    options.verbose?.(`* redirect ${res.status} -> ${redactUrl(next)} (${note})`);
    // The caller's cookies are for the host they were given for (as curl does).
    if (next.host !== url.host || next.protocol !== url.protocol) {
      if (hop.headers.some(([k]) => k === "cookie")) {
        hop = { ...hop, headers: hop.headers.filter(([k]) => k !== "cookie") };
      }
    }
    if (
      (res.status === 303 && hop.method !== "HEAD") ||
      ((res.status === 301 || res.status === 302) && hop.method === "POST")
    ) {
      hop = {
        method: "GET",
        headers: hop.headers.filter(([k]) => k !== "content-type" && k !== "content-length"),
        body: null,
        signal: hop.signal,
      };
    }
    url = next;
    res = await fetch(url.href, initFor(hop, authorized ? cred!.header : null, options));
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
 * hosts, on the same scheme and port.
 *
 * @example
 * ```ts
 * const res = await authFetch("https://api.github.com/user");
 * ```
 */
export function authFetch(
  input: string | URL,
  init: RequestInit = {},
  options: AuthFetchOptions = {},
): Promise<Response> {
  // Written as promise chains rather than nested async functions: with a
  // cached config and a static token, nothing is awaited before fetch is
  // called, and the wrapper stays within a few per cent of a plain fetch.
  try {
    const url = parseUrl(input);
    const config = options.config !== undefined
      ? options.config
      : recentAuthConfig(options.authFile);
    if (config === undefined) {
      return loadAuthConfig(options.authFile).then((c) => start(url, init, options, c));
    }
    return start(url, init, options, config);
  } catch (err) {
    return Promise.reject(err);
  }
}

function start(
  url: URL,
  init: RequestInit,
  options: AuthFetchOptions,
  config: AuthConfig | null,
): Promise<Response> {
  if (
    init.headers === undefined && (init.body === undefined || init.body === null) &&
    init.signal == null
  ) {
    const method = init.method === undefined ? "GET" : init.method.toUpperCase();
    const req = { method, headers: NO_HEADERS, own: null, body: null, signal: null };
    return route(url, req, options, config);
  }
  return prepare(init).then((req) => route(url, req, options, config));
}

function route(
  url: URL,
  req: Prepared,
  options: AuthFetchOptions,
  config: AuthConfig | null,
): Promise<Response> {
  // auth.json's tokens never travel without TLS (except to this machine), never beside the
  // URL's own credentials, and never to another scheme.
  const notUsed = notUsedReason(url);
  const plan = notUsed === null ? hostPlan(config, url.hostname) : NO_PLAN;
  if (
    notUsed !== null && !hasUserinfo(url) && (options.verbose || options.onEvent) &&
    hostPlan(config, url.hostname).entries.length > 0
  ) {
    options.verbose?.(`* auth.json's entries for ${url.hostname} not used: ${notUsed}`);
    options.onEvent?.({ kind: "not-used", host: url.hostname, reason: notUsed });
  }
  // With the caller's own Authorization header the URL is fetched as given: that header
  // goes to this host only, and auth.json's tokens are not used instead.
  if (
    plan.releaseApi && options.resolveReleases !== false && req.own === null &&
    (req.method === "GET" || req.method === "HEAD")
  ) {
    const ref = parseReleaseDownload(url);
    if (ref) {
      const doFetch = (u: string, i: RequestInit) =>
        authFetch(u, i, { ...options, config, resolveReleases: false });
      const api = releaseApiOnPort(plan.releaseApi, url.port);
      return fetchReleaseAsset(url, { api, ref }, {
        doFetch,
        method: req.method,
        headers: req.headers,
        signal: req.signal,
        verbose: options.verbose,
      });
    }
  }
  // A caller's own Authorization header is used as is, for this host only.
  if (req.own !== null) {
    const host = normalizeHost(url.hostname) ?? url.hostname;
    options.verbose?.(
      `* ${req.method} ${redactUrl(url)} with the caller's own Authorization header`,
    );
    return send(url, req, { header: req.own, covers: (h) => h === host }, options);
  }
  // A user and password in the URL are the caller's own credentials too (fetch sends them).
  if (hasUserinfo(url)) {
    options.verbose?.(
      `* ${req.method} ${redactUrl(url)} with the URL's own user and password; auth.json not used`,
    );
    return send(url, req, null, options);
  }
  return tryEntries(url, req, plan.entries, 0, 0, options);
}

/** Tries `entries[i…]` in file order, then exactly one unauthenticated request. */
function tryEntries(
  url: URL,
  req: Prepared,
  entries: readonly AuthEntry[],
  i: number,
  attempt: number,
  options: AuthFetchOptions,
): Promise<Response> {
  const log = options.verbose;
  for (; i < entries.length; i++) {
    const entry = entries[i];
    // Static tokens resolve without a promise; cloud-cli/cloud-ad may need I/O.
    if (entry.auth === "cloud-cli" || entry.auth === "cloud-ad") {
      const at = i;
      const client = options.client;
      return resolveToken(entry, (u, init) => fetch(u, { ...init, client } as RequestInit))
        .then((got) => tryToken(url, req, entries, at, attempt, got, options));
    }
    const got = staticToken(entry);
    if (got.token !== null) return tryToken(url, req, entries, i, attempt, got, options);
    skipped(entry, got.reason, options);
  }
  attempt++;
  log?.(`* attempt ${attempt}: unauthenticated: ${req.method} ${redactUrl(url)}`);
  return send(
    url,
    req,
    null,
    options,
    (log || options.onEvent) && ((res) => (answered(attempt, null, res, options), res)),
  );
}

function skipped(entry: AuthEntry, reason: string, options: AuthFetchOptions): void {
  options.verbose?.(`* skipped ${describe(entry)}: ${reason}`);
  options.onEvent?.({ kind: "skipped", entry: describe(entry), reason });
}

function answered(
  attempt: number,
  entry: AuthEntry | null,
  res: Response,
  options: AuthFetchOptions,
): void {
  options.verbose?.(`* attempt ${attempt}: ${res.status} ${res.statusText}`);
  options.onEvent?.({
    kind: "answered",
    attempt,
    entry: entry && describe(entry),
    status: res.status,
    statusText: res.statusText,
  });
}

/** One attempt with `entries[i]`'s token; a 401 or 403 moves on to the next entry. */
function tryToken(
  url: URL,
  req: Prepared,
  entries: readonly AuthEntry[],
  i: number,
  attempt: number,
  got: TokenResult,
  options: AuthFetchOptions,
): Promise<Response> {
  const log = options.verbose;
  const entry = entries[i];
  if (got.token === null) {
    skipped(entry, got.reason, options);
    return tryEntries(url, req, entries, i + 1, attempt, options);
  }
  attempt++;
  log?.(
    `* attempt ${attempt}: ${describe(entry)}, token ${got.source}: ${req.method} ${
      redactUrl(url)
    }`,
  );
  const cred = {
    header: headerFor(entry, got.token),
    covers: (h: string) => entryCovers(entry, h),
  };
  return send(url, req, cred, options, (res) => {
    answered(attempt, entry, res, options);
    if (res.status !== 401 && res.status !== 403) return res;
    const next = () => tryEntries(url, req, entries, i + 1, attempt, options);
    return res.body ? res.body.cancel().then(next) : next();
  });
}
