/** The starting auth.json that `forgekit auth init` writes. */
export const INIT_TEMPLATE = `{
  "//": [
    "forgekit credential file. Keys starting with // are comments.",
    "Each entry: hosts (exact names or *.domain), provider (codehost, cloud-devops, repohost),",
    "auth (bearer, basic-pat, basic, cloud-cli, cloud-ad), and token_env (preferred) or token.",
    "codehost on github.com: list the web, API, raw-content and archive hosts, as below.",
    "GitHub Enterprise Server: list the web host (and raw/archive subdomains with subdomain isolation).",
    "Data residency (TENANT.ghe.com): list both TENANT.ghe.com and api.TENANT.ghe.com.",
    "Examples for other providers:",
    "{\\"hosts\\": [\\"dev.azure.com\\", \\"*.visualstudio.com\\"], \\"provider\\": \\"cloud-devops\\", \\"auth\\": \\"basic-pat\\", \\"token_env\\": \\"ADO_PAT\\"}",
    "{\\"hosts\\": [\\"dev.azure.com\\"], \\"provider\\": \\"cloud-devops\\", \\"auth\\": \\"cloud-cli\\"}",
    "{\\"hosts\\": [\\"dev.azure.com\\"], \\"provider\\": \\"cloud-devops\\", \\"auth\\": \\"cloud-ad\\", \\"tenant_id\\": \\"<TENANT>\\", \\"client_id\\": \\"<CLIENT>\\", \\"client_secret_env\\": \\"ADO_CLIENT_SECRET\\"}",
    "{\\"hosts\\": [\\"api.bitbucket.org\\"], \\"provider\\": \\"repohost\\", \\"auth\\": \\"basic\\", \\"username\\": \\"me@example.com\\", \\"token_env\\": \\"BB_API_TOKEN\\"}",
    "{\\"hosts\\": [\\"api.bitbucket.org\\"], \\"provider\\": \\"repohost\\", \\"auth\\": \\"bearer\\", \\"token_env\\": \\"BB_ACCESS_TOKEN\\"}"
  ],
  "providers": [
    {
      "hosts": ["github.com", "api.github.com", "raw.githubusercontent.com", "codeload.github.com"],
      "provider": "codehost",
      "auth": "bearer",
      "token_env": "GH_TOKEN"
    }
  ]
}
`;
