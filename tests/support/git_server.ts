/**
 * A small git smart-HTTP server for tests: `git http-backend` run as CGI from
 * a request handler, over a bare repository made in the test.
 */
import { join } from "node:path";

/** Makes a bare repository with one commit; returns the project root and its HEAD sha. */
export async function makeBareRepo(name = "repo.git"): Promise<{ root: string; sha: string }> {
  const root = await Deno.makeTempDir({ prefix: "forgekit-git-" });
  const work = join(root, "work");
  const git = async (args: string[], cwd = root) => {
    const out = await new Deno.Command("git", {
      args,
      cwd,
      env: {
        GIT_AUTHOR_NAME: "t",
        GIT_AUTHOR_EMAIL: "t@e",
        GIT_COMMITTER_NAME: "t",
        GIT_COMMITTER_EMAIL: "t@e",
        HOME: root,
      },
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!out.success) {
      throw new Error(`git ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
    }
    return new TextDecoder().decode(out.stdout).trim();
  };
  await git(["init", "-q", "-b", "main", work]);
  await Deno.writeTextFile(join(work, "README"), "hello\n");
  await git(["add", "README"], work);
  await git(["commit", "-q", "-m", "first"], work);
  await git(["clone", "-q", "--bare", work, join(root, name)]);
  return { root, sha: await git(["rev-parse", "HEAD"], work) };
}

/** Serves a request for `/<repo>.git/…` through `git http-backend`. */
export async function gitCgi(req: Request, projectRoot: string): Promise<Response> {
  const url = new URL(req.url);
  const child = new Deno.Command("git", {
    args: ["http-backend"],
    env: {
      GIT_PROJECT_ROOT: projectRoot,
      GIT_HTTP_EXPORT_ALL: "1",
      PATH_INFO: decodeURIComponent(url.pathname),
      QUERY_STRING: url.search.slice(1),
      REQUEST_METHOD: req.method,
      CONTENT_TYPE: req.headers.get("content-type") ?? "",
      REMOTE_ADDR: "127.0.0.1",
    },
    stdin: "piped",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const w = child.stdin.getWriter();
  if (req.body) { for await (const c of req.body) await w.write(c); }
  await w.close();
  const out = await child.output();
  const buf = out.stdout;
  let i = 0;
  while (
    i + 3 < buf.length &&
    !(buf[i] === 13 && buf[i + 1] === 10 && buf[i + 2] === 13 && buf[i + 3] === 10)
  ) i++;
  const head = new TextDecoder().decode(buf.subarray(0, i));
  const headers = new Headers();
  let status = 200;
  for (const line of head.split("\r\n")) {
    const k = line.indexOf(":");
    if (k < 0) continue;
    const name = line.slice(0, k).trim();
    const value = line.slice(k + 1).trim();
    if (name.toLowerCase() === "status") status = Number(value.split(" ")[0]);
    else headers.append(name, value);
  }
  return new Response(buf.slice(i + 4), { status, headers });
}
