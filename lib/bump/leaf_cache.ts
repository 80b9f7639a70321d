/**
 * A bounded least-recently-used cache of values made asynchronously: the
 * leaves (and their TLS listeners) of `--ssl-bump`. Concurrent requests for
 * the same key share one making, so a host costs one signature however many
 * connections arrive at once.
 *
 * @module
 */

/** Options of {@linkcode LeafCache}. */
export interface LeafCacheOptions<T> {
  /** The most entries kept; the least recently used is evicted beyond it. */
  capacity: number;
  /** Called with an evicted (or cleared) value, e.g. to close a listener. */
  onEvict?: (value: T) => void;
}

/**
 * An LRU cache of promised values.
 *
 * @example
 * ```ts
 * const cache = new LeafCache<string>({ capacity: 2 });
 * await cache.get("a.com", () => Promise.resolve("leaf-a"));
 * ```
 */
export class LeafCache<T> {
  #entries = new Map<string, Promise<T>>();
  #capacity: number;
  #onEvict?: (value: T) => void;

  constructor(options: LeafCacheOptions<T>) {
    if (!(options.capacity >= 1)) {
      throw new RangeError(`Cache capacity must be at least 1: got ${options.capacity}`);
    }
    this.#capacity = options.capacity;
    this.#onEvict = options.onEvict;
  }

  /** The number of entries held. */
  get size(): number {
    return this.#entries.size;
  }

  /** Whether `key` is cached (made or being made). */
  has(key: string): boolean {
    return this.#entries.has(key);
  }

  /** Returns the value for `key`, making it with `make` once when missing. */
  get(key: string, make: () => Promise<T>): Promise<T> {
    const hit = this.#entries.get(key);
    if (hit) {
      this.#entries.delete(key);
      this.#entries.set(key, hit);
      return hit;
    }
    const made = make();
    this.#entries.set(key, made);
    // A failed making is not cached: the next request tries again.
    made.catch(() => {
      if (this.#entries.get(key) === made) this.#entries.delete(key);
    });
    while (this.#entries.size > this.#capacity) {
      const [oldest, value] = this.#entries.entries().next().value!;
      this.#entries.delete(oldest);
      this.#release(value);
    }
    return made;
  }

  /** Evicts every entry. */
  clear(): void {
    const values = [...this.#entries.values()];
    this.#entries.clear();
    for (const v of values) this.#release(v);
  }

  #release(value: Promise<T>): void {
    if (this.#onEvict) value.then(this.#onEvict, () => {});
  }
}
