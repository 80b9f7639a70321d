/**
 * The webhook delivery worker: sends pending deliveries from the outbox,
 * signs them, and retries with exponential backoff. Pending deliveries
 * survive a restart because they live in the database.
 */
import { createHmac } from "node:crypto";
import { authFetch } from "../auth/mod.ts";
import { VERSION } from "../version.ts";
import { type Lookup, resolvePublicTarget } from "./hook_target.ts";
import type { DeliveryRow, HookRow } from "./model.ts";
import type { Store } from "./store.ts";

/** Options of {@linkcode DeliveryWorker}. */
export interface DeliveryOptions {
  /** First retry delay; doubles each attempt (default 2 s). */
  backoffMs?: number;
  /** Longest retry delay (default 10 min). */
  maxBackoffMs?: number;
  /** Attempts before a delivery is marked failed (default 30). */
  maxAttempts?: number;
  /** Per-attempt timeout (default 10 s, as GitHub's). */
  timeoutMs?: number;
  /**
   * Send to hooks on loopback, private, link-local and other non-public
   * addresses too (default false: such a delivery is a failed attempt, and
   * nothing is sent). For tests and networks whose receivers are internal.
   */
  allowPrivateTargets?: boolean;
  /** Resolves hook hosts (default: the system's resolver, as `node:dns` `lookup`). */
  lookup?: Lookup;
}

/** Hooks sent to at once; each hook has at most one delivery in flight here. */
const MAX_IN_FLIGHT = 16;
/**
 * Of those, at most this many for one account's repositories: hooks that
 * never answer (each attempt waits out its timeout) slow their own
 * account's deliveries, not everyone's.
 */
const MAX_IN_FLIGHT_PER_OWNER = 4;

/**
 * How long a claimed delivery stays leased beyond the attempt's timeout: time
 * to record the outcome. A worker that dies mid-send leaves the delivery to
 * whichever worker finds it due once the lease is over.
 */
const LEASE_SLACK_MS = 5_000;

/**
 * `sha256=<hex>` (or `sha1=<hex>`) of the body under the secret, as
 * `X-Hub-Signature-256` (`X-Hub-Signature`).
 *
 * @example
 * ```ts
 * signature("s3cret", '{"action":"opened"}'); // "sha256=…"
 * ```
 */
export function signature(
  secret: string,
  body: string | Uint8Array,
  algorithm: "sha256" | "sha1" = "sha256",
): string {
  return `${algorithm}=${createHmac(algorithm, secret).update(body).digest("hex")}`;
}

/**
 * The headers and exact body bytes of one delivery, as GitHub sends them: the
 * JSON itself, or for `form` hooks a form whose `payload` field holds it; both
 * signatures cover the bytes sent, and neither is sent without a secret.
 *
 * @example
 * ```ts
 * const { headers, body } = deliveryRequest(hook, delivery);
 * ```
 */
export function deliveryRequest(
  hook: Pick<HookRow, "id" | "repo_id" | "secret" | "content_type">,
  d: Pick<DeliveryRow, "event" | "guid" | "payload">,
): { headers: Record<string, string>; body: Uint8Array<ArrayBuffer> } {
  const form = hook.content_type === "form";
  const body = new TextEncoder().encode(
    form ? new URLSearchParams({ payload: d.payload }).toString() : d.payload,
  );
  const headers: Record<string, string> = {
    "content-type": form ? "application/x-www-form-urlencoded" : "application/json",
    // GitHub's prefix: receivers and their firewalls check it.
    "user-agent": `GitHub-Hookshot/forgekit-${VERSION}`,
    "x-github-event": d.event,
    "x-github-delivery": d.guid,
    "x-github-hook-id": String(hook.id),
    "x-github-hook-installation-target-type": "repository",
    "x-github-hook-installation-target-id": String(hook.repo_id),
  };
  if (hook.secret) {
    headers["x-hub-signature"] = signature(hook.secret, body, "sha1");
    headers["x-hub-signature-256"] = signature(hook.secret, body);
  }
  return { headers, body };
}

/**
 * A hook's `last_response`, as GitHub shows it, from the status code of its
 * latest attempted delivery (`undefined`: none yet; `null`: no answer, as
 * when the receiver is down, slow or not public).
 *
 * @example
 * ```ts
 * lastResponse(undefined); // { code: null, status: "unused", message: null }
 * lastResponse(500); // { code: 500, status: "failed", message: "Invalid HTTP Response: 500" }
 * ```
 */
export function lastResponse(
  code: number | null | undefined,
): { code: number | null; status: string; message: string | null } {
  if (code === undefined) return { code: null, status: "unused", message: null };
  if (code !== null && code >= 200 && code < 300) return { code, status: "active", message: "OK" };
  return { code, status: "failed", message: `Invalid HTTP Response: ${code ?? 0}` };
}

/** Sends webhook deliveries in the background. */
export class DeliveryWorker {
  #store: Store;
  #opts: Required<Omit<DeliveryOptions, "lookup">>;
  #lookup: Lookup | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #draining: Promise<void> | null = null;
  #again = false;
  /** Deliveries in flight per repository owner. */
  #owners = new Map<number, number>();
  #stopped = false;
  /** Hooks with a delivery in flight here, and that send. */
  #inFlight = new Map<number, Promise<void>>();
  /** Aborts the sends in flight when the worker stops. */
  #stop = new AbortController();

  constructor(store: Store, options: DeliveryOptions = {}) {
    this.#store = store;
    this.#opts = {
      backoffMs: options.backoffMs ?? 2000,
      maxBackoffMs: options.maxBackoffMs ?? 600_000,
      maxAttempts: options.maxAttempts ?? 30,
      timeoutMs: options.timeoutMs ?? 10_000,
      allowPrivateTargets: options.allowPrivateTargets ?? false,
    };
    this.#lookup = options.lookup;
  }

  /** Starts sending what is due (also what a previous run left pending). */
  start(): void {
    this.wake();
  }

  /** Looks for due deliveries now (call after a transaction queued some). */
  wake(): void {
    if (this.#stopped) return;
    if (this.#draining) {
      this.#again = true;
      return;
    }
    clearTimeout(this.#timer);
    this.#draining = this.#drain().then(() => true, () => false).then((drained) => {
      this.#draining = null;
      // The database is busy or failing: look again after a retry delay.
      if (!drained) this.#retryIn(this.#opts.backoffMs);
      else if (this.#again) {
        this.#again = false;
        this.wake();
      } else this.#schedule();
    });
  }

  /**
   * Stops the worker. Sends in flight are abandoned, not awaited: a receiver
   * that never answers cannot hold up a shutdown. Their deliveries stay
   * pending and go out again once their lease is over.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#stop.abort();
    await this.#draining;
    await Promise.all(this.#inFlight.values());
  }

  #retryIn(ms: number) {
    if (this.#stopped) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.wake(), ms);
  }

  async #schedule() {
    // Every sender busy: the end of a send wakes the worker (a timer now would spin).
    if (this.#stopped || this.#inFlight.size >= MAX_IN_FLIGHT) return;
    // Busy hooks are left out: the end of their send wakes the worker anyway.
    let next: number | null;
    try {
      next = await this.#store.nextDueAt([...this.#inFlight.keys()], this.#fullOwners());
    } catch {
      next = Date.now() + this.#opts.backoffMs;
    }
    if (next !== null) this.#retryIn(Math.max(0, next - Date.now()));
  }

  /** Owners with their share of senders in flight: their end wakes the worker. */
  #fullOwners(): number[] {
    return [...this.#owners].filter(([, n]) => n >= MAX_IN_FLIGHT_PER_OWNER).map(([o]) => o);
  }

  /** Starts a send for every hook with a due delivery, one per hook, up to the limit. */
  async #drain() {
    while (!this.#stopped && this.#inFlight.size < MAX_IN_FLIGHT) {
      const now = Date.now();
      const skipHooks = [...this.#inFlight.keys()];
      // A read first: most wakes find nothing due, and a claim is a write.
      const next = await this.#store.nextDueAt(skipHooks, this.#fullOwners());
      if (next === null || next > now) return;
      const due = await this.#store.transaction(() =>
        this.#store.claimDeliveries(now, {
          until: now + this.#opts.timeoutMs + LEASE_SLACK_MS,
          limit: MAX_IN_FLIGHT - this.#inFlight.size,
          skipHooks,
          perOwner: { max: MAX_IN_FLIGHT_PER_OWNER, busy: Object.fromEntries(this.#owners) },
        })
      );
      if (due.length === 0) return;
      for (const d of due) {
        this.#owners.set(d.owner_id, (this.#owners.get(d.owner_id) ?? 0) + 1);
        this.#inFlight.set(
          d.hook_id,
          this.#send(d).catch(() => {
            // Not recorded (the database failed): sent again when the lease is over.
          }).finally(() => {
            this.#inFlight.delete(d.hook_id);
            const left = (this.#owners.get(d.owner_id) ?? 1) - 1;
            if (left > 0) this.#owners.set(d.owner_id, left);
            else this.#owners.delete(d.owner_id);
            this.wake();
          }),
        );
      }
    }
  }

  async #send(d: DeliveryRow) {
    const hook = await this.#store.getHook(d.repo_id, d.hook_id);
    const started = performance.now();
    let code: number | null = null;
    if (hook?.active) {
      const { headers, body } = deliveryRequest(hook, d);
      const signal = AbortSignal.any([
        this.#stop.signal,
        AbortSignal.timeout(this.#opts.timeoutMs),
      ]);
      try {
        if (!this.#opts.allowPrivateTargets) {
          // Every address the name resolves to must be public. The connection then resolves
          // it again: a name re-pointed in between (DNS rebinding) is not caught for plain
          // HTTP (Deno's fetch cannot be pinned to an address without sending proxy-style
          // request lines); over HTTPS such a name meets a certificate that is not its own.
          await resolvePublicTarget(new URL(hook.url), { lookup: this.#lookup, signal });
        }
        // No credentials of ours (config: null), and, as GitHub, a receiver's
        // redirect is never followed: a 3xx is a failed delivery.
        const res = await authFetch(hook.url, { method: "POST", headers, body, signal }, {
          config: null,
          resolveReleases: false,
          followRedirects: false,
        });
        code = res.status;
        await res.body?.cancel(); // never read: a receiver's answer may be endless
      } catch {
        if (this.#stopped) return; // abandoned by stop(): the lease runs out, and it is sent again
        code = null; // receiver down, timed out or not public: retried below
      }
    }
    const ok = code !== null && code >= 200 && code < 300;
    const attempts = d.attempts + 1;
    // A deleted or deactivated hook is sent nothing more.
    const giveUp = !hook?.active || attempts >= this.#opts.maxAttempts;
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
