/** The SQL of a pull-request listing, and the index each one reads in order. */
import type { PullFilter } from "./store.ts";

/**
 * The indexes that let a listing be read in its order (schema version 3;
 * `pulls_base` had only `(repo_id, base_ref)` before).
 */
export const PULL_LIST_INDEXES = `
CREATE INDEX IF NOT EXISTS pulls_base ON pulls (repo_id, base_ref, state, id);
CREATE INDEX IF NOT EXISTS pulls_list_state ON pulls (repo_id, state, id);
CREATE INDEX IF NOT EXISTS pulls_list_state_updated ON pulls (repo_id, state, updated_at, id);
CREATE INDEX IF NOT EXISTS pulls_list_all ON pulls (repo_id, id);
CREATE INDEX IF NOT EXISTS pulls_list_all_updated ON pulls (repo_id, updated_at, id);
`;

/** A listing as two statements, both taking `args` (the page's also `LIMIT ?, OFFSET ?`). */
export interface PullListQuery {
  /** `SELECT count(*) AS n …`: how many match. */
  count: string;
  /** `SELECT p.id …`: one page of ids, in order. */
  page: string;
  args: (string | number)[];
}

/**
 * Which index a listing reads. Without a branch filter, the one whose order
 * is the listing's order: a page is read from the index, never sorted, and
 * an offset skips index entries only. A head filter matches a pull request
 * or two, and a base filter that base's pull requests: their indexes find
 * them, and what little they find is sorted.
 */
function indexFor(f: PullFilter): string {
  if (f.head !== undefined) return "pulls_head";
  if (f.base !== undefined) return "pulls_base";
  const updated = f.sort === "updated" ? "_updated" : "";
  return f.state === "all" ? `pulls_list_all${updated}` : `pulls_list_state${updated}`;
}

/**
 * The statements of a pull-request listing. `INDEXED BY` names the index,
 * so that a plan cannot silently fall back to sorting every pull request
 * (SQLite then fails the statement instead); `pull_list_query_test.ts`
 * checks each plan.
 *
 * @example
 * ```ts
 * const q = pullListQuery(1, { state: "open", sort: "created", direction: "desc" });
 * db.prepare(q.page).all(...q.args, 100, 0); // ids of the newest 100 open pull requests
 * ```
 */
export function pullListQuery(repoId: number, f: PullFilter): PullListQuery {
  const where = ["p.repo_id = ?"];
  const args: (string | number)[] = [repoId];
  if (f.state !== "all") {
    where.push("p.state = ?");
    args.push(f.state);
  }
  if (f.head !== undefined) {
    where.push("p.head_ref = ?");
    args.push(f.head);
  }
  if (f.base !== undefined) {
    where.push("p.base_ref = ?");
    args.push(f.base);
  }
  const from = `FROM pulls p INDEXED BY ${indexFor(f)} WHERE ${where.join(" AND ")}`;
  const dir = f.direction === "asc" ? "ASC" : "DESC";
  const order = f.sort === "updated" ? `p.updated_at ${dir}, p.id ${dir}` : `p.id ${dir}`;
  return {
    count: `SELECT count(*) AS n ${from}`,
    page: `SELECT p.id ${from} ORDER BY ${order} LIMIT ? OFFSET ?`,
    args,
  };
}
