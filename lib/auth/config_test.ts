import assert from "node:assert/strict";
import { CliError } from "../cli/mod.ts";
import { formatError } from "../cli/errors.ts";
import { parseAuthConfig } from "./config.ts";

const GH = {
  hosts: ["api.github.com"],
  provider: "codehost",
  auth: "bearer",
  token_env: "GH_TOKEN",
};

function errorOf(doc: unknown): string {
  const text = typeof doc === "string" ? doc : JSON.stringify(doc);
  try {
    parseAuthConfig(text, "/home/me/.forgekit/auth.json");
  } catch (err) {
    assert.ok(err instanceof CliError);
    assert.equal(err.exitCode, 2);
    return formatError(err).replace(/^error: /, "");
  }
  throw new Error(`accepted: ${text}`);
}

const entry = (over: Record<string, unknown>) => ({ providers: [GH, { ...GH, ...over }] });

Deno.test("parseAuthConfig() names the place and the fix for every broken file", () => {
  const cases: [unknown, string][] = [
    ["{nope", "auth.json: not valid JSON: "],
    [[], 'auth.json: must be a JSON object with a "providers" array'],
    [{}, 'auth.json: has no "providers" array'],
    [{ providers: {} }, 'auth.json: has no "providers" array'],
    [{ providers: [], extra: 1 }, 'auth.json: unknown key "extra"'],
    [
      entry({ token_evn: "X" }),
      'auth.json providers[1]: unknown key "token_evn" (did you mean "token_env"?)',
    ],
    [
      entry({ provider: "gitlab" }),
      'auth.json providers[1].provider: unknown provider "gitlab" (use codehost, cloud-devops or repohost (aliases: github, azure-devops, bitbucket))',
    ],
    [entry({ auth: "oauth" }), 'auth.json providers[1].auth: unknown auth scheme "oauth"'],
    [
      entry({ auth: "basic-pat" }),
      'auth.json providers[1].auth: provider codehost does not support "basic-pat" (codehost supports: bearer)',
    ],
    [
      entry({ provider: "repohost", auth: "cloud-cli", token_env: undefined }),
      'auth.json providers[1].auth: provider repohost does not support "cloud-cli" (repohost supports: bearer, basic)',
    ],
    [
      entry({ token_env: undefined }),
      'auth.json providers[1]: bearer needs "token" or "token_env"',
    ],
    [
      entry({ provider: "cloud-devops", auth: "basic-pat", token_env: undefined }),
      'auth.json providers[1]: basic-pat needs "token" or "token_env"',
    ],
    [
      entry({ provider: "repohost", auth: "basic" }),
      'auth.json providers[1]: basic needs "username"',
    ],
    [
      entry({ provider: "repohost", auth: "basic", username: "a:b" }),
      'auth.json providers[1].username: "a:****" contains ":"',
    ],
    [
      entry({
        provider: "cloud-devops",
        auth: "cloud-ad",
        token_env: undefined,
        client_id: "c",
        client_secret_env: "S",
      }),
      'auth.json providers[1]: cloud-ad needs "tenant_id"',
    ],
    [
      entry({
        provider: "cloud-devops",
        auth: "cloud-ad",
        token_env: undefined,
        tenant_id: "t",
        client_secret_env: "S",
      }),
      'auth.json providers[1]: cloud-ad needs "client_id"',
    ],
    [
      entry({
        provider: "cloud-devops",
        auth: "cloud-ad",
        token_env: undefined,
        tenant_id: "t",
        client_id: "c",
      }),
      'auth.json providers[1]: cloud-ad needs "client_secret_env"',
    ],
    [
      entry({ hosts: ["*example.com"] }),
      'auth.json providers[1].hosts[0]: "*example.com" is not a supported pattern (use an exact host or "*.example.com")',
    ],
    [entry({ hosts: ["*"] }), 'auth.json providers[1].hosts[0]: "*" is not a supported pattern'],
    [
      entry({ hosts: ["gith?b.com"] }),
      'auth.json providers[1].hosts[0]: "gith?b.com" is not a supported pattern',
    ],
    [
      entry({ hosts: ["https://github.com"] }),
      'auth.json providers[1].hosts[0]: "https://github.com" is not a supported pattern: it has a scheme',
    ],
    [
      entry({ hosts: ["github.com/org"] }),
      'auth.json providers[1].hosts[0]: "github.com/org" is not a supported pattern: it has a path',
    ],
    [
      entry({ hosts: ["github.com:443"] }),
      'auth.json providers[1].hosts[0]: "github.com:443" is not a supported pattern: it has a port',
    ],
    [
      entry({ hosts: [" github.com"] }),
      'auth.json providers[1].hosts[0]: " github.com" is not a supported pattern: it contains whitespace',
    ],
    [
      entry({ hosts: ["*.com"] }),
      'auth.json providers[1].hosts[0]: "*.com" is not a supported pattern: it matches a whole top-level domain',
    ],
    [
      entry({ hosts: ["[::1]:443"] }),
      'auth.json providers[1].hosts[0]: "[::1]:443" is not a supported pattern: it has a port',
    ],
    [
      entry({ hosts: ["2001:db8::zz"] }),
      'auth.json providers[1].hosts[0]: "2001:db8::zz" is not a supported pattern: it is not a valid IPv6 address',
    ],
    [
      entry({
        provider: "cloud-devops",
        auth: "cloud-ad",
        token_env: undefined,
        tenant_id: "t",
        client_id: "c",
        client_secret_env: "S",
        authority_host: "::1",
      }),
      'auth.json providers[1].authority_host: "::1" is not a host name',
    ],
    [entry({ hosts: [] }), "auth.json providers[1].hosts: must be a non-empty array of host names"],
    [entry({ tenant_id: 42 }), "auth.json providers[1].tenant_id: must be a string (got: 42)"],
    [
      entry({ token_env: "not a var" }),
      'auth.json providers[1].token_env: "not ****" is not an environment variable name',
    ],
    [{ providers: ["x"] }, "auth.json providers[0]: must be an object"],
    [{ providers: [null] }, "auth.json providers[0]: must be an object"],
    [
      entry({ hosts: undefined }),
      "auth.json providers[1].hosts: must be a non-empty array of host names",
    ],
    [entry({ hosts: "api.github.com" }), "auth.json providers[1].hosts: must be a non-empty array"],
    [entry({ hosts: [7] }), "auth.json providers[1].hosts[0]: must be a string (got: 7)"],
    [entry({ provider: undefined }), 'auth.json providers[1]: has no "provider"'],
    [
      entry({ auth: undefined }),
      'auth.json providers[1]: has no "auth" (set "auth" to one of: bearer)',
    ],
    [
      entry({
        provider: "repohost",
        auth: "basic",
        username: "me@example.com",
        token_env: undefined,
      }),
      'auth.json providers[1]: basic needs "token" or "token_env"',
    ],
    [
      entry({ provider: "repohost", auth: "basic", username: "" }),
      'auth.json providers[1]: basic needs "username"',
    ],
    [entry({ username: "me" }), 'auth.json providers[1].username: is only used with auth "basic"'],
    [
      entry({ provider: "cloud-devops", auth: "cloud-cli" }),
      'auth.json providers[1]: cloud-cli takes no "token" or "token_env"',
    ],
  ];
  for (const [doc, want] of cases) {
    const got = errorOf(doc);
    assert.ok(got.startsWith(want), `\n got: ${got}\nwant: ${want}`);
  }
});

Deno.test("parseAuthConfig() accepts the specification's example, aliases and comments", () => {
  const cfg = parseAuthConfig(
    JSON.stringify({
      "//": "comment",
      providers: [
        {
          hosts: ["GitHub.com.", "api.github.com"],
          provider: "github",
          auth: "bearer",
          token_env: "GH_TOKEN",
        },
        {
          hosts: ["dev.azure.com", "*.visualstudio.com"],
          provider: "azure-devops",
          auth: "basic-pat",
          token_env: "ADO_PAT",
        },
        {
          hosts: ["dev.azure.com"],
          provider: "cloud-devops",
          auth: "azure-ad",
          tenant_id: "t",
          client_id: "c",
          client_secret_env: "ADO_CLIENT_SECRET",
          authority_host: "login.microsoftonline.us",
        },
        { hosts: ["dev.azure.com"], provider: "cloud-devops", auth: "azure-cli" },
        {
          hosts: ["api.bitbucket.org"],
          provider: "bitbucket",
          auth: "basic",
          username: "me@example.com",
          token_env: "BB_API_TOKEN",
        },
      ],
    }),
    "auth.json",
  );
  assert.deepEqual(cfg.entries.map((e) => [e.provider, e.auth]), [
    ["codehost", "bearer"],
    ["cloud-devops", "basic-pat"],
    ["cloud-devops", "cloud-ad"],
    ["cloud-devops", "cloud-cli"],
    ["repohost", "basic"],
  ]);
  assert.deepEqual(cfg.entries[0].hosts, ["github.com", "api.github.com"]);
});

Deno.test("parseAuthConfig() keeps IPv6 hosts in one canonical form, never a name with a port", () => {
  const cfg = parseAuthConfig(
    JSON.stringify({
      providers: [{
        hosts: ["::1", "[::1]", "2001:DB8:0:0:0:0:0:1", "fe80::"],
        provider: "codehost",
        auth: "bearer",
        token_env: "GH_TOKEN",
      }],
    }),
    "auth.json",
  );
  assert.deepEqual(cfg.entries[0].hosts, ["::1", "::1", "2001:db8::1", "fe80::"]);
});

Deno.test("parseAuthConfig() never prints a secret the file holds", () => {
  const S = "SECRETSECRET";
  const json = (body: string) =>
    `{"providers": [{"hosts": ["api.github.com"], "provider": "codehost", "auth": "bearer", ${body}}]}`;
  const cases: [unknown, string][] = [
    [json(`"token": ghp_${S}`), "auth.json: not valid JSON: Unexpected token 'g'"],
    [json(`"token": 'ghp_${S}'`), "auth.json: not valid JSON: Unexpected token '''"],
    [`{"token": x${S}}`, "auth.json: not valid JSON: Unexpected token 'x'"],
    [`${S}`, "auth.json: not valid JSON: Unexpected token 'S'"],
    [`xxxxxx${S}${"y".repeat(40)}`, "auth.json: not valid JSON: Unexpected token 'x' (fix"],
    [
      entry({ token: [`ghp_${S}`] }),
      "auth.json providers[1].token: must be a string (got: an array)",
    ],
    [
      entry({ token: 1234567890 }),
      "auth.json providers[1].token: must be a string (got: a number)",
    ],
    [
      entry({ token_env: [`ghp_${S}`] }),
      "auth.json providers[1].token_env: must be a string (got: an array)",
    ],
    [
      entry({
        provider: "cloud-devops",
        auth: "cloud-ad",
        token_env: undefined,
        tenant_id: "t",
        client_id: "c",
        client_secret_env: { value: `abc8Q~${S}` },
      }),
      "auth.json providers[1].client_secret_env: must be a string (got: an object)",
    ],
    [
      entry({ token_env: `eyJhbGciOi.${S}.sig` }),
      'auth.json providers[1].token_env: "eyJh****" is not an environment variable name',
    ],
    [
      entry({
        provider: "cloud-devops",
        auth: "cloud-ad",
        token_env: undefined,
        tenant_id: "t",
        client_id: "c",
        client_secret_env: `abc8Q~${S}`,
      }),
      'auth.json providers[1].client_secret_env: "abc8****" is not an environment variable name',
    ],
    [
      entry({ provider: "repohost", auth: "basic", username: `me@example.com:ATATT${S}` }),
      'auth.json providers[1].username: "me@example.com:****" contains ":"',
    ],
    [
      entry({ provider: "repohost", auth: "basic", username: `me@example.com\nATATT${S}:x` }),
      "auth.json providers[1].username: contains a control character",
    ],
    [
      entry({ provider: "repohost", auth: "basic", username: `me@example.com\tATATT${S}` }),
      "auth.json providers[1].username: contains a control character",
    ],
  ];
  for (const [doc, want] of cases) {
    const got = errorOf(doc);
    assert.ok(got.startsWith(want), `\n got: ${got}\nwant: ${want}`);
    assert.ok(!got.includes(S.slice(0, 6)), `secret shown: ${got}`);
  }
});

Deno.test("parseAuthConfig() rejects provider and scheme names inherited from Object", () => {
  const cases: [unknown, string][] = [
    [
      entry({ provider: "toString" }),
      'auth.json providers[1].provider: unknown provider "toString"',
    ],
    [
      entry({ provider: "constructor" }),
      'auth.json providers[1].provider: unknown provider "constructor"',
    ],
    [
      entry({ auth: "constructor" }),
      'auth.json providers[1].auth: unknown auth scheme "constructor"',
    ],
    [entry({ auth: "__proto__" }), 'auth.json providers[1].auth: unknown auth scheme "__proto__"'],
  ];
  for (const [doc, want] of cases) {
    const got = errorOf(doc);
    assert.ok(got.startsWith(want), `\n got: ${got}\nwant: ${want}`);
  }
});

Deno.test("parseAuthConfig() accepts a file that starts with a byte order mark", () => {
  const cfg = parseAuthConfig(`\uFEFF${JSON.stringify({ providers: [GH] })}`, "auth.json");
  assert.deepEqual(cfg.entries.map((e) => e.hosts), [["api.github.com"]]);
});
