// The mixserve playground: streams a completion over SSE (fetch + ReadableStream), draws the
// inter-token latency as the tokens arrive, and shows each layer's mixer cost from /metrics.
// Plain modern JavaScript, no build step. State for tests is kept on window.playground.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  models: [],          // from GET /v1/models
  events: [],          // this completion's token events: {t (ms since send), tokens, text}
  itl: [],             // one inter-token latency (ms) per token after the first
  usage: null,
  finishReason: null,
  controller: null,    // AbortController of the running request
  lastOps: null,       // per-layer op totals before the last request, to show what it cost
};
window.playground = state;

function setStatus(text, bad = false) {
  $("status").textContent = text;
  $("status").classList.toggle("bad", bad);
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function errorText(res) {
  try {
    const body = await res.json();
    return body.error && body.error.message ? body.error.message : JSON.stringify(body);
  } catch (e) {
    return res.status + " " + res.statusText;
  }
}

// ---- models -------------------------------------------------------------------------------

async function loadModels() {
  const res = await fetch("/v1/models", { headers: headers() });
  if (!res.ok) {
    setStatus(`GET /v1/models: ${await errorText(res)}`, true);
    document.body.dataset.state = "error";
    return;
  }
  state.models = (await res.json()).data;
  const select = $("model");
  select.replaceChildren(...state.models.map((m) => new Option(`${m.id} (${m.mixers.length} layers)`, m.id)));
  showModel();
  const ready = await fetch("/ready");
  setStatus(ready.ok ? `ready · ${state.models.length} model(s)` : "not ready (draining)", !ready.ok);
  document.body.dataset.state = "idle";
}

function currentModel() {
  return state.models.find((m) => m.id === $("model").value) || state.models[0];
}

function showModel() {
  const m = currentModel();
  if (!m) return;
  $("model-info").textContent = `${m.format} model on ${m.backend}, context ${m.max_model_len} tokens`;
  $("mixers").replaceChildren(
    ...m.mixers.map((kind, layer) => {
      const chip = document.createElement("span");
      chip.className = "chip";
      chip.textContent = `L${layer} ${kind}`;
      return chip;
    })
  );
  $("max-tokens").max = m.max_model_len;
  state.lastOps = null;  // the last request's cost was for another model
  refreshMetrics();
}

// ---- completion over SSE ----------------------------------------------------------------------

function requestBody() {
  const number = (id) => ($(id).value === "" ? undefined : Number($(id).value));
  const stop = $("stop").value.split("\n").filter((s) => s.length > 0);
  const body = {
    model: $("model").value,
    prompt: $("prompt").value,
    max_tokens: number("max-tokens"),
    temperature: number("temperature"),
    top_p: number("top-p"),
    top_k: number("top-k"),
    seed: number("seed"),
    stop: stop.length ? stop : undefined,
    stream: true,
    stream_options: { include_usage: true },
  };
  return JSON.stringify(body);
}

// Reads a text/event-stream body and calls onData with each event's data.
async function readEvents(body, onData) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
      if (data.length) onData(data.join("\n"));
    }
  }
}

async function generate() {
  const before = await readMixerMetrics();
  state.lastOps = before;
  state.events = [];
  state.itl = [];
  state.usage = null;
  state.finishReason = null;
  $("output").querySelector(".prompt-text").textContent = $("prompt").value;
  $("completion").textContent = "";
  $("stats").textContent = "";
  $("stats").classList.remove("error");
  drawSparkline();
  setBusy(true);
  state.controller = new AbortController();
  const sent = performance.now();
  let lastTokenAt = null;
  try {
    const res = await fetch("/v1/completions", {
      method: "POST", headers: headers(), body: requestBody(), signal: state.controller.signal,
    });
    if (!res.ok) throw new Error(await errorText(res));
    await readEvents(res.body, (data) => {
      if (data === "[DONE]") return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) state.usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) return;
      if (choice.finish_reason) state.finishReason = choice.finish_reason;
      // A chunk with text is one token: the server sends one per token unless it holds text back
      // (a split UTF-8 character, a possible stop string), then the usage says more tokens came.
      const tokens = choice.logprobs ? choice.logprobs.token_logprobs.length : (choice.text ? 1 : 0);
      const now = performance.now();
      if (tokens > 0) {
        if (lastTokenAt !== null) for (let i = 0; i < tokens; i++) state.itl.push((now - lastTokenAt) / tokens);
        else for (let i = 1; i < tokens; i++) state.itl.push(0);
        lastTokenAt = now;
      }
      state.events.push({ t: now - sent, tokens, text: choice.text });
      $("completion").textContent += choice.text;
      $("completion").dataset.tokens = state.events.reduce((n, e) => n + e.tokens, 0);
      drawSparkline();
      showStats(sent, now);
    });
    showStats(sent, performance.now(), true);
    document.body.dataset.state = "done";
  } catch (e) {
    const aborted = e.name === "AbortError";
    $("stats").textContent = aborted ? "stopped" : "error: " + e.message;
    $("stats").classList.toggle("error", !aborted);
    document.body.dataset.state = aborted ? "done" : "error";
  } finally {
    setBusy(false);
    state.controller = null;
    refreshMetrics();
  }
}

function setBusy(busy) {
  $("generate").disabled = busy;
  $("stop-button").disabled = !busy;
  if (busy) document.body.dataset.state = "streaming";
}

function showStats(sent, now, final = false) {
  const first = state.events.find((e) => e.tokens > 0);
  const tokens = state.usage ? state.usage.completion_tokens : state.itl.length + (first ? 1 : 0);
  const parts = [];
  if (first) parts.push(`TTFT ${first.t.toFixed(1)} ms`);
  const last = [...state.events].reverse().find((e) => e.tokens > 0);
  if (first && last && last.t > first.t && tokens > 1) parts.push(`${((tokens - 1) / ((last.t - first.t) / 1000)).toFixed(0)} tokens/s`);
  parts.push(`${tokens} tokens in ${(now - sent).toFixed(1)} ms`);
  if (final && state.usage) {
    const cached = (state.usage.prompt_tokens_details || {}).cached_tokens || 0;
    parts.push(`prompt ${state.usage.prompt_tokens} tokens (${cached} cached)`);
  }
  if (final && state.finishReason) parts.push(`finish: ${state.finishReason}`);
  $("stats").textContent = parts.join(" · ");
}

// ---- ITL sparkline ------------------------------------------------------------------------

function percentile(values, p) {
  if (!values.length) return 0;
  const v = [...values].sort((a, b) => a - b);
  const rank = (p / 100) * (v.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.min(lo + 1, v.length - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
}

function drawSparkline() {
  const canvas = $("itl-canvas");
  const dpr = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 900, height = canvas.clientHeight || 90;
  canvas.width = width * dpr;
  canvas.height = height * dpr;
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  g.clearRect(0, 0, width, height);
  const itl = state.itl;
  if (!itl.length) {
    $("itl-summary").textContent = "no tokens yet";
    return;
  }
  const top = Math.max(percentile(itl, 99) * 1.2, 1e-3);  // one outlier should not flatten the rest
  const step = width / Math.max(itl.length, 40);
  g.fillStyle = "#2764c5";
  itl.forEach((ms, i) => {
    const h = Math.max(1, Math.min(1, ms / top) * (height - 14));
    g.fillRect(i * step + 1, height - h, Math.max(1, step - 2), h);
  });
  const median = percentile(itl, 50);
  g.strokeStyle = "#e07b00";
  g.setLineDash([4, 3]);
  const y = height - Math.min(1, median / top) * (height - 14);
  g.beginPath();
  g.moveTo(0, y);
  g.lineTo(width, y);
  g.stroke();
  g.fillStyle = "#66707a";
  g.font = "11px system-ui, sans-serif";
  g.fillText(`${top.toFixed(2)} ms`, 4, 11);
  $("itl-summary").textContent =
    `${itl.length} samples · last ${itl[itl.length - 1].toFixed(2)} ms · p50 ${median.toFixed(2)} ms ` +
    `(dashed) · p99 ${percentile(itl, 99).toFixed(2)} ms · max ${Math.max(...itl).toFixed(2)} ms`;
}

// ---- per-mixer cost from /metrics ---------------------------------------------------------------

// Parses Prometheus text into [{name, labels, value}] for the mixserve_mixer_* series.
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line.startsWith("mixserve_mixer_")) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const [, k, v] of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v.replace(/\\(.)/g, "$1");
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}

// Per layer of the selected model: mixer, op totals, critical-path depth, measured step time.
async function readMixerMetrics() {
  const res = await fetch("/metrics", { headers: headers() });
  if (!res.ok) return null;
  const model = $("model").value;
  const layers = new Map();
  const layer = (s) => {
    const i = Number(s.labels.layer);
    if (!layers.has(i)) layers.set(i, { layer: i, mixer: s.labels.mixer, ops: {}, depth: null, sum: 0, count: 0 });
    return layers.get(i);
  };
  for (const s of parseMetrics(await res.text())) {
    if (s.labels.model !== model || s.labels.layer === undefined) continue;
    if (s.name === "mixserve_mixer_ops_total") layer(s).ops[s.labels.op] = s.value;
    else if (s.name === "mixserve_mixer_critical_path_depth") layer(s).depth = s.value;
    else if (s.name === "mixserve_mixer_step_seconds_sum") layer(s).sum = s.value;
    else if (s.name === "mixserve_mixer_step_seconds_count") layer(s).count = s.value;
  }
  return [...layers.values()].sort((a, b) => a.layer - b.layer);
}

function formatCount(n) {
  if (n === undefined || n === null) return "–";
  for (const [div, unit] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) if (n >= div) return (n / div).toFixed(2) + " " + unit;
  return String(Math.round(n));
}

function totalOps(row) {
  return ["mul", "add", "div", "exp"].reduce((n, op) => n + (row.ops[op] || 0), 0);
}

async function refreshMetrics() {
  const rows = await readMixerMetrics();
  const body = $("mixer-table").querySelector("tbody");
  if (!rows) {
    body.innerHTML = `<tr><td colspan="11" class="error">cannot read /metrics</td></tr>`;
    return;
  }
  const before = new Map((state.lastOps || []).map((r) => [r.layer, r]));
  const meanStep = (r) => (r.count ? r.sum / r.count : 0);
  const totalMean = rows.reduce((n, r) => n + meanStep(r), 0);
  body.replaceChildren(
    ...rows.map((r) => {
      const tr = document.createElement("tr");
      const prev = before.get(r.layer);
      const cells = [
        `L${r.layer}`, r.mixer, r.depth === null ? "–" : `${r.depth} stages`,
        formatCount(r.ops.mul), formatCount(r.ops.add), formatCount(r.ops.div), formatCount(r.ops.exp),
        prev ? formatCount(totalOps(r) - totalOps(prev)) : "–",
        formatCount(r.count), r.count ? `${(meanStep(r) * 1e6).toFixed(1)} µs` : "–",
      ];
      for (const c of cells) tr.appendChild(Object.assign(document.createElement("td"), { textContent: c }));
      const bar = document.createElement("td");
      bar.className = "bar";
      const fill = document.createElement("span");
      fill.style.width = totalMean > 0 ? `${(100 * meanStep(r)) / totalMean}%` : "0";
      bar.appendChild(fill);
      tr.appendChild(bar);
      return tr;
    })
  );
}

// ---- wiring -------------------------------------------------------------------------------------

$("api-key").value = localStorage.getItem("mixserve-api-key") || "";
$("api-key").addEventListener("change", () => {
  localStorage.setItem("mixserve-api-key", $("api-key").value.trim());
  loadModels();
});
$("model").addEventListener("change", showModel);
$("generate").addEventListener("click", generate);
$("stop-button").addEventListener("click", () => state.controller && state.controller.abort());
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !$("generate").disabled) generate();
});
window.addEventListener("resize", drawSparkline);
loadModels().catch((e) => {
  setStatus("cannot reach the server: " + e.message, true);
  document.body.dataset.state = "error";
});
