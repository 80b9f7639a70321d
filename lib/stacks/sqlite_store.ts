// deno-lint-ignore-file require-await -- the Store interface is Promise-shaped for
// asynchronous backends (PostgreSQL); SQLite answers synchronously.
/**
 * The SQLite implementation of {@linkcode Store}: one file, WAL, a writer
 * connection for serialised `BEGIN IMMEDIATE` transactions and a reader
 * connection that sees only committed data.
 *
 * node:sqlite is synchronous: a connection that waits for a lock blocks the
 * whole server. So the writer never waits inside SQLite (busy_timeout 0):
 * while another process holds the write lock, BEGIN IMMEDIATE is tried
 * again after short sleeps, and reads go on meanwhile (WAL readers need no
 * lock). Locks, a full disk and I/O errors are thrown as StoreError.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import {
  DatabaseSync,
  type SQLInputValue,
  type SQLOutputValue,
  type StatementSync,
} from "node:sqlite";
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
import { PULL_LIST_INDEXES, pullListQuery } from "./pull_list_query.ts";
import { sqliteFailure } from "./sqlite_failure.ts";
import type { NewPull, Page, PullFilter, PullPatch, SizedStack, Store } from "./store.ts";
import { StoreError } from "./store_error.ts";

/**
 * The schema this forgekit reads and writes. A database at a lower version
 * is migrated when opened; one at a higher version (a newer forgekit's) is
 * refused, and a running server answers writes to it 503.
 */
const SCHEMA_VERSION = 5;

/**
 * The next id of each table whose rows are deleted (a dissolved stack, a
 * deleted hook). SQLite would hand the largest deleted id out again, and an
 * `id` is a global identifier: webhook receivers and clients key on it.
 */
const SERIALS = `
CREATE TABLE IF NOT EXISTS serials (name TEXT PRIMARY KEY, next INTEGER NOT NULL);
INSERT OR IGNORE INTO serials (name, next) VALUES
  ('stacks', (SELECT coalesce(max(id), 0) + 1 FROM stacks)),
  ('hooks', (SELECT coalesce(max(id), 0) + 1 FROM hooks));`;

/**
 * What takes a database from version `n - 1` to `n` (version 0, a new one,
 * gets SCHEMA). Each may meet a database that has it already: a forgekit
 * before schema version 5 could set a database that another one had just
 * migrated back to its own version. So each step is idempotent.
 */
const MIGRATIONS: Record<number, (db: Connection) => void> = {
  // Hooks made before content_type existed were sent JSON, and still are.
  2: (db) => addColumn(db, "hooks", "content_type TEXT NOT NULL DEFAULT 'json'"),
  // Pull listings read in index order instead of sorting every pull request.
  3: (db) => db.exec(`DROP INDEX IF EXISTS pulls_base; ${PULL_LIST_INDEXES}`),
  // Ids of dissolved stacks and deleted hooks are never given out again.
  4: (db) => db.exec(SERIALS),
  // Who merged a pull request (`merged_by`); those merged before it have NULL.
  5: (db) => addColumn(db, "pulls", "merged_by_id INTEGER REFERENCES users(id)"),
};

/** Adds a column (`definition` starts with its name) unless the table has it. */
function addColumn(db: Connection, table: string, definition: string): void {
  const name = definition.split(" ")[0];
  if (!db.get("SELECT 1 AS x FROM pragma_table_info(?) WHERE name = ?", table, name)) {
    db.exec(`ALTER TABLE ${table} ADD COLUMN ${definition}`);
  }
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, login TEXT NOT NULL UNIQUE COLLATE NOCASE, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (hash TEXT PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id), created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS repos (
  id INTEGER PRIMARY KEY, owner_id INTEGER NOT NULL REFERENCES users(id), name TEXT NOT NULL COLLATE NOCASE,
  private INTEGER NOT NULL, allow_stacked INTEGER NOT NULL, default_branch TEXT NOT NULL,
  next_pull INTEGER NOT NULL DEFAULT 1, next_stack INTEGER NOT NULL DEFAULT 1,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, UNIQUE (owner_id, name));
CREATE TABLE IF NOT EXISTS collaborators (repo_id INTEGER NOT NULL, user_id INTEGER NOT NULL, PRIMARY KEY (repo_id, user_id));
CREATE TABLE IF NOT EXISTS branches (repo_id INTEGER NOT NULL, name TEXT NOT NULL, sha TEXT NOT NULL, PRIMARY KEY (repo_id, name));
CREATE TABLE IF NOT EXISTS stacks (
  id INTEGER PRIMARY KEY, repo_id INTEGER NOT NULL, number INTEGER NOT NULL, base_ref TEXT NOT NULL,
  created_at TEXT NOT NULL, UNIQUE (repo_id, number));
CREATE TABLE IF NOT EXISTS pulls (
  id INTEGER PRIMARY KEY, repo_id INTEGER NOT NULL, number INTEGER NOT NULL, user_id INTEGER NOT NULL,
  title TEXT NOT NULL, body TEXT, state TEXT NOT NULL, draft INTEGER NOT NULL,
  head_ref TEXT NOT NULL, head_sha TEXT NOT NULL, base_ref TEXT NOT NULL,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, closed_at TEXT, merged_at TEXT, merge_commit_sha TEXT,
  stack_id INTEGER REFERENCES stacks(id), stack_position INTEGER, merged_by_id INTEGER REFERENCES users(id),
  UNIQUE (repo_id, number));
CREATE INDEX IF NOT EXISTS pulls_stack ON pulls (stack_id, stack_position);
CREATE INDEX IF NOT EXISTS pulls_head ON pulls (repo_id, head_ref);
CREATE TABLE IF NOT EXISTS hooks (
  id INTEGER PRIMARY KEY, repo_id INTEGER NOT NULL, url TEXT NOT NULL, secret TEXT, events TEXT NOT NULL,
  active INTEGER NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, content_type TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (
  id INTEGER PRIMARY KEY, guid TEXT NOT NULL, hook_id INTEGER NOT NULL, repo_id INTEGER NOT NULL,
  event TEXT NOT NULL, action TEXT, payload TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL, status_code INTEGER, duration_ms INTEGER, delivered_at TEXT,
  redelivery INTEGER NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS deliveries_hook ON deliveries (hook_id, id);
${PULL_LIST_INDEXES}
${SERIALS}`;

type Row = Record<string, SQLInputValue>;

/**
 * A row as an array of its columns' values, in the statement's order. Hot
 * reads (pull requests, stacks, branches) take rows so: node:sqlite builds an
 * object per row otherwise, a property per column, and reading a 100-row page
 * that way cost more than SQLite's own work for it.
 */
type Cells = SQLOutputValue[];

/** `setReturnArrays` is in node:sqlite (Node 22.16, Deno 2.3) but not in its bundled types. */
type ArrayStatement = StatementSync & { setReturnArrays?: (enabled: boolean) => void };

/** `?, ?, ?` for an IN list (lists are at most a page long, so statements stay few). */
const marks = (n: number) => Array(n).fill("?").join(", ");

const now = () => new Date().toISOString().replace(/\.\d{3}Z$/, "Z");

function toRepo(r: Row): RepoRow {
  return {
    id: Number(r.id),
    owner_id: Number(r.owner_id),
    owner_login: String(r.owner_login),
    name: String(r.name),
    private: r.private === 1,
    allow_stacked_pull_requests: r.allow_stacked === 1,
    default_branch: String(r.default_branch),
    created_at: String(r.created_at),
    updated_at: String(r.updated_at),
  };
}

/**
 * A pull request's columns, in the order {@linkcode toPull} reads them; `u`
 * is its author and `m` who merged it (see {@linkcode PULL_USERS}).
 */
const PULL_COLUMNS = "p.id, p.repo_id, p.number, p.user_id, u.login, p.title, p.body, p.state, " +
  "p.draft, p.head_ref, p.head_sha, p.base_ref, p.created_at, p.updated_at, p.closed_at, " +
  "p.merged_at, p.merge_commit_sha, p.stack_id, p.stack_position, p.merged_by_id, m.login";

/** The joins that {@linkcode PULL_COLUMNS} reads the author and the merger from. */
const PULL_USERS = "JOIN users u ON u.id = p.user_id LEFT JOIN users m ON m.id = p.merged_by_id";

// SQLite gives INTEGER columns as numbers and TEXT columns as strings (NOT
// NULL where the schema says so), so the cells are taken as they are.
function toPull(r: Cells): PullRow {
  return {
    id: r[0] as number,
    repo_id: r[1] as number,
    number: r[2] as number,
    user_id: r[3] as number,
    user_login: r[4] as string,
    title: r[5] as string,
    body: r[6] as string | null,
    state: r[7] as PullRow["state"],
    draft: r[8] === 1,
    head_ref: r[9] as string,
    head_sha: r[10] as string,
    base_ref: r[11] as string,
    created_at: r[12] as string,
    updated_at: r[13] as string,
    closed_at: r[14] as string | null,
    merged_at: r[15] as string | null,
    merge_commit_sha: r[16] as string | null,
    stack_id: r[17] as number | null,
    stack_position: r[18] as number | null,
    merged_by_id: r[19] as number | null,
    merged_by_login: r[20] as string | null,
  };
}

/** A stack's columns, in the order {@linkcode toStack} reads them. */
const STACK_COLUMNS = "s.id, s.repo_id, s.number, s.base_ref, s.created_at";

function toStack(r: Cells): StackRow {
  return {
    id: r[0] as number,
    repo_id: r[1] as number,
    number: r[2] as number,
    base_ref: r[3] as string,
    created_at: r[4] as string,
  };
}

function toHook(r: Row): HookRow {
  return {
    id: Number(r.id),
    repo_id: Number(r.repo_id),
    url: String(r.url),
    secret: (r.secret as string | null) ?? null,
    events: JSON.parse(String(r.events)),
    active: r.active === 1,
    content_type: r.content_type === "json" ? "json" : "form",
    created_at: String(r.created_at),
    updated_at: String(r.updated_at),
  };
}

function toDelivery(r: Row): DeliveryRow {
  return {
    id: Number(r.id),
    guid: String(r.guid),
    hook_id: Number(r.hook_id),
    repo_id: Number(r.repo_id),
    event: String(r.event),
    action: (r.action as string | null) ?? null,
    payload: String(r.payload),
    status: r.status as DeliveryRow["status"],
    attempts: Number(r.attempts),
    next_attempt_at: Number(r.next_attempt_at),
    status_code: r.status_code === null ? null : Number(r.status_code),
    duration_ms: r.duration_ms === null ? null : Number(r.duration_ms),
    delivered_at: (r.delivered_at as string | null) ?? null,
    redelivery: r.redelivery === 1,
    created_at: String(r.created_at),
  };
}

const PULL_SELECT = `SELECT ${PULL_COLUMNS} FROM pulls p ${PULL_USERS}`;
const STACK_SELECT = `SELECT ${STACK_COLUMNS} FROM stacks s`;
const REPO_SELECT =
  "SELECT r.*, u.login AS owner_login FROM repos r JOIN users u ON u.id = r.owner_id";

/** SQLITE_CORRUPT and SQLITE_NOTADB: a damaged file, which no retry of the request mends. */
const CORRUPT_CODES = [11, 26];
const CORRUPT_MESSAGE = /^(?:database disk image is malformed|file is not a database)\b/;

/** A statement's error as a StoreError when it is a storage failure, else as it is. */
function failure(err: unknown): unknown {
  const errcode = (err as { errcode?: unknown } | null)?.errcode;
  if (
    err instanceof Error &&
    (typeof errcode === "number"
      ? CORRUPT_CODES.includes(errcode & 0xff)
      : CORRUPT_MESSAGE.test(err.message))
  ) {
    // The request was fine: 503, as for a disk that fails, not a 500 and a stack trace.
    return new StoreError(
      "io",
      "Database file is corrupt: check it with PRAGMA integrity_check, or restore a backup",
      { cause: err },
    );
  }
  return sqliteFailure(err) ?? err;
}

class Connection {
  #db: DatabaseSync;
  #stmts = new Map<string, StatementSync>();
  #arrayStmts = new Map<string, StatementSync>();
  constructor(path: string, busyTimeoutMs: number) {
    try {
      this.#db = new DatabaseSync(path);
    } catch (err) {
      throw failure(err);
    }
    // WAL is the store's to set, once it knows the file is its own: the
    // journal mode is written in the file.
    try {
      this.#db.exec(
        `PRAGMA busy_timeout = ${busyTimeoutMs}; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;`,
      );
    } catch (err) {
      this.#db.close();
      throw failure(err);
    }
  }
  /** Whether a transaction is open (SQLite ends one itself on some errors, e.g. a full disk). */
  get inTransaction(): boolean {
    return this.#db.isTransaction;
  }
  exec(sql: string) {
    try {
      this.#db.exec(sql);
    } catch (err) {
      throw failure(err);
    }
  }
  stmt(sql: string): StatementSync {
    let s = this.#stmts.get(sql);
    if (!s) this.#stmts.set(sql, s = this.#db.prepare(sql));
    return s;
  }
  /** The statement for `sql` that answers rows as {@linkcode Cells}. */
  #arrayStmt(sql: string): StatementSync {
    let s = this.#arrayStmts.get(sql);
    if (!s) {
      const made: ArrayStatement = this.#db.prepare(sql);
      if (typeof made.setReturnArrays !== "function") {
        throw new TypeError(
          "Cannot read rows as arrays: this runtime's node:sqlite has no StatementSync.setReturnArrays (forgekit needs Deno 2.3 or later)",
        );
      }
      made.setReturnArrays(true);
      this.#arrayStmts.set(sql, s = made);
    }
    return s;
  }
  /** Every row of `sql`, each as an array of its columns' values. */
  rows(sql: string, ...args: SQLInputValue[]): Cells[] {
    try {
      return this.#arrayStmt(sql).all(...args) as unknown as Cells[];
    } catch (err) {
      throw failure(err);
    }
  }
  /** The first row of `sql` as an array of its columns' values, or undefined. */
  row(sql: string, ...args: SQLInputValue[]): Cells | undefined {
    try {
      return this.#arrayStmt(sql).get(...args) as unknown as Cells | undefined;
    } catch (err) {
      throw failure(err);
    }
  }
  get(sql: string, ...args: SQLInputValue[]): Row | undefined {
    try {
      return this.stmt(sql).get(...args) as Row | undefined;
    } catch (err) {
      throw failure(err);
    }
  }
  all(sql: string, ...args: SQLInputValue[]): Row[] {
    try {
      return this.stmt(sql).all(...args) as Row[];
    } catch (err) {
      throw failure(err);
    }
  }
  run(sql: string, ...args: SQLInputValue[]) {
    try {
      return this.stmt(sql).run(...args);
    } catch (err) {
      throw failure(err);
    }
  }
  /** Ends the open transaction, if SQLite has not already; never hides the error that led here. */
  rollback() {
    if (!this.inTransaction) return;
    try {
      this.#db.exec("ROLLBACK");
    } catch { /* the caller rethrows the error that made it roll back */ }
  }
  close() {
    this.#db.close();
  }
}

/** Options of {@linkcode openSqliteStore}. */
export interface SqliteStoreOptions {
  /**
   * How long a transaction waits for another process's write lock before it
   * fails with a `busy` StoreError (default 5000 ms). The wait is a series of
   * short sleeps, so the server answers other requests meanwhile.
   */
  busyTimeoutMs?: number;
}

/** A reader waits inside SQLite, blocking, but only in rare moments (WAL recovery): briefly. */
const READER_BUSY_TIMEOUT_MS = 250;

/** Opening and migrating happen once, before serving: there, waiting inside SQLite is fine. */
const OPEN_BUSY_TIMEOUT_MS = 10_000;

/**
 * Opens (and migrates) a SQLite store.
 *
 * @example
 * ```ts
 * const store = openSqliteStore("./forgekit-data/stacks.db", { busyTimeoutMs: 5000 });
 * ```
 */
export function openSqliteStore(path: string, options: SqliteStoreOptions = {}): Store {
  return new SqliteStore(path, options.busyTimeoutMs ?? 5000);
}

/** What decides whether a database is this forgekit's to open. */
interface SchemaState {
  version: number;
  tables: string[];
}

/**
 * The state, when the database is this forgekit's to open (at its schema
 * version or an older one); throws otherwise: a RangeError for a newer
 * forgekit's database, an Error for another program's.
 */
function checkOpenable(path: string, state: SchemaState): SchemaState {
  if (state.version > SCHEMA_VERSION) {
    throw new RangeError(
      `Database ${path} has schema version ${state.version}, newer than this forgekit (${SCHEMA_VERSION}): a newer forgekit wrote it`,
    );
  }
  if (state.tables.length) {
    throw new Error(
      `Database ${path} is not forgekit's: it holds another program's tables (${
        state.tables.join(", ")
      })`,
    );
  }
  return state;
}

class SqliteStore implements Store {
  #writer: Connection;
  #reader: Connection;
  #inTx = new AsyncLocalStorage<boolean>();
  #queue: Promise<unknown> = Promise.resolve();
  /** Commits made here; the data version of an in-memory database, which has one connection. */
  #commits = 0;

  #busyTimeoutMs: number;

  constructor(path: string, busyTimeoutMs: number) {
    this.#busyTimeoutMs = busyTimeoutMs;
    this.#writer = new Connection(path, OPEN_BUSY_TIMEOUT_MS);
    try {
      // Checked before WAL is switched on, so that a file it must not touch
      // (newer, another program's, or no database) is left as it was: no
      // journal mode, no -wal or -shm. One read transaction, so that the
      // version and the tables are of one moment, not one before and one
      // after another process made its tables.
      this.#writer.exec("BEGIN");
      checkOpenable(path, this.#schemaState());
      this.#writer.exec("COMMIT");
      this.#writer.exec("PRAGMA journal_mode = WAL");
      // Checked again, and migrated, under the write lock, which every
      // change of the version is made under: a process that opens the file
      // while another migrates it waits, then sees the new version. So two
      // never both migrate, and none writes to a schema newer than its own.
      this.#writer.exec("BEGIN IMMEDIATE");
      const { version } = checkOpenable(path, this.#schemaState());
      if (version < SCHEMA_VERSION) {
        if (version === 0) this.#writer.exec(SCHEMA);
        else for (let v = version + 1; v <= SCHEMA_VERSION; v++) MIGRATIONS[v](this.#writer);
        this.#writer.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
      }
      this.#writer.exec("COMMIT");
    } catch (err) {
      this.#writer.rollback();
      this.#writer.close();
      throw err;
    }
    this.#writer.exec("PRAGMA busy_timeout = 0");
    this.#reader = path === ":memory:"
      ? this.#writer
      : new Connection(path, READER_BUSY_TIMEOUT_MS);
  }

  /** The database's schema version, and for version 0 up to three of its tables. */
  #schemaState(): SchemaState {
    const version = Number(this.#writer.get("PRAGMA user_version")?.user_version ?? 0);
    // forgekit sets the version in the transaction that makes its tables:
    // a database at version 0 that has tables is another program's.
    const tables = version === 0
      ? this.#writer.all("SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 3")
        .map((t) => String(t.name))
      : [];
    return { version, tables };
  }

  /** Reads inside a transaction see its writes; others see committed data only. */
  get #r(): Connection {
    return this.#inTx.getStore() ? this.#writer : this.#reader;
  }
  get #w(): Connection {
    return this.#writer;
  }

  transaction<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#inTx.getStore()) return fn();
    // From the call, not from the turn in the queue: transactions queued
    // behind a lock wait for it together, not one after another.
    const deadline = Date.now() + this.#busyTimeoutMs;
    const run = async () => {
      await this.#begin(deadline);
      try {
        this.#refuseNewerSchema();
        const out = await this.#inTx.run(true, fn);
        this.#writer.exec("COMMIT");
        this.#commits++;
        return out;
      } catch (err) {
        this.#writer.rollback();
        throw err;
      }
    };
    const p = this.#queue.then(run, run);
    this.#queue = p.catch(() => {});
    return p;
  }

  /**
   * A newer forgekit may upgrade the database while this one runs (it was
   * opened at this version): its schema is then not this forgekit's to
   * write. The version is read under the write lock, which the upgrade
   * took to change it.
   */
  #refuseNewerSchema(): void {
    const version = Number(this.#writer.get("PRAGMA user_version")!.user_version);
    if (version > SCHEMA_VERSION) {
      throw new StoreError(
        "schema",
        `Database has schema version ${version}, newer than this forgekit (${SCHEMA_VERSION}): a newer forgekit upgraded it while this one ran (restart the server with that forgekit)`,
      );
    }
  }

  /** BEGIN IMMEDIATE, tried again after sleeps of 2 to 100 ms while another connection writes. */
  async #begin(deadline: number): Promise<void> {
    // Transactions here run one at a time: one still open is left from a failed ROLLBACK.
    this.#writer.rollback();
    for (let sleep = 2;; sleep = Math.min(sleep * 2, 100)) {
      try {
        this.#writer.exec("BEGIN IMMEDIATE");
        return;
      } catch (err) {
        if (!(err instanceof StoreError && err.failure === "busy")) throw err;
        const left = deadline - Date.now();
        if (left <= 0) {
          throw new StoreError(
            "busy",
            `Database is locked by another connection: waited ${this.#busyTimeoutMs} ms for its write lock`,
            { cause: err },
          );
        }
        await new Promise((r) => setTimeout(r, Math.min(sleep, left)));
      }
    }
  }

  async dataVersion() {
    // The reader's data_version moves on every commit by another connection,
    // which includes this store's writer and other server processes. An
    // in-memory database has one connection, whose own commits never move
    // it, and no other process: there, count the commits.
    if (this.#reader === this.#writer) return this.#commits;
    return Number(this.#reader.get("PRAGMA data_version")!.data_version);
  }

  async close() {
    await this.#queue;
    if (this.#reader !== this.#writer) this.#reader.close();
    this.#writer.close();
  }

  async userByLogin(login: string) {
    return (this.#r.get("SELECT * FROM users WHERE login = ?", login) as UserRow | undefined) ??
      null;
  }
  async userByTokenHash(hash: string) {
    return (this.#r.get(
      "SELECT u.* FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?",
      hash,
    ) as
      | UserRow
      | undefined) ?? null;
  }
  async ensureUser(login: string) {
    this.#w.run("INSERT OR IGNORE INTO users (login, created_at) VALUES (?, ?)", login, now());
    return this.#w.get("SELECT * FROM users WHERE login = ?", login) as unknown as UserRow;
  }
  async addToken(userId: number, hash: string) {
    this.#w.run(
      "INSERT INTO tokens (hash, user_id, created_at) VALUES (?, ?, ?)",
      hash,
      userId,
      now(),
    );
  }

  async createRepo(
    r: {
      owner_id: number;
      name: string;
      private: boolean;
      allow_stacked_pull_requests: boolean;
      default_branch: string;
    },
  ) {
    const t = now();
    const res = this.#w.run(
      "INSERT INTO repos (owner_id, name, private, allow_stacked, default_branch, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
      r.owner_id,
      r.name,
      r.private ? 1 : 0,
      r.allow_stacked_pull_requests ? 1 : 0,
      r.default_branch,
      t,
      t,
    );
    return toRepo(this.#w.get(`${REPO_SELECT} WHERE r.id = ?`, Number(res.lastInsertRowid))!);
  }
  async getRepo(owner: string, name: string) {
    const row = this.#r.get(`${REPO_SELECT} WHERE u.login = ? AND r.name = ?`, owner, name);
    return row ? toRepo(row) : null;
  }
  async getRepoById(id: number) {
    const row = this.#r.get(`${REPO_SELECT} WHERE r.id = ?`, id);
    return row ? toRepo(row) : null;
  }
  async updateRepo(
    id: number,
    patch: Partial<Pick<RepoRow, "private" | "allow_stacked_pull_requests" | "name">>,
  ) {
    if (patch.private !== undefined) {
      this.#w.run("UPDATE repos SET private = ? WHERE id = ?", patch.private ? 1 : 0, id);
    }
    if (patch.allow_stacked_pull_requests !== undefined) {
      this.#w.run(
        "UPDATE repos SET allow_stacked = ? WHERE id = ?",
        patch.allow_stacked_pull_requests ? 1 : 0,
        id,
      );
    }
    if (patch.name !== undefined) {
      this.#w.run("UPDATE repos SET name = ? WHERE id = ?", patch.name, id);
    }
    this.#w.run("UPDATE repos SET updated_at = ? WHERE id = ?", now(), id);
  }
  async addCollaborator(repoId: number, userId: number) {
    this.#w.run(
      "INSERT OR IGNORE INTO collaborators (repo_id, user_id) VALUES (?, ?)",
      repoId,
      userId,
    );
  }
  async isCollaborator(repoId: number, userId: number) {
    return this.#r.get(
      "SELECT 1 AS x FROM collaborators WHERE repo_id = ? AND user_id = ?",
      repoId,
      userId,
    ) !== undefined;
  }

  async branchShas(repoId: number, names: string[]) {
    const shas = new Map<string, string>();
    if (names.length === 0) return shas;
    const rows = this.#r.rows(
      "SELECT name, sha FROM branches WHERE repo_id = ? AND name IN (SELECT value FROM json_each(?))",
      repoId,
      JSON.stringify(names),
    );
    for (const [name, sha] of rows) shas.set(name as string, sha as string);
    return shas;
  }

  async getBranch(repoId: number, name: string) {
    return (this.#r.get("SELECT * FROM branches WHERE repo_id = ? AND name = ?", repoId, name) as
      | BranchRow
      | undefined) ??
      null;
  }
  async putBranch(repoId: number, name: string, sha: string) {
    this.#w.run(
      "INSERT INTO branches (repo_id, name, sha) VALUES (?, ?, ?) ON CONFLICT (repo_id, name) DO UPDATE SET sha = excluded.sha",
      repoId,
      name,
      sha,
    );
  }
  async deleteBranch(repoId: number, name: string) {
    this.#w.run("DELETE FROM branches WHERE repo_id = ? AND name = ?", repoId, name);
  }

  async insertPull(p: NewPull) {
    const num = Number(
      this.#w.get("SELECT next_pull FROM repos WHERE id = ?", p.repo_id)!.next_pull,
    );
    this.#w.run("UPDATE repos SET next_pull = next_pull + 1 WHERE id = ?", p.repo_id);
    const t = now();
    const res = this.#w.run(
      "INSERT INTO pulls (repo_id, number, user_id, title, body, state, draft, head_ref, head_sha, base_ref, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, ?)",
      p.repo_id,
      num,
      p.user_id,
      p.title,
      p.body,
      p.draft ? 1 : 0,
      p.head_ref,
      p.head_sha,
      p.base_ref,
      t,
      t,
    );
    return toPull(this.#w.row(`${PULL_SELECT} WHERE p.id = ?`, Number(res.lastInsertRowid))!);
  }
  async getPull(repoId: number, number: number) {
    const row = this.#r.row(`${PULL_SELECT} WHERE p.repo_id = ? AND p.number = ?`, repoId, number);
    return row ? toPull(row) : null;
  }
  async pullsByNumbers(repoId: number, numbers: number[]) {
    if (numbers.length === 0) return [];
    return this.#r.rows(
      `${PULL_SELECT} WHERE p.repo_id = ? AND p.number IN (${marks(numbers.length)})`,
      repoId,
      ...numbers,
    ).map(toPull);
  }
  async openPullsByHead(repoId: number, headRef: string) {
    return this.#r.rows(
      `${PULL_SELECT} WHERE p.repo_id = ? AND p.head_ref = ? AND p.state = 'open'`,
      repoId,
      headRef,
    ).map(toPull);
  }
  async openPullsTouching(repoId: number, branch: string) {
    return this.#r.rows(
      `${PULL_SELECT} WHERE p.repo_id = ? AND p.state = 'open' AND (p.head_ref = ? OR p.base_ref = ?)`,
      repoId,
      branch,
      branch,
    ).map(toPull);
  }
  async listPulls(
    repoId: number,
    f: PullFilter,
    limit: number,
    offset: number,
  ): Promise<Page<PullRow>> {
    const q = pullListQuery(repoId, f);
    const total = this.#r.row(q.count, ...q.args)![0] as number;
    if (offset >= total) return { items: [], total };
    // One statement: the page's ids from the index alone (an offset skips
    // index entries, not rows), then each one's row. CROSS JOIN keeps the
    // page the outer loop, so rows come in its order.
    const items = this.#r.rows(
      `SELECT ${PULL_COLUMNS} FROM (${q.page}) pg CROSS JOIN pulls p ON p.id = pg.id
       ${PULL_USERS}`,
      ...q.args,
      limit,
      offset,
    ).map(toPull);
    return { items, total };
  }
  async updatePull(id: number, patch: PullPatch) {
    const cols = Object.keys(patch) as (keyof PullPatch)[];
    if (cols.length > 0) {
      const sets = cols.map((c) => `${c} = ?`).join(", ");
      const vals = cols.map((c) => {
        const v = patch[c];
        return typeof v === "boolean" ? (v ? 1 : 0) : (v as SQLInputValue);
      });
      this.#w.run(`UPDATE pulls SET ${sets}, updated_at = ? WHERE id = ?`, ...vals, now(), id);
    }
    return toPull(this.#w.row(`${PULL_SELECT} WHERE p.id = ?`, id)!);
  }

  /** The next id of `table` (see {@linkcode SERIALS}), taken in one statement. */
  #nextId(table: "stacks" | "hooks"): number {
    return Number(
      this.#w.get(
        "UPDATE serials SET next = next + 1 WHERE name = ? RETURNING next - 1 AS id",
        table,
      )!
        .id,
    );
  }

  async insertStack(repoId: number, baseRef: string) {
    const num = Number(
      this.#w.get("SELECT next_stack FROM repos WHERE id = ?", repoId)!.next_stack,
    );
    this.#w.run("UPDATE repos SET next_stack = next_stack + 1 WHERE id = ?", repoId);
    const id = this.#nextId("stacks");
    this.#w.run(
      "INSERT INTO stacks (id, repo_id, number, base_ref, created_at) VALUES (?, ?, ?, ?, ?)",
      id,
      repoId,
      num,
      baseRef,
      now(),
    );
    return toStack(this.#w.row(`${STACK_SELECT} WHERE s.id = ?`, id)!);
  }
  async getStack(repoId: number, number: number) {
    const row = this.#r.row(`${STACK_SELECT} WHERE s.repo_id = ? AND s.number = ?`, repoId, number);
    return row ? toStack(row) : null;
  }
  async stacksByIds(ids: number[]) {
    if (ids.length === 0) return [];
    return this.#r.rows(
      `${STACK_SELECT} WHERE s.id IN (SELECT value FROM json_each(?))`,
      JSON.stringify(ids),
    ).map(toStack);
  }
  async stacksWithSizes(ids: number[]): Promise<SizedStack[]> {
    if (ids.length === 0) return [];
    return this.#r.rows(
      `SELECT ${STACK_COLUMNS}, (SELECT count(*) FROM pulls x WHERE x.stack_id = s.id)
       FROM stacks s WHERE s.id IN (SELECT value FROM json_each(?))`,
      JSON.stringify(ids),
    ).map((r) => ({ stack: toStack(r), size: r[5] as number }));
  }
  async pullsInStacks(stackIds: number[]) {
    if (stackIds.length === 0) return [];
    return this.#r.rows(
      `${PULL_SELECT} WHERE p.stack_id IN (${
        marks(stackIds.length)
      }) ORDER BY p.stack_id, p.stack_position`,
      ...stackIds,
    ).map(toPull);
  }
  async stackMembers(stackIds: number[]): Promise<StackMember[]> {
    if (stackIds.length === 0) return [];
    return this.#r.rows(
      `SELECT stack_id, number, state, draft, merged_at, head_ref, head_sha FROM pulls
       WHERE stack_id IN (${marks(stackIds.length)}) ORDER BY stack_id, stack_position`,
      ...stackIds,
    ).map((r) => ({
      stack_id: r[0] as number,
      number: r[1] as number,
      state: r[2] as PullRow["state"],
      draft: r[3] === 1,
      merged_at: r[4] as string | null,
      head_ref: r[5] as string,
      head_sha: r[6] as string,
    }));
  }
  async listStacks(
    repoId: number,
    pullNumber: number | null,
    limit: number,
    offset: number,
  ): Promise<Page<StackRow>> {
    if (pullNumber !== null) {
      const items = this.#r.rows(
        `${STACK_SELECT} JOIN pulls p ON p.stack_id = s.id WHERE s.repo_id = ? AND p.repo_id = ? AND p.number = ?`,
        repoId,
        repoId,
        pullNumber,
      ).map(toStack);
      return { items: items.slice(offset, offset + limit), total: items.length };
    }
    const total = this.#r.row(
      "SELECT count(*) FROM stacks WHERE repo_id = ?",
      repoId,
    )![0] as number;
    const items = this.#r.rows(
      `${STACK_SELECT} WHERE s.repo_id = ? ORDER BY s.number DESC LIMIT ? OFFSET ?`,
      repoId,
      limit,
      offset,
    ).map(toStack);
    return { items, total };
  }
  async deleteStack(id: number) {
    this.#w.run("UPDATE pulls SET stack_id = NULL, stack_position = NULL WHERE stack_id = ?", id);
    this.#w.run("DELETE FROM stacks WHERE id = ?", id);
  }

  async insertHook(
    h: Pick<HookRow, "repo_id" | "url" | "secret" | "events" | "active" | "content_type">,
  ) {
    const t = now();
    const id = this.#nextId("hooks");
    this.#w.run(
      "INSERT INTO hooks (id, repo_id, url, secret, events, active, content_type, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
      id,
      h.repo_id,
      h.url,
      h.secret,
      JSON.stringify(h.events),
      h.active ? 1 : 0,
      h.content_type,
      t,
      t,
    );
    return toHook(this.#w.get("SELECT * FROM hooks WHERE id = ?", id)!);
  }
  async getHook(repoId: number, id: number) {
    const row = this.#r.get("SELECT * FROM hooks WHERE repo_id = ? AND id = ?", repoId, id);
    return row ? toHook(row) : null;
  }
  async listHooks(repoId: number) {
    return this.#r.all("SELECT * FROM hooks WHERE repo_id = ? ORDER BY id", repoId).map(toHook);
  }
  async updateHook(
    id: number,
    patch: Partial<Pick<HookRow, "url" | "secret" | "events" | "active" | "content_type">>,
  ) {
    if (patch.url !== undefined) {
      this.#w.run("UPDATE hooks SET url = ? WHERE id = ?", patch.url, id);
    }
    if (patch.secret !== undefined) {
      this.#w.run("UPDATE hooks SET secret = ? WHERE id = ?", patch.secret, id);
    }
    if (patch.events !== undefined) {
      this.#w.run("UPDATE hooks SET events = ? WHERE id = ?", JSON.stringify(patch.events), id);
    }
    if (patch.active !== undefined) {
      this.#w.run("UPDATE hooks SET active = ? WHERE id = ?", patch.active ? 1 : 0, id);
    }
    if (patch.content_type !== undefined) {
      this.#w.run("UPDATE hooks SET content_type = ? WHERE id = ?", patch.content_type, id);
    }
    this.#w.run("UPDATE hooks SET updated_at = ? WHERE id = ?", now(), id);
    return toHook(this.#w.get("SELECT * FROM hooks WHERE id = ?", id)!);
  }
  async deleteHook(id: number) {
    this.#w.run("DELETE FROM deliveries WHERE hook_id = ?", id);
    this.#w.run("DELETE FROM hooks WHERE id = ?", id);
  }

  async insertDelivery(
    d: {
      guid: string;
      hook_id: number;
      repo_id: number;
      event: string;
      action: string | null;
      payload: string;
      redelivery: boolean;
    },
  ) {
    const res = this.#w.run(
      "INSERT INTO deliveries (guid, hook_id, repo_id, event, action, payload, status, next_attempt_at, redelivery, created_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
      d.guid,
      d.hook_id,
      d.repo_id,
      d.event,
      d.action,
      d.payload,
      Date.now(),
      d.redelivery ? 1 : 0,
      now(),
    );
    return toDelivery(
      this.#w.get("SELECT * FROM deliveries WHERE id = ?", Number(res.lastInsertRowid))!,
    );
  }
  async getDelivery(hookId: number, id: number) {
    const row = this.#r.get("SELECT * FROM deliveries WHERE hook_id = ? AND id = ?", hookId, id);
    return row ? toDelivery(row) : null;
  }
  async listDeliveries(hookId: number, limit: number, offset: number) {
    const total = Number(
      this.#r.get("SELECT count(*) AS n FROM deliveries WHERE hook_id = ?", hookId)!.n,
    );
    const items = this.#r.all(
      "SELECT * FROM deliveries WHERE hook_id = ? ORDER BY id DESC LIMIT ? OFFSET ?",
      hookId,
      limit,
      offset,
    ).map(toDelivery);
    return { items, total };
  }
  async lastAttempts(hookIds: readonly number[]) {
    // Each hook's newest attempted delivery, found from the top of its (hook_id, id) index.
    const rows = this.#r.all(
      `SELECT hook_id, status_code FROM deliveries WHERE id IN (
         SELECT (SELECT id FROM deliveries
                 WHERE hook_id = j.value AND attempts > 0 ORDER BY id DESC LIMIT 1)
         FROM json_each(?) j)`,
      JSON.stringify(hookIds),
    );
    return new Map(rows.map((r) => [
      Number(r.hook_id),
      { status_code: r.status_code === null ? null : Number(r.status_code) },
    ]));
  }
  async claimDeliveries(
    at: number,
    o: {
      until: number;
      limit: number;
      skipHooks: readonly number[];
      perOwner?: { max: number; busy: Readonly<Record<number, number>> };
    },
  ) {
    // The oldest due delivery of each hook not in flight; of those, an
    // owner's n-th (after its busy ones) only while n is within its share.
    // Lists travel as JSON: one statement for any number of them.
    const ids = this.#w.all(
      `UPDATE deliveries SET next_attempt_at = ? WHERE id IN (
         SELECT id FROM (
           SELECT min(d.id) AS id,
             ROW_NUMBER() OVER (PARTITION BY r.owner_id ORDER BY min(d.id))
               + coalesce(json_extract(?, '$."' || r.owner_id || '"'), 0) AS nth
           FROM deliveries d JOIN repos r ON r.id = d.repo_id
           WHERE d.status = 'pending' AND d.next_attempt_at <= ?
             AND d.hook_id NOT IN (SELECT value FROM json_each(?))
           GROUP BY d.hook_id, r.owner_id)
         WHERE nth <= ? ORDER BY id LIMIT ?)
       RETURNING id`,
      o.until,
      JSON.stringify(o.perOwner?.busy ?? {}),
      at,
      JSON.stringify(o.skipHooks),
      o.perOwner?.max ?? o.limit,
      o.limit,
    ).map((r) => Number(r.id));
    if (ids.length === 0) return [];
    return this.#w.all(
      `SELECT d.*, r.owner_id AS owner_id FROM deliveries d JOIN repos r ON r.id = d.repo_id
       WHERE d.id IN (SELECT value FROM json_each(?)) ORDER BY d.id`,
      JSON.stringify(ids),
    ).map((row) => ({ ...toDelivery(row), owner_id: Number(row.owner_id) }));
  }
  async nextDueAt(skipHooks: readonly number[], skipOwners: readonly number[] = []) {
    // Joined as the claim is, so that what is due here can be claimed there.
    const row = this.#r.get(
      `SELECT min(d.next_attempt_at) AS t FROM deliveries d JOIN repos r ON r.id = d.repo_id
       WHERE d.status = 'pending' AND d.hook_id NOT IN (SELECT value FROM json_each(?))
         AND r.owner_id NOT IN (SELECT value FROM json_each(?))`,
      JSON.stringify(skipHooks),
      JSON.stringify(skipOwners),
    );
    return row?.t === null || row?.t === undefined ? null : Number(row.t);
  }
  async recordAttempt(
    id: number,
    r: {
      status: DeliveryRow["status"];
      status_code: number | null;
      duration_ms: number;
      next_attempt_at: number;
      delivered_at: string | null;
    },
  ) {
    this.#w.run(
      "UPDATE deliveries SET status = ?, status_code = ?, duration_ms = ?, next_attempt_at = ?, delivered_at = ?, attempts = attempts + 1 WHERE id = ?",
      r.status,
      r.status_code,
      r.duration_ms,
      r.next_attempt_at,
      r.delivered_at,
      id,
    );
  }
}
