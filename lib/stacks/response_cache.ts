/** The server's cache of GET responses, bounded by bytes. */

/** A cached GET response: what it was computed from, and its representation. */
export interface CachedResponse {
  /** The store's data version the body was read at. */
  version: number;
  body: Uint8Array<ArrayBuffer>;
  headers: [string, string][];
  etag: string;
}

/** Options of {@linkcode ResponseCache}. */
export interface ResponseCacheOptions {
  /** The most the entries may hold together, in bytes (default 32 MiB). */
  maxBytes?: number;
  /** The largest body kept (default 1 MiB); larger ones are served, never kept. */
  maxEntryBytes?: number;
}

/** What an entry costs besides its body: the key, the headers, the object itself. */
function sizeOf(key: string, value: CachedResponse): number {
  let n = value.body.byteLength + key.length * 2 + value.etag.length * 2 + 128;
  for (const [k, v] of value.headers) n += (k.length + v.length) * 2 + 32;
  return n;
}

/**
 * A least-recently-used cache of GET responses, bounded by total bytes, that
 * keeps only entries of the current data version. Any commit changes the
 * version and makes every entry stale; stale ones are never served and are
 * dropped as soon as a newer version is seen, so memory is not held for data
 * that can no longer be served.
 *
 * @example
 * ```ts
 * const cache = new ResponseCache({ maxBytes: 32 << 20 });
 * const hit = cache.get("0 http://h/repos/o/r", version);
 * if (!hit) cache.set("0 http://h/repos/o/r", { version, body, headers, etag });
 * ```
 */
export class ResponseCache {
  #map = new Map<string, { value: CachedResponse; size: number }>();
  #bytes = 0;
  #version: number | null = null;
  #maxBytes: number;
  #maxEntryBytes: number;

  constructor(options: ResponseCacheOptions = {}) {
    this.#maxBytes = options.maxBytes ?? 32 << 20;
    this.#maxEntryBytes = Math.min(options.maxEntryBytes ?? 1 << 20, this.#maxBytes);
  }

  /** Bytes held now (bodies, keys and headers, roughly). */
  get bytes(): number {
    return this.#bytes;
  }

  /** Entries held now. */
  get size(): number {
    return this.#map.size;
  }

  /** The entry for `key` read at `version`, or undefined; a newer version drops every older entry. */
  get(key: string, version: number): CachedResponse | undefined {
    this.#see(version);
    const hit = this.#map.get(key);
    if (!hit || hit.value.version !== version) return undefined;
    this.#map.delete(key);
    this.#map.set(key, hit);
    return hit.value;
  }

  /**
   * Keeps `value` under `key`, unless its body is over the entry limit or it
   * was read at a version other than the newest seen (a commit landed while
   * it was computed). The least recently used entries go to make room.
   */
  set(key: string, value: CachedResponse): void {
    this.#see(value.version);
    if (value.version !== this.#version) return;
    this.#delete(key);
    if (value.body.byteLength > this.#maxEntryBytes) return;
    const size = sizeOf(key, value);
    if (size > this.#maxBytes) return;
    this.#map.set(key, { value, size });
    this.#bytes += size;
    for (const oldest of this.#map.keys()) {
      if (this.#bytes <= this.#maxBytes) break;
      this.#delete(oldest);
    }
  }

  /**
   * A newer version than the current one: everything held was read before it.
   * (Versions only grow; a smaller one is a request that read it before a
   * commit and got here after one that read it after.)
   */
  #see(version: number) {
    if (version === this.#version) return;
    if (this.#version !== null && version < this.#version) return;
    this.#version = version;
    this.#map.clear();
    this.#bytes = 0;
  }

  #delete(key: string) {
    const old = this.#map.get(key);
    if (!old) return;
    this.#map.delete(key);
    this.#bytes -= old.size;
  }
}
