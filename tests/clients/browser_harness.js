// What the browser tests (playground_test.js, cors_test.js) share: failing with a message, a real
// `mixserve serve` on free ports, and Debian's chromium through playwright-core with a throwaway
// profile. NODE_PATH must hold playwright-core (run_playground_test.sh installs it).
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

function fail(message) {
  console.error("FAIL: " + message);
  process.exitCode = 1;
  throw new Error(message);
}

function check(condition, message) {
  if (!condition) fail(message);
}

// Starts `mixserve serve --model models/default` on free ports with `args` added; resolves with
// {proc, httpPort} once it prints `listening:`.
function startServer(serverBin, sourceDir, args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(serverBin, ["serve", "--model", "models/default", "--grpc-port", "0", "--http-port", "0",
      "--threads", "1", ...args], { cwd: sourceDir });
    let output = "";
    const timer = setTimeout(() => reject(new Error("the server did not start in 30 s:\n" + output)), 30000);
    proc.stdout.on("data", (d) => {
      output += d;
      const m = output.match(/listening: grpc \S+, http [^:\s]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, httpPort: Number(m[1]) });
      }
    });
    proc.stderr.on("data", (d) => (output += d));
    proc.on("exit", (code) => reject(new Error(`the server exited (${code}):\n${output}`)));
  });
}

// Headless chromium with a fresh profile: {browser, page, close()}.
async function launchBrowser(viewport = { width: 1280, height: 900 }) {
  if (!fs.existsSync(CHROMIUM))
    fail(`chromium is not installed at ${CHROMIUM}: install Debian's chromium (scripts/install-deps)`);
  let chromium;
  try {
    ({ chromium } = require("playwright-core"));
  } catch (e) {
    fail("playwright-core is missing (run_playground_test.sh installs it with npm ci): " + e.message);
  }
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "mixserve-chromium-"));
  let browser;
  try {
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"],
      timeout: 30000,
    });
  } catch (e) {
    fs.rmSync(profile, { recursive: true, force: true });
    fail("chromium cannot run: " + e.message);
  }
  const page = browser.pages()[0] || (await browser.newPage());
  const close = async () => {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  };
  return { browser, page, close };
}

// Runs main; any failure ends the process with exit code 1 and its message.
function run(main) {
  main().catch((e) => {
    if (!process.exitCode) console.error("FAIL: " + (e.stack || e.message));
    process.exitCode = 1;
  });
}

module.exports = { fail, check, startServer, launchBrowser, run };
