import assert from "node:assert/strict";
import {
  addressProblem,
  HookTargetError,
  hookUrlProblem,
  type Lookup,
  resolvePublicTarget,
} from "./hook_target.ts";

Deno.test("addressProblem() names every non-public range and passes public addresses", () => {
  const cases: [string, string | null][] = [
    ["127.0.0.1", "loopback"],
    ["127.255.255.254", "loopback"],
    ["0.0.0.0", "unspecified"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["192.168.1.1", "private"],
    ["100.64.0.1", "shared (carrier-grade NAT)"],
    ["169.254.169.254", "link-local"],
    ["192.0.2.1", "documentation"],
    ["198.18.0.1", "benchmarking"],
    ["224.0.0.1", "multicast"],
    ["255.255.255.255", "reserved"],
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["[::1]", "loopback"],
    ["::ffff:127.0.0.1", "loopback"],
    ["::ffff:7f00:1", "loopback"],
    ["::ffff:a9fe:a9fe", "link-local"],
    ["64:ff9b::a00:1", "private"],
    ["2002:7f00:1::", "loopback"],
    ["fd00::1", "unique local (private)"],
    ["fe80::1%eth0", "link-local"],
    ["ff02::1", "multicast"],
    ["2001:db8::1", "documentation"],
    ["::7f00:1", "reserved"],
    ["not-an-ip", "not an IP address"],
    ["8.8.8.8", null],
    ["172.32.0.1", null],
    ["100.128.0.1", null],
    ["93.184.216.34", null],
    ["2606:4700:4700::1111", null],
    ["::ffff:8.8.8.8", null],
    ["2002:808:808::", null],
  ];
  for (const [ip, want] of cases) assert.equal(addressProblem(ip), want, ip);
});

Deno.test("hookUrlProblem() refuses loopback names and non-public IP literals in any spelling", () => {
  const cases: [string, RegExp | null][] = [
    ["http://127.0.0.1:8080/hook", /^127\.0\.0\.1 is a loopback address$/],
    ["http://2130706433/", /^127\.0\.0\.1 is a loopback/],
    ["http://0x7f.1/", /^127\.0\.0\.1 is a loopback/],
    ["http://[::1]/", /^::1 is a loopback/],
    ["http://[::ffff:169.254.169.254]/", /link-local/],
    ["http://169.254.169.254/latest/meta-data/", /link-local/],
    ["http://localhost/", /^localhost is a loopback/],
    ["http://LOCALHOST./", /^localhost is a loopback/],
    ["http://localhost../", /^localhost is a loopback/],
    ["http://api.localhost:9/", /loopback/],
    ["https://ci.example/hook", null],
    ["http://8.8.8.8/", null],
  ];
  for (const [url, want] of cases) {
    const got = hookUrlProblem(new URL(url));
    if (want === null) assert.equal(got, null, url);
    else assert.match(got ?? "", want, url);
  }
});

Deno.test("resolvePublicTarget() connects to a checked address, and refuses a name with any non-public one", async () => {
  const dns: Record<string, string[]> = {
    "public.test": ["93.184.216.34"],
    "rebind.test": ["127.0.0.1"],
    "mixed.test": ["93.184.216.34", "10.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "v6.test": ["::1"],
    "none.test": [],
  };
  const lookup: Lookup = (name) =>
    Promise.resolve((dns[name] ?? []).map((address) => ({ address })));
  assert.deepEqual(
    await resolvePublicTarget(new URL("https://public.test/hook"), { lookup }),
    { hostname: "93.184.216.34", port: 443 },
  );
  assert.deepEqual(
    await resolvePublicTarget(new URL("http://public.test:8080/"), { lookup }),
    { hostname: "93.184.216.34", port: 8080 },
  );
  assert.deepEqual(
    await resolvePublicTarget(new URL("http://8.8.8.8/"), { lookup }),
    { hostname: "8.8.8.8", port: 80 },
  );
  for (
    const [host, why] of [
      ["rebind.test", /resolves to 127\.0\.0\.1, a loopback address/],
      ["mixed.test", /resolves to 10\.0\.0\.1, a private address/],
      ["metadata.test", /link-local/],
      ["v6.test", /::1, a loopback/],
      ["none.test", /has no address/],
      ["127.0.0.1", /loopback/],
    ] as const
  ) {
    await assert.rejects(
      resolvePublicTarget(new URL(`http://${host}/`), { lookup }),
      (err) => err instanceof HookTargetError && why.test(err.message),
      host,
    );
  }
});
