// llama.cpp's side of bench/peer_decode.py: greedy decode steps of a GGUF through node-llama-cpp
// (its prebuilt CPU binaries), timed one step at a time, for every thread count and batch size.
//   node bench/peer/llama_peer.js --modules build/peer-node/node_modules --model M.gguf \
//     --prompt-ids 1,2,3 --batches 1,8,32 --threads 1,2 --steps 48 [--mode batched|sequential]
//     [--flash-attention auto|true|false]   (auto: the library's default)
//   ... --model M.gguf --tokenize "some text"      prints llama.cpp's token ids of the text
// Prints one JSON line of versions, then one per (threads, batch).
//
// How a step is run, and why:
// - B sequences of one context, each prefilled with the same prompt. A step hands every sequence
//   its last token with controlledEvaluate() and awaits all B promises together: node-llama-cpp
//   queues evaluations made in the same event-loop turn into one llama_decode of B tokens (one
//   per sequence), which is what batched decoding is. Awaiting the sequences one after another
//   (--mode sequential; also what sequence.evaluate() generators do on several sequences) makes
//   B decodes of one token each instead.
// - The next token is sampled by the add-on at temperature 0 (greedy, the first of equal maxima)
//   inside the same call, so the time of a step includes the peer's sampling, as mixserve's does.
// - The add-on runs each decode on a new worker thread, so some steps pay for starting threads:
//   the median step is the steady state, the mean includes those spikes; both are reported.
"use strict";
const path = require("path");
const {pathToFileURL} = require("url");

function args() {
  const a = {batches: "1,8,32", threads: "1,2", steps: "48", mode: "batched", "flash-attention": "auto"};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    a[argv[i].slice(2)] = argv[i + 1];
  }
  if (!a.model) throw new Error("--model GGUF is required");
  return a;
}

const list = (s) => s.split(",").filter((x) => x !== "").map(Number);

function stats(ms) {
  const s = [...ms].sort((x, y) => x - y);
  return {
    ms_per_step_median: s[Math.floor(s.length / 2)],  // the same index as mixserve-bench's
    ms_per_step_mean: s.reduce((x, y) => x + y, 0) / s.length,
    ms_per_step_min: s[0],
    ms_per_step_max: s[s.length - 1],
  };
}

async function run(llama, model, prompt, batch, threads, steps, mode, flash) {
  const perSeq = prompt.length + steps + 8;
  const context = await model.createContext({
    sequences: batch,
    contextSize: perSeq,
    batchSize: Math.max(512, batch * prompt.length),  // the whole prefill in one decode
    threads: {ideal: threads, min: threads},
    flashAttention: flash === "auto" ? "auto" : flash === "true",
  });
  try {
    const seqs = Array.from({length: batch}, () => context.getSequence());
    const greedy = {generateNext: {token: true, options: {temperature: 0}}};
    const evalLast = (seq, tokens) =>
      seq.controlledEvaluate(tokens.map((t, i) => (i === tokens.length - 1 ? [t, greedy] : t)));
    // Prefill: every sequence's prompt in the same turn, so one decode of B × prompt tokens.
    const pre = await Promise.all(seqs.map((s) => evalLast(s, prompt)));
    let next = pre.map((r) => r[r.length - 1].next.token);
    const tokens = [next[0]];
    let same = true;
    const times = [];
    for (let step = 0; step < steps; ++step) {
      const t0 = process.hrtime.bigint();
      let out;
      if (mode === "sequential") {
        out = [];
        for (let i = 0; i < batch; ++i) out.push(await evalLast(seqs[i], [next[i]]));
      } else {
        out = await Promise.all(seqs.map((s, i) => evalLast(s, [next[i]])));
      }
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
      next = out.map((r) => r[0].next.token);
      same = same && next.every((t) => t === next[0]);
      tokens.push(next[0]);
    }
    const st = stats(times);
    return {side: "llama.cpp", batch, threads, steps, prompt: prompt.length, mode, flash_attention: context.flashAttention, ...st,
            tok_s: batch / (st.ms_per_step_median / 1e3), tok_s_mean: batch / (st.ms_per_step_mean / 1e3),
            ms_per_step: times, greedy_tokens: tokens, greedy_same_in_every_sequence: same};
  } finally {
    await context.dispose();
  }
}

async function main() {
  const a = args();
  // node-llama-cpp is an ES module, which NODE_PATH does not reach: import it by its path.
  const modules = path.resolve(a.modules || "build/peer-node/node_modules");
  const {getLlama, LlamaLogLevel} = await import(pathToFileURL(path.join(modules, "node-llama-cpp", "dist", "index.js")));
  // maxThreads 0: the context's thread count is used as given, not capped at the core count.
  const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, progressLogs: false,
                                logLevel: LlamaLogLevel.error, maxThreads: 0});
  const model = await llama.loadModel({modelPath: path.resolve(a.model), gpuLayers: 0});
  if (a.tokenize !== undefined) {
    process.stdout.write(JSON.stringify({tokens: Array.from(model.tokenize(a.tokenize, false))}) + "\n");
    return;
  }
  const prompt = list(a["prompt-ids"] || "");
  if (!prompt.length) throw new Error("--prompt-ids is required");
  const pkg = require(path.join(modules, "node-llama-cpp", "package.json"));
  process.stdout.write(JSON.stringify({side: "llama.cpp", versions: {
    "node-llama-cpp": pkg.version, llama_cpp_release: llama.llamaCppRelease, build_type: llama.buildType,
    node: process.version, system_info: llama.systemInfo}}) + "\n");
  for (const threads of list(a.threads))
    for (const batch of list(a.batches))
      process.stdout.write(JSON.stringify(await run(llama, model, prompt, batch, threads, Number(a.steps), a.mode, a["flash-attention"])) + "\n");
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  process.stderr.write(`llama_peer: ${e.stack || e}\n`);
  process.exit(1);
});
