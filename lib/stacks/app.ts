/**
 * The stacks server's Hono app: GitHub's REST conventions (errors, ETags,
 * request ids, API versions, auth) around the resource routes, served at the
 * root and under `/api/v3`.
 */
import { Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { createHash } from "node:crypto";
import { ApiError, errorBody, storeApiError } from "./api_error.ts";
import type { Env } from "./http.ts";
import { hookRoutes } from "./routes_hooks.ts";
import { pullRoutes } from "./routes_pulls.ts";
import { repoRoutes } from "./routes_repos.ts";
import { type CachedResponse, ResponseCache, type ResponseCacheOptions } from "./response_cache.ts";
import { stackRoutes } from "./routes_stacks.ts";
import type { Store } from "./store.ts";
import { StoreError } from "./store_error.ts";
import { printable } from "../cli/output.ts";

/** API versions accepted in `X-GitHub-Api-Version`. */
export const API_VERSIONS = ["2022-11-28", "2026-03-10"];

/** Options of {@linkcode createApp}. */
export interface AppOptions {
  store: Store;
  /** Called after a change queued webhook deliveries. */
  notify?: () => void;
  /**
   * Cache GET responses until the data changes (default true: up to 32 MiB,
   * bodies up to 1 MiB each); false, or the limits.
   */
  cache?: boolean | ResponseCacheOptions;
  /**
   * Accept hook URLs on loopback, private, link-local and other non-public
   * addresses (default false: 422, as on GitHub). For tests and networks where
   * the receivers are internal; give the delivery worker the same option.
   */
  allowPrivateHookTargets?: boolean;
  /**
   * Where clients reach the server (`https://forge.example.com`): the base
   * of every URL in responses and webhook payloads. Default: the request's
   * own URL, which follows its `Host` header.
   */
  publicUrl?: string;
}

/** Headers that belong to one request, not to the cached representation. */
const HEADERS_NOT_CACHED = new Set([
  "x-github-request-id",
  "x-github-api-version-selected",
  "etag",
  "content-length",
]);

/**
 * Whether an `If-None-Match` value matches the current ETag: `*`, or any
 * listed tag under the weak comparison that RFC 9110 prescribes for it
 * (`"x"` and `W/"x"` are the same tag).
 */
function noneMatchHits(ifNoneMatch: string, etag: string): boolean {
  const opaque = (tag: string) => tag.trim().replace(/^W\//, "");
  return ifNoneMatch.trim() === "*" ||
    ifNoneMatch.split(",").some((tag) => opaque(tag) === opaque(etag));
}

function cachedResponse(
  hit: CachedResponse,
  request: { id: string; ifNoneMatch?: string; apiVersion?: string },
): Response {
  const headers = new Headers(hit.headers);
  headers.set("X-GitHub-Request-Id", request.id);
  if (request.apiVersion) headers.set("X-GitHub-Api-Version-Selected", request.apiVersion);
  headers.set("ETag", hit.etag);
  if (request.ifNoneMatch !== undefined && noneMatchHits(request.ifNoneMatch, hit.etag)) {
    headers.delete("content-type");
    return new Response(null, { status: 304, headers });
  }
  // Said here, not left to the server: the answer to a HEAD has no body, and its
  // Content-Length must still be the GET's (RFC 9110 §8.6), not 0.
  headers.set("Content-Length", String(hit.body.byteLength));
  return new Response(hit.body, { status: 200, headers });
}

/**
 * An error's stack for the log, made {@linkcode printable}: its message may
 * hold a request's text (a path, a branch name), and so may a frame (a
 * function or file name). The frames' own line breaks stay; the message's,
 * like any other control character, are escaped, so it cannot add lines.
 */
function printableStack(err: Error): string {
  // V8 starts a stack with the error's name and message, then a frame a line;
  // a stack of another shape (a message changed after the throw) is one line.
  const head = String(err);
  const stack = err.stack ?? head;
  const frames = stack.slice(head.length);
  if (!stack.startsWith(head) || !(frames === "" || frames.startsWith("\n"))) {
    return printable(stack);
  }
  return [head, ...frames.split("\n").slice(1)].map(printable).join("\n");
}

/** The SHA-256 hex of a token, as tokens are stored. */
export function hashToken(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/**
 * Builds the app. Tests call `app.request(path, init)`; `stacks serve` hands
 * `app.fetch` to `Deno.serve`.
 *
 * @example
 * ```ts
 * const app = createApp({ store: openSqliteStore(":memory:") });
 * const res = await app.request("/user", { headers: { authorization: "Bearer …" } });
 * ```
 */
export function createApp(options: AppOptions): Hono<Env> {
  const api = new Hono<Env>();
  api.route("/", repoRoutes());
  api.route("/", pullRoutes());
  api.route("/", stackRoutes());
  api.route("/", hookRoutes());

  const cache = options.cache === false
    ? null
    : new ResponseCache(options.cache === true ? {} : options.cache);
  const app = new Hono<Env>();
  app.use("*", async (c, next) => {
    const requestId = crypto.randomUUID().replace(/-/g, "").slice(0, 20).toUpperCase();
    c.header("X-GitHub-Request-Id", requestId);
    c.header("X-GitHub-Media-Type", "github.v3; format=json");
    const apiVersion = c.req.header("x-github-api-version");
    if (apiVersion !== undefined && !API_VERSIONS.includes(apiVersion)) {
      throw new ApiError(
        400,
        `API version ${apiVersion} is not supported (use one of: ${API_VERSIONS.join(", ")})`,
      );
    }
    if (apiVersion) c.header("X-GitHub-Api-Version-Selected", apiVersion);
    let url: URL;
    try {
      url = new URL(c.req.url);
    } catch (err) {
      throw new ApiError(
        400,
        `Cannot build the request URL: the Host header is ${
          JSON.stringify(c.req.header("host") ?? "")
        } (send a host name, optionally with :port)`,
        { cause: err },
      );
    }
    const enterprise = c.req.path === "/api/v3" || c.req.path.startsWith("/api/v3/");
    const origin = options.publicUrl ?? url.origin;
    c.set("urls", { api: `${origin}${enterprise ? "/api/v3" : ""}`, web: origin });
    c.set("store", options.store);
    c.set("notify", options.notify ?? (() => {}));
    c.set("allowPrivateHookTargets", options.allowPrivateHookTargets ?? false);
    c.set("user", null);
    const auth = c.req.header("authorization");
    if (auth !== undefined) {
      const m = /^(?:bearer|token)\s+(\S+)\s*$/i.exec(auth);
      const user = m ? await options.store.userByTokenHash(hashToken(m[1])) : null;
      if (!user) throw new ApiError(401, "Bad credentials");
      c.set("user", user);
    }
    // Hono answers HEAD with its GET route and drops the body afterwards: same ETag, same 304.
    if (c.req.method !== "GET" && c.req.method !== "HEAD") return await next();
    // As GitHub: an answer depends on who asks, so no shared cache may give
    // one user's answer to another (RFC 9111 §4.1, §5.2.2.7).
    c.header("Vary", "Accept, Authorization, Cookie, Accept-Encoding");
    const request = { id: requestId, ifNoneMatch: c.req.header("if-none-match"), apiVersion };
    const key = `${c.get("user")?.id ?? 0} ${c.req.url}`;
    const version = await options.store.dataVersion();
    const hit = cache?.get(key, version);
    if (hit) {
      c.res = cachedResponse(hit, request);
      return;
    }
    await next();
    if (c.res.status === 200) {
      // Errors are not for caches to keep.
      c.res.headers.set(
        "Cache-Control",
        `${c.get("user") ? "private" : "public"}, max-age=60, s-maxage=60`,
      );
      const body = new Uint8Array(await c.res.arrayBuffer());
      const entry: CachedResponse = {
        version,
        body,
        headers: [...c.res.headers].filter(([k]) => !HEADERS_NOT_CACHED.has(k)),
        // SHA-256 (hardware-assisted) cut to 128 bits: a third of MD5's time on a 100-item page.
        etag: `W/"${createHash("sha256").update(body).digest("hex").slice(0, 32)}"`,
      };
      cache?.set(key, entry);
      c.res = cachedResponse(entry, request);
    }
  });
  app.route("/", api);
  app.route("/api/v3", api);
  app.notFound((c) => c.json(errorBody(404, "Not Found"), 404));
  app.onError((err, c) => {
    if (err instanceof StoreError) {
      // The operator needs to know; the client gets why, without the server's paths.
      let root: unknown = err;
      while (root instanceof Error && root.cause instanceof Error) root = root.cause;
      const why =
        root instanceof Error && !err.message.toLowerCase().includes(root.message.toLowerCase())
          ? ` (${root.message})`
          : "";
      console.error(
        printable(`forgekit stacks: ${c.req.method} ${c.req.path}: ${err.message}${why}`),
      );
      err = storeApiError(err);
    }
    if (err instanceof ApiError) {
      return c.json(errorBody(err.status, err.message, err.errors), err.status, err.headers);
    }
    if (err instanceof HTTPException) {
      return c.json(errorBody(err.status, err.message || "Error"), err.status);
    }
    console.error(
      `forgekit stacks: internal error on ${printable(`${c.req.method} ${c.req.path}`)}: ${
        printableStack(err)
      }`,
    );
    return c.json(errorBody(500, "Internal Server Error"), 500);
  });
  return app;
}
