/** Repository webhooks and their deliveries. */
import { type Context, Hono } from "hono";
import { ApiError, validationFailed } from "./api_error.ts";
import { lastResponse } from "./deliveries.ts";
import { emitPing } from "./events.ts";
import {
  adminRepo,
  boolField,
  type Env,
  intParam,
  jsonBody,
  pageParams,
  requireUser,
  setLinks,
  unstorableText,
} from "./http.ts";
import { hookUrlProblem } from "./hook_target.ts";
import type { DeliveryRow, HookRow, RepoRow } from "./model.ts";
import { hookJson, type Urls } from "./render.ts";
import type { Store } from "./store.ts";

type Ctx = Context<Env>;

/** The most hooks one repository may have (GitHub's limit, per event). */
export const MAX_HOOKS = 20;

/** The longest hook URL accepted. */
const MAX_URL_LENGTH = 2048;

/** The most `events` a hook may list (GitHub has fewer event kinds). */
const MAX_EVENTS = 100;

function parseConfig(
  body: Record<string, unknown>,
  options: { required: boolean; allowPrivate: boolean },
) {
  const required = options.required;
  const cfg = body.config;
  if (cfg === undefined && !required) return {};
  if (typeof cfg !== "object" || cfg === null || Array.isArray(cfg)) {
    throw validationFailed("Hook", [{
      field: "config",
      code: "missing_field",
      message: "config must be an object with a url",
    }]);
  }
  const c = cfg as Record<string, unknown>;
  const out: { url?: string; secret?: string | null; content_type?: "json" | "form" } = {};
  if (c.url !== undefined || required) {
    const why = typeof c.url === "string" ? unstorableText(c.url) : null;
    let ok = typeof c.url === "string" && why === null;
    if (ok) {
      try {
        ok = ["http:", "https:"].includes(new URL(c.url as string).protocol);
      } catch {
        ok = false;
      }
    }
    if (!ok) {
      throw validationFailed("Hook", [{
        field: "url",
        code: "invalid",
        message: why === null ? "config.url must be an http(s) URL" : `config.url ${why}`,
      }]);
    }
    if ((c.url as string).length > MAX_URL_LENGTH) {
      throw validationFailed("Hook", [{
        field: "url",
        code: "invalid",
        message: `config.url is too long (maximum is ${MAX_URL_LENGTH} characters)`,
      }]);
    }
    const unreachable = options.allowPrivate ? null : hookUrlProblem(new URL(c.url as string));
    if (unreachable !== null) {
      throw validationFailed("Hook", [{
        field: "url",
        code: "invalid",
        message:
          `config.url must reach the public internet: ${unreachable} (use a public receiver)`,
      }]);
    }
    out.url = c.url as string;
  }
  if (c.secret !== undefined) {
    const why = c.secret === null
      ? null
      : typeof c.secret !== "string"
      ? "must be a string"
      : unstorableText(c.secret);
    if (why !== null) {
      throw validationFailed("Hook", [{
        field: "secret",
        code: "invalid",
        message: `config.secret ${why}`,
      }]);
    }
    out.secret = (c.secret as string | null) || null;
  }
  if (c.content_type !== undefined) {
    if (c.content_type !== "json" && c.content_type !== "form") {
      throw validationFailed("Hook", [{
        field: "content_type",
        code: "invalid",
        message: `config.content_type must be "json" or "form": ${JSON.stringify(c.content_type)}`,
      }]);
    }
    out.content_type = c.content_type;
  }
  if (c.insecure_ssl !== undefined && c.insecure_ssl !== "0" && c.insecure_ssl !== 0) {
    // Deno's fetch cannot skip certificate checks: "1" would be shown but not done.
    throw validationFailed("Hook", [{
      field: "insecure_ssl",
      code: "invalid",
      message: c.insecure_ssl === "1" || c.insecure_ssl === 1
        ? 'config.insecure_ssl "1" is not supported: deliveries always verify the receiver\'s certificate (give the server its CA with DENO_CERT)'
        : `config.insecure_ssl must be "0": ${JSON.stringify(c.insecure_ssl)}`,
    }]);
  }
  return out;
}

/** 422 when another of the repository's hooks has this URL: each event would go there twice. */
async function mustBeNewUrl(store: Store, repo: RepoRow, url: string, self?: number) {
  if ((await store.listHooks(repo.id)).some((h) => h.url === url && h.id !== self)) {
    throw validationFailed("Hook", [{
      field: "url",
      code: "custom",
      message: "Hook already exists on this repository",
    }]);
  }
}

/** Hooks as the API shows them, each with its `last_response` (one query for any number). */
async function hookViews(store: Store, repo: RepoRow, hooks: HookRow[], urls: Urls) {
  const last = await store.lastAttempts(hooks.map((h) => h.id));
  return hooks.map((h) => ({
    ...hookJson(repo, h, urls),
    last_response: lastResponse(last.has(h.id) ? last.get(h.id)!.status_code : undefined),
  }));
}

async function hookView(store: Store, repo: RepoRow, hook: HookRow, urls: Urls) {
  return (await hookViews(store, repo, [hook], urls))[0];
}

/** A list of event names: `events`, or on update `add_events` or `remove_events`. */
function parseEvents(
  body: Record<string, unknown>,
  field: "events" | "add_events" | "remove_events" = "events",
): string[] | undefined {
  const list = body[field];
  if (list === undefined) return undefined;
  if (
    !Array.isArray(list) || list.length > MAX_EVENTS ||
    !list.every((e) => typeof e === "string" && /^[a-z_*]{1,100}$/.test(e))
  ) {
    throw validationFailed("Hook", [{
      field,
      code: "invalid",
      message: `${field} must be an array of at most ${MAX_EVENTS} event names`,
    }]);
  }
  return list as string[];
}

/**
 * A hook's events after an update, as GitHub applies one: `events` (else
 * the current ones), then `add_events`, then `remove_events`.
 */
function updatedEvents(
  current: string[],
  change: { events?: string[]; add?: string[]; remove?: string[] },
): string[] | undefined {
  if (change.add === undefined && change.remove === undefined) return change.events;
  const next = [...(change.events ?? current)];
  for (const e of change.add ?? []) if (!next.includes(e)) next.push(e);
  const result = next.filter((e) => !change.remove?.includes(e));
  if (result.length > MAX_EVENTS) {
    throw validationFailed("Hook", [{
      field: "add_events",
      code: "invalid",
      message: `A hook can have at most ${MAX_EVENTS} events: this would give it ${result.length}`,
    }]);
  }
  return result;
}

function deliveryJson(d: DeliveryRow) {
  return {
    id: d.id,
    guid: d.guid,
    delivered_at: d.delivered_at ?? d.created_at,
    redelivery: d.redelivery,
    duration: d.duration_ms === null ? null : d.duration_ms / 1000,
    status: d.status === "delivered" ? "OK" : d.status === "failed" ? "failed" : "pending",
    status_code: d.status_code ?? 0,
    event: d.event,
    action: d.action,
    installation_id: null,
    repository_id: d.repo_id,
    attempts: d.attempts,
  };
}

/** Routes for webhooks. */
export function hookRoutes(): Hono<Env> {
  const app = new Hono<Env>();

  app.post("/repos/:owner/:repo/hooks", async (c) => {
    const repo = await adminRepo(c);
    const body = await jsonBody(c);
    const cfg = parseConfig(body, {
      required: true,
      allowPrivate: c.get("allowPrivateHookTargets"),
    });
    const events = parseEvents(body) ?? ["push"];
    const active = boolField(body, "active", "Hook") ?? true;
    const store = c.get("store");
    const urls = c.get("urls");
    const view = await store.transaction(async () => {
      // Every hook gets a copy of every event: without a limit, one change could queue any number.
      if ((await store.listHooks(repo.id)).length >= MAX_HOOKS) {
        throw validationFailed("Hook", [{
          field: "hooks",
          code: "custom",
          message: `A repository can have at most ${MAX_HOOKS} hooks; delete one first`,
        }]);
      }
      await mustBeNewUrl(store, repo, cfg.url!);
      const hook = await store.insertHook({
        repo_id: repo.id,
        url: cfg.url!,
        secret: cfg.secret ?? null,
        events,
        active,
        content_type: cfg.content_type ?? "form",
      });
      const view = await hookView(store, repo, hook, urls);
      // As GitHub, a new hook is pinged, whatever its events.
      if (hook.active) await emitPing(store, { repo, sender: requireUser(c), urls }, hook, view);
      return view;
    });
    c.get("notify")();
    return c.json(view, 201);
  });

  app.get("/repos/:owner/:repo/hooks", async (c) => {
    const repo = await adminRepo(c);
    const store = c.get("store");
    return c.json(await hookViews(store, repo, await store.listHooks(repo.id), c.get("urls")));
  });

  app.get("/repos/:owner/:repo/hooks/:id", async (c) => {
    const repo = await adminRepo(c);
    const store = c.get("store");
    const hook = await store.getHook(repo.id, intParam(c, "id"));
    if (!hook) throw new ApiError(404, "Not Found");
    return c.json(await hookView(store, repo, hook, c.get("urls")));
  });

  app.patch("/repos/:owner/:repo/hooks/:id", async (c) => {
    const repo = await adminRepo(c);
    const id = intParam(c, "id");
    const body = await jsonBody(c);
    const cfg = parseConfig(body, {
      required: false,
      allowPrivate: c.get("allowPrivateHookTargets"),
    });
    const change = {
      events: parseEvents(body),
      add: parseEvents(body, "add_events"),
      remove: parseEvents(body, "remove_events"),
    };
    const active = boolField(body, "active", "Hook");
    const store = c.get("store");
    const hook = await store.transaction(async () => {
      const current = await store.getHook(repo.id, id);
      if (!current) throw new ApiError(404, "Not Found");
      if (cfg.url !== undefined) await mustBeNewUrl(store, repo, cfg.url, id);
      const events = updatedEvents(current.events, change);
      return await store.updateHook(id, { ...cfg, events, active });
    });
    return c.json(await hookView(store, repo, hook, c.get("urls")));
  });

  app.delete("/repos/:owner/:repo/hooks/:id", async (c) => {
    const repo = await adminRepo(c);
    const id = intParam(c, "id");
    const store = c.get("store");
    await store.transaction(async () => {
      if (!await store.getHook(repo.id, id)) throw new ApiError(404, "Not Found");
      await store.deleteHook(id);
    });
    return c.body(null, 204);
  });

  app.get("/repos/:owner/:repo/hooks/:id/deliveries", async (c) => {
    const repo = await adminRepo(c);
    const id = intParam(c, "id");
    const store = c.get("store");
    if (!await store.getHook(repo.id, id)) throw new ApiError(404, "Not Found");
    const { perPage, page } = pageParams(c);
    const { items, total } = await store.listDeliveries(id, perPage, (page - 1) * perPage);
    setLinks(c, page, perPage, total);
    return c.json(items.map(deliveryJson));
  });

  app.post("/repos/:owner/:repo/hooks/:id/pings", async (c) => {
    const repo = await adminRepo(c);
    const id = intParam(c, "id");
    const store = c.get("store");
    const urls = c.get("urls");
    await store.transaction(async () => {
      const hook = await store.getHook(repo.id, id);
      if (!hook) throw new ApiError(404, "Not Found");
      // An inactive hook is sent nothing, a ping included.
      if (!hook.active) return;
      const view = await hookView(store, repo, hook, urls);
      await emitPing(store, { repo, sender: requireUser(c), urls }, hook, view);
    });
    c.get("notify")();
    return c.body(null, 204);
  });

  // GitHub sends the latest push here, if the hook takes push events; this server has no pushes.
  // `/test` is the older path, still the hook's `test_url`.
  app.on(
    "POST",
    ["/repos/:owner/:repo/hooks/:id/tests", "/repos/:owner/:repo/hooks/:id/test"],
    async (c) => {
      const repo = await adminRepo(c);
      if (!await c.get("store").getHook(repo.id, intParam(c, "id"))) {
        throw new ApiError(404, "Not Found");
      }
      return c.body(null, 204);
    },
  );

  app.post("/repos/:owner/:repo/hooks/:id/deliveries/:delivery/attempts", async (c) => {
    const repo = await adminRepo(c);
    const id = intParam(c, "id");
    const did = intParam(c, "delivery");
    const store = c.get("store");
    await store.transaction(async () => {
      // The hook must be this repository's: a delivery id alone names another's too.
      const d = await store.getHook(repo.id, id) && await store.getDelivery(id, did);
      if (!d) throw new ApiError(404, "Not Found");
      await store.insertDelivery({
        guid: d.guid,
        hook_id: id,
        repo_id: repo.id,
        event: d.event,
        action: d.action,
        payload: d.payload,
        redelivery: true,
      });
    });
    c.get("notify")();
    return c.json({}, 202);
  });

  return app;
}
