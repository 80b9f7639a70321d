/**
 * A git smart-HTTP server over HTTPS that requires HTTP Basic auth, reached
 * under real host names through {@linkcode startTestProxy}, and the
 * environment that points real `git` at it (proxy, test CA, no prompts).
 */
import { join } from "node:path";
import { gitCgi, makeBareRepo } from "./git_server.ts";
import { startTestProxy, type TestProxy } from "./proxy.ts";
import { makeTestCa, type TestCa } from "./tls.ts";

/** One request the git server received. */
export interface GitHit {
  /** `host[:port]` as the request named it. */
  host: string;
  path: string;
  /** The decoded `user:password` of a Basic Authorization, the raw header otherwise, or null. */
  credential: string | null;
}

/** A running git server behind its proxy. */
export interface GitAuthServer {
  ca: TestCa;
  proxy: TestProxy;
  hits: GitHit[];
  /** Clone URLs end in `/repo.git`. */
  repoPath: string;
  /** Environment for a `git` child: HOME, the proxy, the CA, no prompts, no system config. */
  gitEnv(home: string): Record<string, string>;
  close(): Promise<void>;
}

/**
 * Starts the server. `accept` maps each served `host:port` (the proxy routes
 * it here) to the one `user:password` it accepts; anything else gets 401
 * with `WWW-Authenticate: Basic`.
 *
 * @example
 * ```ts
 * const git = await startGitAuthServer({ "github.com:443": "x-access-token:tok" });
 * ```
 */
export async function startGitAuthServer(accept: Record<string, string>): Promise<GitAuthServer> {
  const repo = await makeBareRepo();
  const ca = await makeTestCa();
  const names = [...new Set(Object.keys(accept).map((t) => t.replace(/:\d+$/, "")))];
  const leaf = await ca.issue(names);
  const hits: GitHit[] = [];
  const wanted = new Map(Object.entries(accept).map(([t, c]) => [t.replace(/:443$/, ""), c]));
  const ac = new AbortController();
  const server = Deno.serve(
    {
      hostname: "127.0.0.1",
      port: 0,
      cert: leaf.cert,
      key: leaf.key,
      signal: ac.signal,
      onListen() {},
    },
    (req) => {
      const url = new URL(req.url);
      const header = req.headers.get("authorization");
      const credential = header?.startsWith("Basic ") ? atob(header.slice(6)) : header;
      hits.push({ host: url.host, path: url.pathname, credential });
      if (credential !== wanted.get(url.host)) {
        return new Response("authentication required\n", {
          status: 401,
          headers: { "www-authenticate": 'Basic realm="git"' },
        });
      }
      return gitCgi(req, repo.root);
    },
  );
  const proxy = startTestProxy();
  for (const target of Object.keys(accept)) proxy.route(target, server.addr.port);
  return {
    ca,
    proxy,
    hits,
    repoPath: "/repo.git",
    gitEnv: (home) => ({
      HOME: home,
      PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
      GIT_CONFIG_NOSYSTEM: "1",
      GIT_CONFIG_GLOBAL: join(home, ".gitconfig"),
      GIT_TERMINAL_PROMPT: "0",
      GIT_ASKPASS: "",
      SSH_ASKPASS: "",
      https_proxy: proxy.url,
      GIT_SSL_CAINFO: ca.certPath,
    }),
    async close() {
      ac.abort();
      await server.finished;
      await proxy.close();
      await Deno.remove(repo.root, { recursive: true }).catch(() => {});
    },
  };
}
