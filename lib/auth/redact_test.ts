import assert from "node:assert/strict";
import { redactUrl, redactUrlText } from "./redact.ts";

Deno.test("redactUrl() shows no user name or password and leaves the rest alone", () => {
  const cases: [string, string][] = [
    ["https://api.github.com/user?page=2", "https://api.github.com/user?page=2"],
    ["https://x-access-token:ghp_secret@github.com/o/r", "https://****@github.com/o/r"],
    ["https://ghp_secret@github.com/o/r", "https://****@github.com/o/r"],
    ["https://:ghp_secret@github.com/", "https://****@github.com/"],
    ["http://u:p@127.0.0.1:8080/a#f", "http://****@127.0.0.1:8080/a#f"],
    [
      "https://api.github.com/user?access_token=ghp_x&page=2",
      "https://api.github.com/user?access_token=****&page=2",
    ],
  ];
  for (const [url, want] of cases) assert.equal(redactUrl(new URL(url)), want, url);
});

Deno.test("redactUrlText() masks what precedes the last @, whether or not the text parses", () => {
  const cases: [string, string][] = [
    ["https://u:ghp_secret@exa mple.com/", "https://****@exa mple.com/"],
    ["https://u:p@w@host/", "https://****@host/"],
    ["https:\\\\u:tok@host/", "https:\\\\****@host/"],
    ["u:tok@host", "****@host"],
    ["https://api.github.com/user", "https://api.github.com/user"],
    ["not a url", "not a url"],
    ["https://exa mple.com/?token=t", "https://exa mple.com/?token=****"],
  ];
  for (const [text, want] of cases) assert.equal(redactUrlText(text), want, text);
});
