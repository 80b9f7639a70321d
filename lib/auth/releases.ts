/**
 * Release downloads on codehost hosts: `https://HOST/OWNER/REPO/releases/download/TAG/NAME`
 * (and `…/releases/latest/download/NAME`) are resolved through the REST API
 * so that private assets download with the configured token. Decisions are
 * pure; the download itself takes a fetch function.
 */
import { CliError } from "../cli/mod.ts";
import type { AuthEntry } from "./config.ts";
import { matchAnyHost } from "./host_pattern.ts";
import { redactUrl, redactUrlText } from "./redact.ts";

/** A release download URL, taken apart. */
export interface ReleaseRef {
  owner: string;
  repo: string;
  /** The tag; null for `releases/latest`. */
  tag: string | null;
  name: string;
}

/** Where a host's release metadata lives. */
export interface ReleaseApi {
  kind: "github" | "data-residency" | "enterprise";
  /** API base URL without trailing slash, e.g. `https://ghe.corp.example/api/v3`. */
  base: string;
}

/** Parses a release download URL; null when the URL is not one. */
export function parseReleaseDownload(url: URL): ReleaseRef | null {
  const parts = url.pathname.split("/").slice(1).map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  if (parts.length === 6 && parts[2] === "releases" && parts[3] === "download") {
    if ([parts[0], parts[1], parts[4], parts[5]].some((p) => p === "")) return null;
    return { owner: parts[0], repo: parts[1], tag: parts[4], name: parts[5] };
  }
  if (
    parts.length === 6 && parts[2] === "releases" && parts[3] === "latest" &&
    parts[4] === "download" && parts[0] && parts[1] && parts[5]
  ) {
    return { owner: parts[0], repo: parts[1], tag: null, name: parts[5] };
  }
  return null;
}

const TENANT = /^([a-z0-9][a-z0-9-]*)\.ghe\.com$/;

/** Whether a host is one of github.com's own hosts. */
export function isGithubDotComHost(host: string): boolean {
  return host === "github.com" || host.endsWith(".github.com") ||
    host.endsWith(".githubusercontent.com") || host === "githubusercontent.com";
}

/**
 * The API a release URL on `host` resolves through, or null when forgekit
 * leaves the URL alone (no codehost entry lists the host).
 */
export function releaseApiFor(host: string, entries: readonly AuthEntry[]): ReleaseApi | null {
  const listed = entries.some((e) => e.provider === "codehost" && matchAnyHost(e.hosts, host));
  if (!listed) return null;
  if (host === "github.com") return { kind: "github", base: "https://api.github.com" };
  if (isGithubDotComHost(host)) return null;
  const tenant = TENANT.exec(host);
  if (tenant) return { kind: "data-residency", base: `https://api.${host}` };
  if (host.endsWith(".ghe.com")) return null;
  // An IPv6 address goes into a URL in brackets.
  return { kind: "enterprise", base: `https://${host.includes(":") ? `[${host}]` : host}/api/v3` };
}

/**
 * The API as reached from a download URL on a non-default port: an
 * enterprise server's API is on the same port as its web pages.
 */
export function releaseApiOnPort(api: ReleaseApi, port: string): ReleaseApi {
  if (api.kind !== "enterprise" || port === "") return api;
  const base = new URL(api.base);
  base.port = port;
  return { kind: api.kind, base: `${base.origin}${base.pathname}` };
}

/** The metadata URL of a release. */
export function releaseMetadataUrl(api: ReleaseApi, ref: ReleaseRef): string {
  const repo = `${encodeURIComponent(ref.owner)}/${encodeURIComponent(ref.repo)}`;
  return ref.tag === null
    ? `${api.base}/repos/${repo}/releases/latest`
    : `${api.base}/repos/${repo}/releases/tags/${encodeURIComponent(ref.tag)}`;
}

/**
 * Why an asset's API URL must not be downloaded, or null when it is the
 * exact `/repos/OWNER/REPO/releases/assets/<digits>` endpoint of the same
 * API and repository.
 */
export function assetUrlProblem(api: ReleaseApi, ref: ReleaseRef, assetUrl: string): string | null {
  // The server's text, shown without a user name or password it may carry.
  const shown = redactUrlText(assetUrl);
  let u: URL;
  try {
    u = new URL(assetUrl);
  } catch {
    return `asset URL ${JSON.stringify(shown)} is not a URL`;
  }
  const base = new URL(api.base);
  if (u.protocol !== "https:" || u.host !== base.host) {
    return `asset URL ${shown} is not on ${base.host}`;
  }
  const prefix = base.pathname.replace(/\/$/, "");
  if (
    !u.pathname.startsWith(`${prefix}/repos/`) || u.search || u.hash || u.username || u.password
  ) {
    return `asset URL ${shown} is not a ${prefix}/repos/OWNER/REPO/releases/assets/<id> endpoint`;
  }
  const rest = u.pathname.slice(prefix.length).split("/").slice(1);
  if (rest.length !== 6 || rest[3] !== "releases" || rest[4] !== "assets") {
    return `asset URL ${shown} is not a ${prefix}/repos/OWNER/REPO/releases/assets/<id> endpoint`;
  }
  if (
    rest[1].toLowerCase() !== ref.owner.toLowerCase() ||
    rest[2].toLowerCase() !== ref.repo.toLowerCase()
  ) {
    return `asset URL ${shown} belongs to ${rest[1]}/${rest[2]}, not ${ref.owner}/${ref.repo}`;
  }
  if (!/^\d+$/.test(rest[5])) return `asset URL ${shown} does not end in a numeric asset id`;
  return null;
}

type Fetcher = (url: string, init: RequestInit) => Promise<Response>;

/** Fields of the asset request that are forgekit's to set, not the caller's. */
const ASSET_OWN = new Set(["accept", "authorization", "host", "cookie"]);

/** Options of {@linkcode fetchReleaseAsset}. */
export interface ReleaseFetchOptions {
  /** Makes each request (metadata, then asset), with auth.json's credentials. */
  doFetch: Fetcher;
  /** The caller's method for the asset (GET or HEAD); the metadata lookup is always GET. */
  method?: string;
  /**
   * The caller's own header fields (such as `Range`), sent with the asset
   * request; the metadata lookup sends only its own.
   */
  headers?: readonly [string, string][];
  /** Aborts every request of the download. */
  signal?: AbortSignal | null;
  /** Receives one line per step, for `-v`. */
  verbose?: (line: string) => void;
}

/**
 * Resolves a release download through the API and requests the asset with
 * `Accept: application/octet-stream` and the caller's method.
 */
export async function fetchReleaseAsset(
  url: URL,
  target: { api: ReleaseApi; ref: ReleaseRef },
  options: ReleaseFetchOptions,
): Promise<Response> {
  const { api, ref } = target;
  const { doFetch, verbose } = options;
  const signal = options.signal ?? undefined;
  const metaUrl = releaseMetadataUrl(api, ref);
  verbose?.(
    `* release download: resolving ${ref.owner}/${ref.repo} ${ref.tag ?? "latest"} via ${metaUrl}`,
  );
  const meta = await doFetch(metaUrl, {
    headers: { accept: "application/vnd.github+json", "x-github-api-version": "2022-11-28" },
    signal,
  });
  if (!meta.ok) {
    await meta.body?.cancel();
    throw new CliError(
      `Cannot resolve release download ${
        redactUrl(url)
      }: GET ${metaUrl} returned ${meta.status} ${meta.statusText}`,
      { hint: "check the tag, and that the token can read the repository" },
    );
  }
  let release: { assets?: { name?: string; url?: string }[] };
  try {
    release = await meta.json();
  } catch (err) {
    throw new CliError(
      `Cannot resolve release download ${redactUrl(url)}: ${metaUrl} returned no JSON`,
      { cause: err },
    );
  }
  const asset = release.assets?.find((a) => a.name === ref.name);
  if (!asset || typeof asset.url !== "string") {
    throw new CliError(
      `Release ${ref.tag ?? "latest"} of ${ref.owner}/${ref.repo} has no asset named ${ref.name}`,
      { hint: `list the assets: forgekit fetch ${metaUrl}` },
    );
  }
  const problem = assetUrlProblem(api, ref, asset.url);
  if (problem) {
    throw new CliError(`Refusing release download ${redactUrl(url)}: ${problem}`, {
      hint: "the API must return the exact asset endpoint of the same repository",
    });
  }
  verbose?.(`* release download: asset ${asset.url}`);
  const headers = new Headers(options.headers?.filter(([k]) => !ASSET_OWN.has(k.toLowerCase())));
  headers.set("accept", "application/octet-stream");
  return await doFetch(asset.url, { method: options.method ?? "GET", headers, signal });
}
