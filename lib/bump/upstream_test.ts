import assert from "node:assert/strict";
import { CliError } from "../cli/mod.ts";
import { bypassed, proxyAuthorization, proxyEnv } from "./upstream.ts";

Deno.test("proxyAuthorization() is Basic of the URL's decoded user and password, or null", () => {
  const basic = (pair: string) => `Basic ${btoa(pair)}`;
  const cases: [string, string | null][] = [
    ["http://proxy:3128", null],
    ["http://alice:secret@proxy:3128", basic("alice:secret")],
    ["http://al%40ice:s%3Acr%2Fet@proxy:3128", basic("al@ice:s:cr/et")],
    ["http://alice@proxy:3128", basic("alice:")],
    ["http://:secret@proxy:3128", basic(":secret")],
    ["http://al%ice:x@proxy", basic("al%ice:x")], // a stray % is kept, as curl does
    ["http://j%C3%BCrgen:x@proxy", `Basic ${new TextEncoder().encode("jürgen:x").toBase64()}`],
  ];
  for (const [url, want] of cases) assert.equal(proxyAuthorization(new URL(url)), want, url);
});

Deno.test("proxyEnv() reads either case, adds http:// and refuses what is not an HTTP proxy", () => {
  const env = (vars: Record<string, string>) => (n: string) => vars[n];
  const got = proxyEnv(env({
    https_proxy: "proxy.corp:3128",
    HTTP_PROXY: "http://u:p@proxy.corp:8080",
    NO_PROXY: " .internal, Example.COM ,",
  }));
  assert.equal(got.https?.href, "http://proxy.corp:3128/");
  assert.equal(got.http?.host, "proxy.corp:8080");
  assert.deepEqual(got.noProxy, [".internal", "example.com"]);
  assert.deepEqual(proxyEnv(env({})), { https: undefined, http: undefined, noProxy: [] });

  const refused: [Record<string, string>, RegExp][] = [
    [
      { HTTPS_PROXY: "socks5://u:SECRETSECRET@socks.corp:1080" },
      /^HTTPS_PROXY names a socks5 proxy \(socks5:\/\/socks\.corp:1080\); forgekit chains through HTTP proxies only$/,
    ],
    // Plain HTTP to a proxy the URL says to reach over TLS would send its password in clear.
    [
      { HTTPS_PROXY: "https://u:SECRETSECRET@proxy.corp:3128" },
      /^HTTPS_PROXY names an HTTPS proxy \(https:\/\/proxy\.corp:3128\); forgekit speaks plain HTTP to its upstream proxy and does not connect to one over TLS$/,
    ],
    [{ http_proxy: "http://u:SECRETSECRET@[bad" }, /^http_proxy is not a proxy URL$/],
  ];
  for (const [vars, want] of refused) {
    assert.throws(() => proxyEnv(env(vars)), (e: unknown) => {
      assert.ok(e instanceof CliError);
      assert.equal(e.exitCode, 2);
      assert.match(e.message, want);
      assert.doesNotMatch(`${e.message} ${e.hint}`, /SECRETSECRET/);
      return true;
    });
  }
});

Deno.test("bypassed() applies NO_PROXY to a host and its subdomains", () => {
  const cases: [string[], string, boolean][] = [
    [["example.com"], "example.com", true],
    [["example.com"], "api.example.com", true],
    [["example.com"], "badexample.com", false],
    [[".example.com"], "example.com", true],
    [[".example.com"], "a.example.com", true],
    [["*"], "anything.test", true],
    [[], "example.com", false],
    [["example.com"], "EXAMPLE.com", true],
  ];
  for (const [list, host, want] of cases) {
    assert.equal(bypassed(list, host), want, `${list} ${host}`);
  }
});
