/**
 * Where a request body ends in the bytes that follow its head, for a
 * message forwarded as it came (the firewall's plain-HTTP path). Pure: it
 * only counts. Bytes past the end are not part of the request: a proxy
 * that passed them on would let a client slip a second request, unchecked,
 * into a connection opened for the first.
 *
 * @module
 */
import { chunkSize, MAX_CHUNK_LINE } from "./http_head.ts";
import { RequestBodyError } from "./exchange.ts";

const CR = 13;
const LF = 10;

/**
 * Follows one request body: a length, or chunked coding (RFC 9112 §7.1)
 * with its trailers.
 *
 * @example
 * ```ts
 * const end = new BodyEnd(5);
 * end.take(new TextEncoder().encode("helloGET /next")); // 5
 * end.done; // true
 * ```
 */
export class BodyEnd {
  #remaining: number;
  #chunked: boolean;
  /** Chunked: what the next bytes are. */
  #state: "size" | "data" | "data-cr" | "data-lf" | "trailer" = "size";
  /** The line being read (a chunk size or a trailer), as bytes seen so far. */
  #line: number[] = [];
  #done: boolean;

  constructor(framing: number | "chunked") {
    this.#chunked = framing === "chunked";
    this.#remaining = framing === "chunked" ? 0 : framing;
    this.#done = framing === 0;
  }

  /** Whether the body has ended. */
  get done(): boolean {
    return this.#done;
  }

  /**
   * How many of `bytes` (the next ones after what was taken before) belong
   * to the body. Throws {@linkcode RequestBodyError} for chunked coding that
   * is malformed.
   */
  take(bytes: Uint8Array): number {
    if (this.#done) return 0;
    if (!this.#chunked) {
      const n = Math.min(bytes.byteLength, this.#remaining);
      this.#remaining -= n;
      this.#done = this.#remaining === 0;
      return n;
    }
    let i = 0;
    while (i < bytes.byteLength && !this.#done) {
      switch (this.#state) {
        case "data": {
          const n = Math.min(bytes.byteLength - i, this.#remaining);
          i += n;
          this.#remaining -= n;
          if (this.#remaining === 0) this.#state = "data-cr";
          break;
        }
        case "data-cr":
        case "data-lf": {
          const want = this.#state === "data-cr" ? CR : LF;
          if (bytes[i++] !== want) throw new RequestBodyError("a chunk not followed by CRLF");
          this.#state = want === CR ? "data-lf" : "size";
          break;
        }
        default:
          i = this.#readLine(bytes, i);
      }
    }
    return i;
  }

  /** Reads a chunk-size or trailer line from `i`; returns where it stopped. */
  #readLine(bytes: Uint8Array, i: number): number {
    for (; i < bytes.byteLength; i++) {
      const b = bytes[i];
      const line = this.#line;
      const afterCr = line.at(-1) === CR;
      if (b === LF && afterCr) {
        line.pop();
        const text = String.fromCharCode(...line);
        this.#line = [];
        this.#onLine(text);
        return i + 1;
      }
      // A bare CR or LF, or another control, is where parsers part ways on
      // where the message ends: refused.
      if (afterCr || (b < 0x20 && b !== 0x09 && b !== CR) || b === 0x7f) {
        throw new RequestBodyError("a control character in a chunk line");
      }
      if (line.length >= MAX_CHUNK_LINE) {
        throw new RequestBodyError("a chunk line is too long");
      }
      line.push(b);
    }
    return i;
  }

  #onLine(text: string): void {
    if (this.#state === "trailer") {
      if (text === "") this.#done = true;
      return;
    }
    const size = chunkSize(text);
    if (size === null) {
      throw new RequestBodyError(`invalid chunk size ${JSON.stringify(text.slice(0, 40))}`);
    }
    this.#remaining = size;
    this.#state = size === 0 ? "trailer" : "data";
  }
}
