/**
 * Runs `h2_raw.py` (raw HTTP/2 frames, written exactly as given) through a
 * bump front: named cases, each on its own connection, in one process. See
 * the script's docstring for the steps and the result's fields.
 */
import { fileURLToPath } from "node:url";
import type { BumpFront } from "./bump.ts";
import { runScript } from "./h2_client.ts";

const SCRIPT = fileURLToPath(new URL("./h2_raw.py", import.meta.url));

/** One step of a case (see the script's docstring). */
export type RawStep = { op: string; [key: string]: unknown };

/** A frame the server sent. */
export interface RawFrame {
  type: number;
  flags: number;
  stream: number;
  length: number;
  /** Milliseconds since the connection was made. */
  t: number;
  /** RST_STREAM's or GOAWAY's error code. */
  code?: number;
  last_stream?: number;
  debug?: string;
  status?: number | null;
  headers?: [string, string][];
  end_stream?: boolean;
}

/** What one case's connection saw. */
export interface RawResult {
  frames: RawFrame[];
  /** The server closed the connection. */
  closed: boolean;
  error: string | null;
  sent: number;
  data_bytes: number;
}

/** Frame type numbers (RFC 9113 §6). */
export const T = {
  DATA: 0,
  HEADERS: 1,
  PRIORITY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;

/** Runs the cases against the front; throws when the script itself fails. */
export async function runRaw(
  f: BumpFront,
  cases: Record<string, RawStep[]>,
  timeout = 30,
): Promise<Record<string, RawResult>> {
  const out = await runScript(SCRIPT, f, { timeout, cases }) as {
    cases: Record<string, RawResult>;
  };
  return out.cases;
}

/** The connection error the server sent (its GOAWAY's code and text), or null. */
export function goaway(r: RawResult): { code: number; debug: string } | null {
  const g = r.frames.find((x) => x.type === T.GOAWAY);
  return g ? { code: g.code!, debug: g.debug ?? "" } : null;
}

/** The RST_STREAM codes the server sent on a stream. */
export function resets(r: RawResult, stream: number): number[] {
  return r.frames.filter((x) => x.type === T.RST_STREAM && x.stream === stream).map((x) => x.code!);
}

/** The statuses the server answered a stream with. */
export function statuses(r: RawResult, stream: number): number[] {
  return r.frames.filter((x) => x.type === T.HEADERS && x.stream === stream).map((x) =>
    x.status ?? -1
  );
}
