import assert from "node:assert/strict";
import { createSessionCa } from "./ca.ts";

Deno.test("issueLeaf signs only a host name or an IP address, never a wildcard", async () => {
  const ca = await createSessionCa({ sessionId: "s", allowDomains: ["github.com"] });
  for (const host of ["*.github.com", "*", "", "a b.github.com", "x/y.github.com", "evil:com"]) {
    await assert.rejects(ca.issueLeaf(host), RangeError, JSON.stringify(host));
  }
});

Deno.test("createSessionCa refuses an IP-looking allow entry that is no IP address", async () => {
  await assert.rejects(
    createSessionCa({ sessionId: "s", allowDomains: ["github.com", "evil:com"] }),
    /not an IP address: evil:com/,
  );
});
