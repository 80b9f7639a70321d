/**
 * A bounded least-recently-used cache of per-host values made on demand
 * (leaf certificates and the TLS terminators that present them). Concurrent
 * requests for the same key share one creation.
 *
 * @module
 */

/** Options of {@linkcode LeafCache}. */
export interface LeafCacheOptions<T> {
  /** Most entries kept; the least recently used is evicted beyond it. */
  limit: number;
  /** Called with an evicted (or cleared) value, e.g. to close a server. */
  onEvict?: (value: T) => void | Promise<void>;
}

/**
 * @example
 * ```ts
 * const cache = new LeafCache<string>({ limit: 1024 });
 * const cert = await cache.get("github.com", () => sign("github.com"));
 * ```
 */
export class LeafCache<T> {
  #entries = new Map<string, Promise<T>>();
  #limit: number;
  #onEvict?: (value: T) => void | Promise<void>;

  constructor(options: LeafCacheOptions<T>) {
    if (!(options.limit >= 1)) {
      throw new RangeError(`Cache limit must be at least 1: got ${options.limit}`);
    }
    this.#limit = options.limit;
    this.#onEvict = options.onEvict;
  }

  /** Number of entries held. */
  get size(): number {
    return this.#entries.size;
  }

  /** Returns the value for `key`, creating it with `make` once. A failed creation is not cached. */
  get(key: string, make: () => Promise<T>): Promise<T> {
    const hit = this.#entries.get(key);
    if (hit) {
      this.#entries.delete(key);
      this.#entries.set(key, hit);
      return hit;
    }
    const made = make();
    this.#entries.set(key, made);
    made.catch(() => {
      if (this.#entries.get(key) === made) this.#entries.delete(key);
    });
    while (this.#entries.size > this.#limit) {
      const [oldest, value] = this.#entries.entries().next().value!;
      this.#entries.delete(oldest);
      this.#evict(value);
    }
    return made;
  }

  /** Evicts everything. */
  async clear(): Promise<void> {
    const values = [...this.#entries.values()];
    this.#entries.clear();
    await Promise.all(values.map((v) => this.#evict(v)));
  }

  async #evict(value: Promise<T>): Promise<void> {
    try {
      const v = await value;
      await this.#onEvict?.(v);
    } catch {
      // A failed creation has nothing to release.
    }
  }
}
