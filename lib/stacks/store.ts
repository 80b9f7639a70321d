/**
 * The storage interface of the stacks server. Routes talk only to this; the
 * SQLite implementation is `sqlite_store.ts`, and a PostgreSQL one for
 * several server instances can implement the same interface. Every method
 * is Promise-shaped for that reason, even where SQLite answers at once.
 * Failures of the storage itself (a lock held too long elsewhere, a full
 * disk, an I/O error) are thrown as `StoreError` (`store_error.ts`), which
 * the app answers with 503 or 507; anything else thrown is a bug (500).
 */
import type {
  BranchRow,
  DeliveryRow,
  HookRow,
  PullRow,
  RepoRow,
  StackMember,
  StackRow,
  UserRow,
} from "./model.ts";

/** Filters of a pull-request listing. */
export interface PullFilter {
  state: "open" | "closed" | "all";
  head?: string;
  base?: string;
  sort: "created" | "updated";
  direction: "asc" | "desc";
}

/** One page of a listing plus the total, for Link headers. */
export interface Page<T> {
  items: T[];
  total: number;
}

/** A stack and how many pull requests it holds (what a pull request's `stack` object shows). */
export interface SizedStack {
  stack: StackRow;
  size: number;
}

/** Fields of a new pull request. */
export type NewPull = Pick<
  PullRow,
  "repo_id" | "user_id" | "title" | "body" | "draft" | "head_ref" | "head_sha" | "base_ref"
>;

/** What can change on a pull request. */
export type PullPatch = Partial<
  Pick<
    PullRow,
    | "title"
    | "body"
    | "state"
    | "draft"
    | "base_ref"
    | "head_sha"
    | "closed_at"
    | "merged_at"
    | "merge_commit_sha"
    | "merged_by_id"
    | "stack_id"
    | "stack_position"
  >
>;

/** The store: one narrow module between the routes and the database. */
export interface Store {
  /**
   * Runs `fn` in one serialised write transaction (BEGIN IMMEDIATE), rolled
   * back when it throws. While another process holds the write lock it
   * waits, without blocking other requests, then throws a `busy` StoreError.
   */
  transaction<T>(fn: () => Promise<T>): Promise<T>;
  close(): Promise<void>;
  /**
   * A number that changes whenever any connection or process commits a
   * change; equal values mean the data read before is still current.
   */
  dataVersion(): Promise<number>;

  userByLogin(login: string): Promise<UserRow | null>;
  userByTokenHash(hash: string): Promise<UserRow | null>;
  ensureUser(login: string): Promise<UserRow>;
  addToken(userId: number, hash: string): Promise<void>;

  createRepo(
    r: {
      owner_id: number;
      name: string;
      private: boolean;
      allow_stacked_pull_requests: boolean;
      default_branch: string;
    },
  ): Promise<RepoRow>;
  getRepo(owner: string, name: string): Promise<RepoRow | null>;
  getRepoById(id: number): Promise<RepoRow | null>;
  updateRepo(
    id: number,
    patch: Partial<Pick<RepoRow, "private" | "allow_stacked_pull_requests" | "name">>,
  ): Promise<void>;
  addCollaborator(repoId: number, userId: number): Promise<void>;
  isCollaborator(repoId: number, userId: number): Promise<boolean>;

  getBranch(repoId: number, name: string): Promise<BranchRow | null>;
  /** The shas of those of `names` that exist, in one query (name → sha). */
  branchShas(repoId: number, names: string[]): Promise<Map<string, string>>;
  putBranch(repoId: number, name: string, sha: string): Promise<void>;
  deleteBranch(repoId: number, name: string): Promise<void>;

  insertPull(p: NewPull): Promise<PullRow>;
  getPull(repoId: number, number: number): Promise<PullRow | null>;
  pullsByNumbers(repoId: number, numbers: number[]): Promise<PullRow[]>;
  openPullsByHead(repoId: number, headRef: string): Promise<PullRow[]>;
  openPullsTouching(repoId: number, branch: string): Promise<PullRow[]>;
  listPulls(
    repoId: number,
    filter: PullFilter,
    limit: number,
    offset: number,
  ): Promise<Page<PullRow>>;
  updatePull(id: number, patch: PullPatch): Promise<PullRow>;

  insertStack(repoId: number, baseRef: string): Promise<StackRow>;
  getStack(repoId: number, number: number): Promise<StackRow | null>;
  stacksByIds(ids: number[]): Promise<StackRow[]>;
  /** The pull requests of the stacks, each stack's bottom to top. */
  pullsInStacks(stackIds: number[]): Promise<PullRow[]>;
  /**
   * What the Stacks API shows of the stacks' pull requests, each stack's
   * bottom to top: {@linkcode pullsInStacks} narrowed to the listing's fields.
   */
  stackMembers(stackIds: number[]): Promise<StackMember[]>;
  /** Those of the stacks that exist, each with how many pull requests it holds, in one query. */
  stacksWithSizes(ids: number[]): Promise<SizedStack[]>;
  listStacks(
    repoId: number,
    pullNumber: number | null,
    limit: number,
    offset: number,
  ): Promise<Page<StackRow>>;
  deleteStack(id: number): Promise<void>;

  insertHook(
    h: Pick<HookRow, "repo_id" | "url" | "secret" | "events" | "active" | "content_type">,
  ): Promise<HookRow>;
  getHook(repoId: number, id: number): Promise<HookRow | null>;
  listHooks(repoId: number): Promise<HookRow[]>;
  updateHook(
    id: number,
    patch: Partial<Pick<HookRow, "url" | "secret" | "events" | "active" | "content_type">>,
  ): Promise<HookRow>;
  deleteHook(id: number): Promise<void>;

  insertDelivery(
    d: {
      guid: string;
      hook_id: number;
      repo_id: number;
      event: string;
      action: string | null;
      payload: string;
      redelivery: boolean;
    },
  ): Promise<DeliveryRow>;
  getDelivery(hookId: number, id: number): Promise<DeliveryRow | null>;
  /** A hook's deliveries, newest first, and how many it has. */
  listDeliveries(hookId: number, limit: number, offset: number): Promise<Page<DeliveryRow>>;
  /**
   * The outcome of each hook's newest delivery that has been attempted, by
   * hook id; a hook with none is left out.
   */
  lastAttempts(
    hookIds: readonly number[],
  ): Promise<Map<number, Pick<DeliveryRow, "status_code">>>;
  /**
   * Claims pending deliveries due at `now` (call inside a transaction): the
   * oldest one of each hook not in `skipHooks`, at most `limit`, oldest first.
   * Each is leased until `until` (its next attempt time), so that no other
   * worker, in this process or another, sends it meanwhile, and a worker that
   * dies mid-send leaves it to be sent again.
   */
  claimDeliveries(
    now: number,
    options: {
      until: number;
      limit: number;
      skipHooks: readonly number[];
      /**
       * At most `max` deliveries in flight per owner of the repository,
       * counting `busy` (in flight already, by owner id): one account's
       * hooks cannot take every sender.
       */
      perOwner?: { max: number; busy: Readonly<Record<number, number>> };
    },
  ): Promise<(DeliveryRow & { owner_id: number })[]>;
  /**
   * When the next pending delivery is due, or null: of hooks not in
   * `skipHooks`, on repositories of owners not in `skipOwners`.
   */
  nextDueAt(skipHooks: readonly number[], skipOwners?: readonly number[]): Promise<number | null>;
  recordAttempt(
    id: number,
    r: {
      status: DeliveryRow["status"];
      status_code: number | null;
      duration_ms: number;
      next_attempt_at: number;
      delivered_at: string | null;
    },
  ): Promise<void>;
}
