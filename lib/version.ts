/** forgekit's version, embedded from deno.json at build time. */
import denoJson from "../deno.json" with { type: "json" };

/** The version string, e.g. `0.1.0`. */
export const VERSION: string = denoJson.version;
