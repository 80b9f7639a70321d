/**
 * The webhook delivery worker: sends pending deliveries from the outbox,
 * signs them, and retries with exponential backoff. Pending deliveries
 * survive a restart because they live in the database.
 */
import { createHmac } from "node:crypto";
import { authFetch } from "../auth/mod.ts";
import { VERSION } from "../version.ts";
import type { DeliveryRow } from "./model.ts";
import type { Store } from "./store.ts";

/** Options of {@linkcode DeliveryWorker}. */
export interface DeliveryOptions {
  /** First retry delay; doubles each attempt (default 2 s). */
  backoffMs?: number;
  /** Longest retry delay (default 10 min). */
  maxBackoffMs?: number;
  /** Attempts before a delivery is marked failed (default 30). */
  maxAttempts?: number;
  /** Per-attempt timeout (default 10 s). */
  timeoutMs?: number;
}

/** `sha256=<hex>` of the body under the secret, as `X-Hub-Signature-256`. */
export function signature(secret: string, body: string): string {
  return `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
}

/** Sends webhook deliveries in the background. */
export class DeliveryWorker {
  #store: Store;
  #opts: Required<DeliveryOptions>;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #running: Promise<void> | null = null;
  #again = false;
  #stopped = false;

  constructor(store: Store, options: DeliveryOptions = {}) {
    this.#store = store;
    this.#opts = {
      backoffMs: options.backoffMs ?? 2000,
      maxBackoffMs: options.maxBackoffMs ?? 600_000,
      maxAttempts: options.maxAttempts ?? 30,
      timeoutMs: options.timeoutMs ?? 10_000,
    };
  }

  /** Starts sending what is due (also what a previous run left pending). */
  start(): void {
    this.wake();
  }

  /** Looks for due deliveries now (call after a transaction queued some). */
  wake(): void {
    if (this.#stopped) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    clearTimeout(this.#timer);
    this.#running = this.#drain().finally(() => {
      this.#running = null;
      if (this.#again) {
        this.#again = false;
        this.wake();
      } else this.#schedule();
    });
  }

  /** Stops the worker; in-flight sends finish first. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
  }

  async #schedule() {
    if (this.#stopped) return;
    const next = await this.#store.nextDueAt();
    if (next === null || this.#stopped) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.wake(), Math.max(0, next - Date.now()));
  }

  async #drain() {
    while (!this.#stopped) {
      const due = await this.#store.dueDeliveries(Date.now(), 16);
      if (due.length === 0) return;
      await Promise.all(due.map((d) => this.#send(d)));
    }
  }

  async #send(d: DeliveryRow) {
    const hook = await this.#store.getHook(d.repo_id, d.hook_id);
    const started = performance.now();
    let code: number | null = null;
    if (hook) {
      const headers: Record<string, string> = {
        "content-type": "application/json",
        "user-agent": `forgekit-Hookshot/${VERSION}`,
        "x-github-event": d.event,
        "x-github-delivery": d.guid,
        "x-github-hook-id": String(hook.id),
      };
      if (hook.secret) headers["x-hub-signature-256"] = signature(hook.secret, d.payload);
      try {
        const res = await authFetch(hook.url, {
          method: "POST",
          headers,
          body: d.payload,
          signal: AbortSignal.timeout(this.#opts.timeoutMs),
        }, { config: null, resolveReleases: false });
        code = res.status;
        await res.body?.cancel();
      } catch {
        code = null; // receiver down or timed out: retried below
      }
    }
    const ok = code !== null && code >= 200 && code < 300;
    const attempts = d.attempts + 1;
    const giveUp = !hook || attempts >= this.#opts.maxAttempts;
    const delay = Math.min(this.#opts.backoffMs * 2 ** d.attempts, this.#opts.maxBackoffMs);
    await this.#store.transaction(() =>
      this.#store.recordAttempt(d.id, {
        status: ok ? "delivered" : giveUp ? "failed" : "pending",
        status_code: code,
        duration_ms: Math.round(performance.now() - started),
        next_attempt_at: ok || giveUp ? d.next_attempt_at : Date.now() + delay,
        delivered_at: ok ? new Date().toISOString().replace(/\.\d{3}Z$/, "Z") : null,
      })
    );
  }
}
