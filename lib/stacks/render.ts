/** JSON shapes of the REST resources, named and nested as GitHub's. */
import type { Mergeability } from "./chain.ts";
import type {
  BranchRow,
  HookRow,
  PullRow,
  RepoRow,
  StackMember,
  StackRow,
  UserRow,
} from "./model.ts";

/** Base URLs of one request: the API root and the web root. */
export interface Urls {
  api: string;
  web: string;
}

const nodeId = (kind: string, id: number) => btoa(`${kind}:${id}`).replace(/=+$/, "");

/** A user, minimal. */
export function userJson(u: Pick<UserRow, "id" | "login">, urls: Urls) {
  return {
    login: u.login,
    id: u.id,
    node_id: nodeId("User", u.id),
    url: `${urls.api}/users/${u.login}`,
    html_url: `${urls.web}/${u.login}`,
    type: "User",
    site_admin: false,
  };
}

/** A repository. */
export function repoJson(r: RepoRow, urls: Urls) {
  const full = `${r.owner_login}/${r.name}`;
  return {
    id: r.id,
    node_id: nodeId("Repository", r.id),
    name: r.name,
    full_name: full,
    private: r.private,
    visibility: r.private ? "private" : "public",
    owner: userJson({ id: r.owner_id, login: r.owner_login }, urls),
    html_url: `${urls.web}/${full}`,
    fork: false,
    url: `${urls.api}/repos/${full}`,
    pulls_url: `${urls.api}/repos/${full}/pulls{/number}`,
    hooks_url: `${urls.api}/repos/${full}/hooks`,
    default_branch: r.default_branch,
    allow_stacked_pull_requests: r.allow_stacked_pull_requests,
    created_at: r.created_at,
    updated_at: r.updated_at,
  };
}

/** A git reference. */
export function refJson(r: RepoRow, b: BranchRow, urls: Urls) {
  const full = `${r.owner_login}/${r.name}`;
  return {
    ref: `refs/heads/${b.name}`,
    // UTF-8, because btoa() throws on a name outside Latin-1 (e.g. "日本").
    node_id: nodeId("Ref", r.id) + new TextEncoder().encode(b.name).toBase64({ omitPadding: true }),
    url: `${urls.api}/repos/${full}/git/refs/heads/${b.name}`,
    object: { sha: b.sha, type: "commit", url: `${urls.api}/repos/${full}/git/commits/${b.sha}` },
  };
}

/** The facts a pull request's `stack` object is made of. */
export interface StackContext {
  stack: StackRow;
  size: number;
  baseSha: string;
}

/** The `stack` object on a pull request (null when standalone). */
export function pullStackJson(p: PullRow, ctx: StackContext | null) {
  if (!ctx || p.stack_position === null) return null;
  return {
    id: ctx.stack.id,
    number: ctx.stack.number,
    size: ctx.size,
    position: p.stack_position,
    base: { ref: ctx.stack.base_ref, sha: ctx.baseSha },
  };
}

/**
 * Renders pull requests of one repository for one request. What they share
 * is built once: the URL prefixes, and one `user` object per author or
 * merger (a page of 100 pull requests usually has a handful).
 *
 * With `merge`, the pull request is shown as GitHub shows one read alone
 * (and in webhook payloads): with `mergeable` and `mergeable_state`, which
 * listings leave out.
 *
 * @example
 * ```ts
 * const render = pullRenderer(repo, { api: "https://api.example", web: "https://example" });
 * const json = pulls.map((p) => render(p, baseShas.get(p.base_ref)!, null));
 * ```
 */
export function pullRenderer(r: RepoRow, urls: Urls) {
  const full = `${r.owner_login}/${r.name}`;
  const apiPrefix = `${urls.api}/repos/${full}/pulls/`;
  const webPrefix = `${urls.web}/${full}/pull/`;
  const labelPrefix = `${r.owner_login}:`;
  // Head and base are branches of this repository (no forks here): both name it and its owner.
  const repo = repoJson(r, urls);
  const owner = repo.owner;
  const users = new Map<number, ReturnType<typeof userJson>>();
  const userOf = (id: number, login: string) => {
    let user = users.get(id);
    if (!user) users.set(id, user = userJson({ id, login }, urls));
    return user;
  };
  return (p: PullRow, baseSha: string, stack: StackContext | null, merge?: Mergeability) => {
    return {
      id: p.id,
      node_id: nodeId("PullRequest", p.id),
      number: p.number,
      url: apiPrefix + p.number,
      html_url: webPrefix + p.number,
      state: p.state,
      locked: false,
      title: p.title,
      body: p.body,
      draft: p.draft,
      user: userOf(p.user_id, p.user_login),
      head: {
        label: labelPrefix + p.head_ref,
        ref: p.head_ref,
        sha: p.head_sha,
        user: owner,
        repo,
      },
      base: { label: labelPrefix + p.base_ref, ref: p.base_ref, sha: baseSha, user: owner, repo },
      created_at: p.created_at,
      updated_at: p.updated_at,
      closed_at: p.closed_at,
      merged_at: p.merged_at,
      merged: p.merged_at !== null,
      merge_commit_sha: p.merge_commit_sha,
      ...merge,
      merged_by: p.merged_by_id === null ? null : userOf(p.merged_by_id, p.merged_by_login!),
      stack: pullStackJson(p, stack),
    };
  };
}

/** A stack resource; `pulls` are its pull requests bottom to top. */
export function stackJson(r: RepoRow, s: StackRow, pulls: StackMember[], urls: Urls) {
  const full = `${r.owner_login}/${r.name}`;
  return {
    id: s.id,
    number: s.number,
    node_id: nodeId("Stack", s.id),
    url: `${urls.api}/repos/${full}/stacks/${s.number}`,
    base: { ref: s.base_ref },
    open: pulls.some((p) => p.state === "open"),
    created_at: s.created_at,
    pull_requests: pulls.map((p) => ({
      number: p.number,
      state: p.state,
      draft: p.draft,
      merged_at: p.merged_at,
      head: { ref: p.head_ref, sha: p.head_sha },
    })),
  };
}

/** A webhook; the secret is never shown. */
export function hookJson(r: RepoRow, h: HookRow, urls: Urls) {
  const base = `${urls.api}/repos/${r.owner_login}/${r.name}/hooks/${h.id}`;
  return {
    type: "Repository",
    id: h.id,
    name: "web",
    active: h.active,
    events: h.events,
    config: {
      url: h.url,
      content_type: h.content_type,
      insecure_ssl: "0",
      ...(h.secret ? { secret: "********" } : {}),
    },
    updated_at: h.updated_at,
    created_at: h.created_at,
    url: base,
    test_url: `${base}/test`,
    ping_url: `${base}/pings`,
    deliveries_url: `${base}/deliveries`,
  };
}
