/**
 * lib/bump: the egress firewall (`forgekit firewall`): a sandboxed workload
 * whose only way out is forgekit's filtering proxy, with optional HTTPS
 * inspection (`--ssl-bump`) and URL-path filtering (`--allow-urls`).
 *
 * @module
 */
import type { Command } from "../cli/mod.ts";
import { runFirewall } from "./cmd_firewall.ts";

export { decide, type DomainPolicy } from "./domain_policy.ts";
export { validateDomains } from "./host_validation.ts";

/** The commands lib/bump adds to forgekit. */
export const commands: Command[] = [
  {
    name: "firewall",
    summary: "Run a command whose only network access is a filtering proxy",
    run: runFirewall,
  },
];
