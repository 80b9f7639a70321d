/**
 * Runs `h2_client.py` (a raw HTTP/2 client on hyper's h2) through a bump
 * front: one scenario (JSON) in, one result (JSON) out. See the script's
 * docstring for the scenario's steps and the result's fields.
 */
import { fileURLToPath } from "node:url";
import type { BumpFront } from "./bump.ts";

/** The interpreter that has the h2 library (Debian: python3-h2). */
export const H2_PYTHON = "/usr/bin/python3";
const SCRIPT = fileURLToPath(new URL("./h2_client.py", import.meta.url));
const dec = new TextDecoder();

/** Whether {@linkcode H2_PYTHON} can import h2 (the tests that need it skip otherwise). */
export function hasH2Python(): boolean {
  try {
    const out = new Deno.Command(H2_PYTHON, {
      args: ["-c", "import h2"],
      stdout: "null",
      stderr: "null",
    }).outputSync();
    return out.success;
  } catch {
    return false;
  }
}

/** A header list as the script takes it: [name, value] pairs, sent as is. */
export type H2Headers = [string, string][];

/** One step of a scenario (see the script's docstring). */
export type H2Step = { op: string; [key: string]: unknown };

/** A scenario; `proxy` and `ca` come from the front. */
export interface H2Scenario {
  host?: string;
  port?: number;
  timeout?: number;
  preface?: boolean;
  settings?: Record<string, number>;
  /** "manual": windows open only at "window" steps. */
  window?: "auto" | "lazy" | "manual";
  connection_window?: number;
  steps: H2Step[];
}

/** One stream as the client saw it. */
export interface H2StreamResult {
  status: number | null;
  headers: H2Headers | null;
  informational: H2Headers[];
  trailers: H2Headers | null;
  /** The body as text (null above 64 KiB). */
  body: string | null;
  length: number;
  sha256: string;
  ended: boolean;
  /** The RST_STREAM code the server sent. */
  reset: number | null;
  local_reset: number | null;
  sent: { length: number; sha256: string };
}

/** A GOAWAY the server sent. */
export interface H2Goaway {
  code: number;
  last_stream: number;
  debug: string;
}

/** What the client saw. */
export interface H2Result {
  alpn: string | null;
  /** The server's SETTINGS, by name. */
  settings: Record<string, number>;
  settings_frames: number;
  streams: Record<string, H2StreamResult>;
  goaway: H2Goaway | null;
  goaways: H2Goaway[];
  closed: boolean;
  ping_acks: string[];
  /** Frames received, counted by type name. */
  frames: Record<string, number>;
  max_data_frame: number;
  flow_violations: unknown[];
  client_error: string | null;
  timeouts: unknown[];
  step_errors: unknown[];
  write_error: string | null;
  close_error: string | null;
  error: string | null;
}

/** Runs one scenario against the front; throws when the script itself fails. */
export async function runH2(f: BumpFront, scenario: H2Scenario): Promise<H2Result> {
  return await runScript(SCRIPT, f, scenario) as H2Result;
}

/** Runs a python client with `scenario` (plus the front's proxy and CA) on stdin; its JSON. */
export async function runScript(
  script: string,
  f: BumpFront,
  scenario: object,
): Promise<unknown> {
  const child = new Deno.Command(H2_PYTHON, {
    args: [script],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const w = child.stdin.getWriter();
  await w.write(new TextEncoder().encode(JSON.stringify({
    proxy: new URL(f.proxyUrl).host,
    ca: f.caCertPath,
    ...scenario,
  })));
  await w.close();
  const out = await child.output();
  const text = dec.decode(out.stdout);
  if (!out.success || !text.trim()) {
    throw new Error(`${script} exited ${out.code}: ${dec.decode(out.stderr)}${text}`);
  }
  return JSON.parse(text);
}

/** A request's header list: the pseudo-fields for `method` and `path` on api.github.com. */
export function request(path: string, method = "GET", extra: H2Headers = []): H2Headers {
  return [
    [":method", method],
    [":scheme", "https"],
    [":authority", "api.github.com"],
    [":path", path],
    ...extra,
  ];
}

/** A stream's result; throws when the client never saw the stream. */
export function stream(r: H2Result, id: number): H2StreamResult {
  const s = r.streams[String(id)];
  if (!s) throw new Error(`no stream ${id} in ${JSON.stringify(Object.keys(r.streams))}`);
  return s;
}

/** A response header's value. */
export function header(s: H2StreamResult, name: string): string | undefined {
  return s.headers?.find(([k]) => k === name)?.[1];
}

const LOAD_SCRIPT = fileURLToPath(new URL("./h2_load.py", import.meta.url));

/** What {@linkcode runH2Load} saw. */
export interface H2LoadResult {
  done: number;
  statuses: Record<string, number>;
  resets: Record<string, number>;
  goaway: { code: number; debug: string } | null;
  error: string | null;
}

/**
 * Runs `support/h2_load.py`: one connection keeping `inflight` GETs of
 * `path` open until `total` have ended, reading everything and sending a
 * PING after every `ping_every` responses.
 */
export async function runH2Load(
  f: BumpFront,
  load: { path: string; total: number; inflight: number; ping_every?: number; host?: string },
): Promise<H2LoadResult> {
  return await runScript(LOAD_SCRIPT, f, load) as H2LoadResult;
}
