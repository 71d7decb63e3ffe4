// End-to-end test of the web playground: a real server, Debian's chromium driven by
// playwright-core; open /, type a prompt, watch the tokens stream in, check the ITL sparkline and
// the per-mixer cost table, take a screenshot.
// Usage: node playground_test.js SERVER_BINARY SOURCE_DIR OUTPUT_DIR   (NODE_PATH has playwright-core)
"use strict";
const fs = require("fs");
const path = require("path");
const { check, startServer, launchBrowser, run } = require("./browser_harness");

const [serverBin, sourceDir, outDir] = process.argv.slice(2);

async function main() {
  fs.mkdirSync(outDir, { recursive: true });
  const server = await startServer(serverBin, sourceDir,
    ["--static-dir", path.join(sourceDir, "clients/playground")]);
  let browser;
  try {
    browser = await launchBrowser();
    const page = browser.page;
    const consoleErrors = [];
    page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
    page.on("pageerror", (e) => consoleErrors.push(e.message));

    await page.goto(`http://127.0.0.1:${server.httpPort}/`);
    await page.waitForSelector("body[data-state=idle]", { timeout: 15000 });
    // The model picker lists the model and each layer's mixer.
    check((await page.locator("#model option").count()) >= 1, "no model in the picker");
    const chips = await page.locator("#mixers .chip").allTextContents();
    check(chips.length === 3 && chips.every((c, i) => c === `L${i} aft_full`), "mixer chips: " + chips.join(", "));
    await page.waitForSelector("#mixer-table tbody tr");

    // Type a prompt and stream a completion.
    await page.fill("#prompt", "In the beginning God created");
    await page.fill("#max-tokens", "64");
    await page.fill("#seed", "7");
    await page.fill("#temperature", "0.8");
    await page.click("#generate");
    await page.waitForSelector("body[data-state=done]", { timeout: 20000 });
    const run = await page.evaluate(() => ({
      events: window.playground.events,
      itl: window.playground.itl,
      usage: window.playground.usage,
      finish: window.playground.finishReason,
      text: document.getElementById("completion").textContent,
      stats: document.getElementById("stats").textContent,
      summary: document.getElementById("itl-summary").textContent,
    }));
    check(run.usage && run.usage.completion_tokens > 1, "no usage: " + JSON.stringify(run.usage));
    check(run.text.length > 0, "no completion text");
    const streamed = run.events.reduce((n, e) => n + e.tokens, 0);
    check(streamed === run.usage.completion_tokens, `${streamed} tokens streamed, usage says ${run.usage.completion_tokens}`);
    check(run.events.filter((e) => e.tokens > 0).length > 1, "the tokens did not arrive as separate events");
    check(run.events.every((e, i) => i === 0 || e.t >= run.events[i - 1].t), "events out of order");
    check(run.events.map((e) => e.text).join("") === run.text, "the page text is not the streamed text");
    check(run.itl.length === streamed - 1, `${run.itl.length} ITL samples for ${streamed} tokens`);
    check(/TTFT [\d.]+ ms/.test(run.stats) && run.stats.includes("finish:"), "stats: " + run.stats);
    check(run.summary.startsWith(`${run.itl.length} samples`), "sparkline summary: " + run.summary);
    // The sparkline was drawn: some pixels of the canvas are not blank.
    const inked = await page.evaluate(() => {
      const c = document.getElementById("itl-canvas");
      const data = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < data.length; i += 4) if (data[i] > 0) n++;
      return n;
    });
    check(inked > 50, `the sparkline canvas is blank (${inked} pixels)`);

    // The per-mixer cost table: one row per layer with the cost model's numbers and measured time.
    await page.waitForFunction(() => document.querySelectorAll("#mixer-table tbody tr td").length >= 33);
    const rows = await page.$$eval("#mixer-table tbody tr", (trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
    check(rows.length === 3, "mixer rows: " + JSON.stringify(rows));
    for (const [i, r] of rows.entries()) {
      check(r[0] === `L${i}` && r[1] === "aft_full", "mixer row: " + r);
      check(/^\d+ stages$/.test(r[2]), "critical path: " + r);
      check(r[3] !== "–" && r[7] !== "–" && r[7] !== "0", "ops and last-request ops: " + r);
      check(/µs$/.test(r[9]), "measured step time: " + r);
    }
    await page.screenshot({ path: path.join(outDir, "playground.png"), fullPage: true });

    // A request the server refuses shows its message, and the page stays usable.
    await page.fill("#max-tokens", "100000");
    await page.click("#generate");
    await page.waitForSelector("body[data-state=error]", { timeout: 10000 });
    const error = await page.textContent("#stats");
    check(/error: .*max_tokens/.test(error), "error message: " + error);
    check(consoleErrors.every((e) => /status of 400/.test(e)), "console errors: " + consoleErrors.join("; "));
    console.log(`playground: ${streamed} tokens streamed in ${run.events.length} events; screenshot ${path.join(outDir, "playground.png")}`);
  } finally {
    if (browser) await browser.close();
    server.proc.kill("SIGTERM");
  }
}

run(main);
