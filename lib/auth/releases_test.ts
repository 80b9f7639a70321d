import assert from "node:assert/strict";
import type { AuthEntry } from "./config.ts";
import {
  assetUrlProblem,
  fetchReleaseAsset,
  parseReleaseDownload,
  releaseApiFor,
  releaseApiOnPort,
} from "./releases.ts";

const entry = (hosts: string[]): AuthEntry => ({
  index: 0,
  hosts,
  provider: "codehost",
  auth: "bearer",
  token: "t",
});

Deno.test("parseReleaseDownload() recognises tag and latest downloads only", () => {
  const cases: [string, unknown][] = [
    ["https://h/o/r/releases/download/v1/a.tgz", {
      owner: "o",
      repo: "r",
      tag: "v1",
      name: "a.tgz",
    }],
    ["https://h/o/r/releases/latest/download/a.tgz", {
      owner: "o",
      repo: "r",
      tag: null,
      name: "a.tgz",
    }],
    ["https://h/o/r/releases/tag/v1", null],
    ["https://h/o/r/releases/download/v1/", null],
    ["https://h/o/r/archive/v1.tar.gz", null],
  ];
  for (const [url, want] of cases) assert.deepEqual(parseReleaseDownload(new URL(url)), want, url);
});

Deno.test("releaseApiFor() tells github.com, data residency and enterprise apart", () => {
  const cases: [string, string[], unknown][] = [
    ["github.com", ["github.com"], { kind: "github", base: "https://api.github.com" }],
    ["github.com", ["api.github.com"], null],
    ["tenant.ghe.com", ["tenant.ghe.com"], {
      kind: "data-residency",
      base: "https://api.tenant.ghe.com",
    }],
    ["tenant.ghe.com", ["*.tenant.ghe.com"], null],
    ["ghe.corp.example", ["ghe.corp.example"], {
      kind: "enterprise",
      base: "https://ghe.corp.example/api/v3",
    }],
    ["raw.githubusercontent.com", ["raw.githubusercontent.com"], null],
  ];
  for (const [host, hosts, want] of cases) {
    assert.deepEqual(releaseApiFor(host, [entry(hosts)]), want, host);
  }
});

Deno.test("assetUrlProblem() accepts only the exact numeric asset endpoint of the same repository", () => {
  const api = { kind: "data-residency" as const, base: "https://api.t.ghe.com" };
  const ref = { owner: "o", repo: "r", tag: "v1", name: "a" };
  const cases: [string, RegExp | null][] = [
    ["https://api.t.ghe.com/repos/o/r/releases/assets/12", null],
    ["https://api.t.ghe.com/repos/o/x/releases/assets/12", /belongs to o\/x, not o\/r/],
    ["https://other.example/repos/o/r/releases/assets/12", /is not on api\.t\.ghe\.com/],
    ["http://api.t.ghe.com/repos/o/r/releases/assets/12", /is not on/],
    ["https://api.t.ghe.com/repos/o/r/releases/assets/12a", /numeric asset id/],
    ["https://api.t.ghe.com/repos/o/r/releases/assets/12?x=1", /endpoint/],
    ["https://api.t.ghe.com/repos/o/r/releases/12", /endpoint/],
  ];
  for (const [url, want] of cases) {
    const got = assetUrlProblem(api, ref, url);
    if (want === null) assert.equal(got, null, url);
    else assert.match(got ?? "", want, url);
  }
  const ghe = { kind: "enterprise" as const, base: "https://ghe.x/api/v3" };
  assert.equal(assetUrlProblem(ghe, ref, "https://ghe.x/api/v3/repos/o/r/releases/assets/1"), null);
  assert.match(assetUrlProblem(ghe, ref, "https://ghe.x/repos/o/r/releases/assets/1")!, /endpoint/);
});

Deno.test("assetUrlProblem() refuses an asset URL carrying a user name or password, and never shows them", () => {
  const api = { kind: "data-residency" as const, base: "https://api.t.ghe.com" };
  const ref = { owner: "o", repo: "r", tag: "v1", name: "a" };
  for (
    const url of [
      "https://u:LEAKME@api.t.ghe.com/repos/o/r/releases/assets/12",
      "https://LEAKME@api.t.ghe.com/repos/o/r/releases/assets/12",
      "https://u:LEAKME@evil.example/repos/o/r/releases/assets/12",
      "https://u:LEAKME@api.t.ghe.com/repos/o/x/releases/assets/12",
      "https://u:LEAKME@[zz/repos/o/r/releases/assets/12",
    ]
  ) {
    const got = assetUrlProblem(api, ref, url);
    assert.ok(got !== null, url);
    assert.doesNotMatch(got, /LEAKME/, url);
    assert.match(got, /asset URL "?https:\/\/\*\*\*\*@/, url);
  }
});

Deno.test("releaseApiOnPort() keeps an enterprise server's port; github.com's API has none", () => {
  const ghe = { kind: "enterprise" as const, base: "https://ghe.corp.example/api/v3" };
  assert.deepEqual(releaseApiOnPort(ghe, "8443"), {
    kind: "enterprise",
    base: "https://ghe.corp.example:8443/api/v3",
  });
  assert.deepEqual(releaseApiOnPort(ghe, ""), ghe);
  const gh = { kind: "github" as const, base: "https://api.github.com" };
  assert.deepEqual(releaseApiOnPort(gh, "8443"), gh);
});

Deno.test("fetchReleaseAsset() resolves on the download's port and sends the caller's fields with the asset request", async () => {
  const seen: { url: string; method: string; headers: [string, string][] }[] = [];
  const doFetch = (url: string, init: RequestInit) => {
    seen.push({
      url,
      method: init.method ?? "GET",
      headers: [...new Headers(init.headers)],
    });
    return Promise.resolve(
      url.includes("/releases/tags/")
        ? Response.json({
          assets: [{
            name: "tool.bin",
            url: "https://ghe.corp.example:8443/api/v3/repos/org/tool/releases/assets/42",
          }],
        })
        : new Response("partial", { status: 206 }),
    );
  };
  const url = new URL("https://ghe.corp.example:8443/org/tool/releases/download/v1/tool.bin");
  const api = releaseApiOnPort(
    { kind: "enterprise", base: "https://ghe.corp.example/api/v3" },
    url.port,
  );
  const res = await fetchReleaseAsset(url, { api, ref: parseReleaseDownload(url)! }, {
    doFetch,
    headers: [["range", "bytes=0-6"], ["accept", "text/html"], ["x-trace", "t1"]],
  });
  assert.equal(res.status, 206);
  assert.deepEqual(seen.map((s) => s.url), [
    "https://ghe.corp.example:8443/api/v3/repos/org/tool/releases/tags/v1",
    "https://ghe.corp.example:8443/api/v3/repos/org/tool/releases/assets/42",
  ]);
  // The metadata lookup carries only its own fields; the asset request the caller's, with
  // forgekit's Accept (which the asset endpoint needs) in place of theirs.
  assert.equal(seen[0].headers.find(([k]) => k === "range"), undefined);
  assert.deepEqual(seen[1].headers, [
    ["accept", "application/octet-stream"],
    ["range", "bytes=0-6"],
    ["x-trace", "t1"],
  ]);
});
