/** Request helpers shared by the routes: bodies, pagination, access. */
import type { Context } from "hono";
import { ApiError } from "./api_error.ts";
import type { RepoRow, UserRow } from "./model.ts";
import type { Urls } from "./render.ts";
import type { Store } from "./store.ts";

/** The largest request body accepted. */
export const MAX_BODY = 1 << 20;

/** What every route finds on the context. */
export interface Env {
  Variables: {
    store: Store;
    user: UserRow | null;
    urls: Urls;
    /** Wakes the webhook worker after a commit that queued deliveries. */
    notify: () => void;
    /** Whether hooks may target loopback, private and other non-public addresses. */
    allowPrivateHookTargets: boolean;
  };
}

/** The authenticated user, or 401. */
export function requireUser(c: Context<Env>): UserRow {
  const user = c.get("user");
  if (!user) throw new ApiError(401, "Requires authentication");
  return user;
}

/**
 * The body's bytes, reading no further than {@linkcode MAX_BODY}: 413 as soon
 * as it is over (a body without Content-Length is not buffered whole first),
 * 400 when the client breaks off mid-body.
 */
async function cappedBody(req: Request): Promise<Uint8Array> {
  if (!req.body) return new Uint8Array();
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    let chunk: ReadableStreamReadResult<Uint8Array>;
    try {
      chunk = await reader.read();
    } catch (err) {
      throw new ApiError(400, "Cannot read the request body: the client stopped sending it", {
        cause: err,
      });
    }
    if (chunk.done) break;
    size += chunk.value.byteLength;
    if (size > MAX_BODY) {
      await reader.cancel().catch(() => {});
      throw new ApiError(413, "Payload too large");
    }
    chunks.push(chunk.value);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.byteLength;
  }
  return out;
}

/** Reads a JSON object body (400 for bad JSON or a non-object, 413 over 1 MiB). */
export async function jsonBody(
  c: Context<Env>,
  { optional = false } = {},
): Promise<Record<string, unknown>> {
  const declared = Number(c.req.header("content-length") ?? "0");
  if (declared > MAX_BODY) throw new ApiError(413, "Payload too large");
  const text = new TextDecoder().decode(await cappedBody(c.req.raw));
  if (text.trim() === "" && optional) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ApiError(400, "Problems parsing JSON", { cause: err });
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ApiError(400, "Body should be a JSON object");
  }
  return value as Record<string, unknown>;
}

/**
 * `per_page` (default 30, max 100) and `page` (from 1) of a listing. As on
 * GitHub, `page=0` is the first page and `per_page=0` the default size.
 */
export function pageParams(c: Context<Env>): { perPage: number; page: number } {
  const num = (name: string, dflt: number) => {
    const raw = c.req.query(name);
    if (raw === undefined || raw === "") return dflt;
    // Decimal digits only: Number() would also take 1e3, 0x10 and " 7".
    const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
    if (n === 0) return dflt;
    if (!Number.isSafeInteger(n)) {
      throw new ApiError(422, "Validation Failed", {
        errors: [{
          resource: "Search",
          field: name,
          code: "invalid",
          message: `${name} must be a whole number`,
        }],
      });
    }
    return n;
  };
  return { perPage: Math.min(num("per_page", 30), 100), page: num("page", 1) };
}

/** Sets the `Link` header (first, prev, next, last; keeping per_page and other parameters). */
export function setLinks(c: Context<Env>, page: number, perPage: number, total: number): void {
  const last = Math.max(1, Math.ceil(total / perPage));
  const url = new URL(c.req.url);
  const link = (p: number, rel: string) => {
    url.searchParams.set("per_page", String(perPage));
    url.searchParams.set("page", String(p));
    return `<${url.href}>; rel="${rel}"`;
  };
  const parts: string[] = [];
  if (page > 1) parts.push(link(Math.min(page - 1, last), "prev"));
  if (page < last) parts.push(link(page + 1, "next"));
  if (page < last) parts.push(link(last, "last"));
  if (page > 1) parts.push(link(1, "first"));
  if (parts.length) c.header("Link", parts.join(", "));
}

/** Access to a repository: 404 when it does not exist or the user may not see it. */
export async function repoFor(c: Context<Env>, mode: "read" | "write"): Promise<RepoRow> {
  const store = c.get("store");
  const repo = await store.getRepo(c.req.param("owner")!, c.req.param("repo")!);
  const user = c.get("user");
  if (!repo) throw new ApiError(404, "Not Found");
  const member = user !== null &&
    (user.id === repo.owner_id || await store.isCollaborator(repo.id, user.id));
  if (repo.private && !member) throw new ApiError(404, "Not Found");
  if (mode === "write") {
    if (!user) throw new ApiError(401, "Requires authentication");
    if (!member) throw new ApiError(403, "Must have push access to repository");
  }
  return repo;
}

/** Admin access to a repository (its owner's): 404 as {@linkcode repoFor}, then 403. */
export async function adminRepo(c: Context<Env>): Promise<RepoRow> {
  const repo = await repoFor(c, "write");
  if (requireUser(c).id !== repo.owner_id) {
    throw new ApiError(403, "Must have admin rights to Repository.");
  }
  return repo;
}

/** A positive integer path parameter, or 404. */
export function intParam(c: Context<Env>, name: string): number {
  const raw = c.req.param(name) ?? "";
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < 1) throw new ApiError(404, "Not Found");
  return n;
}

/**
 * Why a string cannot be stored as sent, or null when it can: SQLite text
 * read back ends at the first NUL, and an unpaired surrogate has no UTF-8
 * form (it would come back as U+FFFD).
 *
 * @example
 * ```ts
 * unstorableText("a\u0000b"); // "must not contain NUL characters (\\u0000)"
 * unstorableText("main"); // null
 * ```
 */
export function unstorableText(value: string): string | null {
  if (value.includes("\0")) return "must not contain NUL characters (\\u0000)";
  if (!value.isWellFormed()) return "must be valid Unicode (it has an unpaired surrogate)";
  return null;
}

/**
 * A string field of a body, optional; 422 when present with another type,
 * longer than `maxLength` or unstorable. `options` is the resource's name,
 * or that and a length limit.
 */
export function strField(
  body: Record<string, unknown>,
  name: string,
  options: { resource: string; maxLength?: number } | string,
): string | undefined {
  const { resource, maxLength = Infinity } = typeof options === "string"
    ? { resource: options }
    : options;
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  const why = typeof v !== "string"
    ? "must be a string"
    : v.length > maxLength
    ? `is too long (maximum is ${maxLength} characters)`
    : unstorableText(v);
  if (why !== null) {
    throw new ApiError(422, "Validation Failed", {
      errors: [{ resource, field: name, code: "invalid", message: `${name} ${why}` }],
    });
  }
  return v as string;
}

/** A boolean field of a body, optional. */
export function boolField(
  body: Record<string, unknown>,
  name: string,
  resource: string,
): boolean | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") {
    throw new ApiError(422, "Validation Failed", {
      errors: [{ resource, field: name, code: "invalid", message: `${name} must be a boolean` }],
    });
  }
  return v;
}
