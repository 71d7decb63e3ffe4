// CORS as a browser enforces it: a page served from another origin (a small Node server on its own
// port) calls a real `mixserve serve --allowed-origins <that origin> --api-key ...` with fetch()
// in Debian's chromium (playwright-core). The allowed origin gets its completion (JSON and a
// streamed SSE one, after the preflight that Authorization and X-Request-Id trigger) and can read
// the exposed X-Request-Id; the same page from an origin that is not allowed
// (http://localhost:<port> instead of http://127.0.0.1:<port>) is refused by the browser.
// Usage: node cors_test.js SERVER_BINARY SOURCE_DIR OUTPUT_DIR   (NODE_PATH has playwright-core)
"use strict";
const http = require("http");
const { check, startServer, launchBrowser, run } = require("./browser_harness");

const [serverBin, sourceDir] = process.argv.slice(2);
const KEY = "cors-test-key";

// The page's own server: any path answers a blank HTML page (the test drives it with evaluate()).
function startPageServer() {
  return new Promise((resolve) => {
    const srv = http.createServer((req, res) => {
      res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
      res.end("<!doctype html><title>another origin</title><body>page</body>");
    });
    srv.listen(0, "127.0.0.1", () => resolve(srv));
  });
}

// Runs in the page: a completion through fetch(), JSON or streamed, with the headers that make
// the browser send a preflight first.
async function callFromPage({ api, key, stream }) {
  try {
    const res = await fetch(api + "/v1/completions", {
      method: "POST",
      headers: { "Authorization": "Bearer " + key, "Content-Type": "application/json", "X-Request-Id": "browser-1" },
      body: JSON.stringify({ prompt: "And God said", max_tokens: 8, temperature: 0, stream }),
    });
    const requestId = res.headers.get("X-Request-Id");
    if (!stream) return { status: res.status, requestId, body: await res.json() };
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let text = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    return { status: res.status, requestId, events: text.split("\n\n").filter((e) => e.startsWith("data: ")) };
  } catch (e) {
    return { error: String(e) };
  }
}

async function main() {
  const pages = await startPageServer();
  const pagePort = pages.address().port;
  const allowed = `http://127.0.0.1:${pagePort}`;
  const server = await startServer(serverBin, sourceDir, ["--api-key", KEY, "--allowed-origins", allowed]);
  const api = `http://127.0.0.1:${server.httpPort}`;
  let browser;
  try {
    browser = await launchBrowser();
    const page = browser.page;

    // The allowed origin: JSON, then a stream.
    await page.goto(allowed + "/page.html");
    const json = await page.evaluate(callFromPage, { api, key: KEY, stream: false });
    check(!json.error, "fetch from the allowed origin failed: " + json.error);
    check(json.status === 200, "status " + json.status + ": " + JSON.stringify(json.body));
    check(json.body.choices[0].text.length > 0, "no completion text: " + JSON.stringify(json.body));
    check(json.requestId === "browser-1", "X-Request-Id as the page sees it: " + json.requestId);
    check(json.body.id === "cmpl-browser-1", "completion id: " + json.body.id);
    const sse = await page.evaluate(callFromPage, { api, key: KEY, stream: true });
    check(!sse.error, "streamed fetch from the allowed origin failed: " + sse.error);
    check(sse.status === 200 && sse.events.length >= 3, "stream: " + JSON.stringify(sse));
    check(sse.events[sse.events.length - 1] === "data: [DONE]", "the stream did not end with [DONE]");
    check(sse.requestId === "browser-1", "streamed X-Request-Id: " + sse.requestId);

    // Another origin (localhost is not 127.0.0.1 to a browser): the browser refuses the answer.
    await page.goto(`http://localhost:${pagePort}/page.html`);
    const refused = await page.evaluate(callFromPage, { api, key: KEY, stream: false });
    check(refused.error && /Failed to fetch/.test(refused.error), "a page from another origin got: " + JSON.stringify(refused));
    // The preflights the browser sent (playwright does not show them): the server's own counts.
    const metrics = await (await fetch(api + "/metrics")).text();
    const count = (status) => {
      const m = metrics.match(new RegExp(`mixserve_http_responses_total\\{path="/v1/completions",status="${status}"\\} (\\d+)`));
      return m ? Number(m[1]) : 0;
    };
    check(count(204) >= 1, "the browser sent no preflight from the allowed origin:\n" + metrics);
    check(count(403) >= 1, "the preflight from the other origin was not refused by the server");
    check(count(200) === 2, `${count(200)} completions served, expected the allowed origin's 2`);
    console.log(`cors: allowed origin ${allowed} served (JSON and SSE, ${count(204)} preflights answered); ` +
      `http://localhost:${pagePort} refused (${count(403)} preflights refused)`);
  } finally {
    if (browser) await browser.close();
    server.proc.kill("SIGTERM");
    pages.close();
  }
}

run(main);
