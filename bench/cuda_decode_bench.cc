// mixserve-cuda-bench: decode step time of the CUDA backend for each mixer at a given config
// (default: the Extractor paper's, u=5000, l=128, d=128, c=512, m=18 layers, float16 weights),
// random weights. For each mixer and batch size: prefill B sequences with a 16-token prompt, run
// warm-up steps (the batch's CUDA graph is captured there), then time decode steps end to end
// (metadata upload, graph replay, logits back to the host) and take the median; steps alternate
// with whole sampled steps on the host path (and, with --device-sampling, on the device sampler).
// --context-sweep adds batch-1 device time against the position for each mixer.
//   mixserve-cuda-bench --mixers aft_simple,retnet --batches 1,8,64,256 --out F.json
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "bench/bench_args.h"
#include "bench/json_out.h"
#include "engine/mixers/registry.h"
#include "engine/model_weights.h"
#include "engine/page_pool.h"
#include "engine/sampler.h"
#include "engine/sequence_state.h"
#include "kernels/cuda_backend.h"
#include "mixserve_version.h"  // MIXSERVE_VERSION: git describe at build time

namespace mixserve {
namespace {

// Small random weights; norms at 1, RWKV's mixes at ½ and decays moderate, so values stay finite.
class RandomWeights : public WeightSource {
 public:
  explicit RandomWeights(const ModelConfig& cfg) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (const WeightSpec& spec : expected_weights(cfg)) {
      int64_t n = 1;
      for (int64_t e : spec.shape) n *= e;
      std::vector<float>& v = w_[spec.name];
      const std::string& s = spec.name;
      auto ends = [&](const std::string& t) {
        return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
      };
      float fill = NAN;
      if ((s.find("ln") != std::string::npos || s.find("norm") != std::string::npos) &&
          ends(".weight"))
        fill = 1.0f;
      if (s.find("time_mix") != std::string::npos) fill = 0.5f;
      if (ends("time_decay")) fill = -1.0f;
      if (ends("time_first")) fill = 0.0f;
      v.resize(n);
      for (float& x : v) x = std::isnan(fill) ? u(rng) : fill;
    }
  }
  const float* get(const std::string& name) const override { return w_.at(name).data(); }
  bool has(const std::string& name) const override { return w_.count(name) != 0; }

 private:
  std::map<std::string, std::vector<float>> w_;
};

ModelConfig paper_config(const std::string& mixer, int u, int l, int d, int c, int m, int heads,
                         int window) {
  nlohmann::json layer = {{"mixer", mixer}};
  const MixerKind kind = parse_mixer_kind(mixer);
  if (window > 0 && mixer_takes(kind, "window")) layer["window"] = window;
  if (mixer_takes(kind, "heads")) layer["heads"] = heads;
  nlohmann::json cfg = {{"vocab_size", u},
                        {"d_model", d},
                        {"n_layers", m},
                        {"ffn_dim", c},
                        {"max_seq_len", l},
                        {"position", "learned"},
                        {"embed_scale", std::sqrt(double(d))},
                        {"norm", "layernorm"},
                        {"activation", "relu"},
                        {"ffn", mixer == "rwkv" ? "rwkv_channel_mix" : "mlp"},
                        {"bias", true},
                        {"tie_embeddings", true},
                        {"embed_norm", false},
                        {"layers", nlohmann::json::array()}};
  for (int i = 0; i < m; ++i) cfg["layers"].push_back(layer);
  return parse_model_config(cfg.dump(), "bench config");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Each timed step runs one of these ways, in turn, on the same backend and sequences:
//   logits: forward() alone — every logit copied to the host (what earlier runs measured);
//   host:   forward() + engine/sampler on the host per sequence (the engine's verified path);
//   device: forward_and_sample() with the device sampler (CudaBackendOptions::device_sampling),
//           only with --device-sampling (a separate run, so a fault there cannot cost the others);
//   greedy: the same with temperature 0 (the device's arg-max, tokens back), with it too.
// The sampling recipe is temperature 1, top-p 0.9 (sorts the vocabulary on both sides).
nlohmann::json bench(const ModelConfig& cfg, const WeightSource& w, CudaWeightType wt, int batch,
                     int steps, int prompt, bool graphs, bool device_sampling) {
  CudaBackendOptions o;
  o.weights = wt;
  o.graphs = graphs;
  o.pool_bytes = int64_t{1} << 30;
  o.device_sampling = device_sampling;  // forward() copies the logits either way
  const int warm = 8, timed = prompt + warm + steps;
  if (timed > cfg.max_seq_len) throw std::invalid_argument("prompt + steps exceed max_seq_len");
  // With --device-sampling, up to `steps` overlapped greedy steps after the others (and one to
  // start them), as many as the context has room for.
  const int overlapped_steps =
      device_sampling ? std::max(0, std::min(steps, static_cast<int>(cfg.max_seq_len) - timed - 1))
                      : 0;
  const int total = timed + (overlapped_steps > 0 ? overlapped_steps + 1 : 0);
  auto backend_ptr = std::make_unique<CudaBackend>(cfg, w, o);
  {  // 1 GiB of state, or what the batch needs where that is more (the large config's attention
     // holds 50,304 pages of 4 KB a sequence at its context: five fit in 1 GiB)
    PagePool probe(backend_ptr->total_pages());
    const int64_t need = int64_t{batch} * StateAllocator(*backend_ptr, probe).pages_for(total);
    if (need > backend_ptr->total_pages()) {
      o.pool_bytes = (need + need / 16) * backend_ptr->page_floats() * int64_t{sizeof(float)};
      backend_ptr.reset();
      backend_ptr = std::make_unique<CudaBackend>(cfg, w, o);
    }
  }
  CudaBackend& backend = *backend_ptr;
  if (backend.device_sampling() != device_sampling)
    throw std::runtime_error("MIXSERVE_CUDA_SAMPLING overrides --device-sampling: unset it");
  const int modes = device_sampling ? 4 : 2;
  PagePool pool(backend.total_pages());
  StateAllocator alloc(backend, pool);
  std::mt19937 rng(1);
  const int V = static_cast<int>(cfg.vocab_size);
  std::uniform_int_distribution<int> tok(0, V - 1);
  std::vector<SequenceState> seqs(batch);
  std::vector<std::vector<int32_t>> prompts(batch);
  ForwardBatch pre;
  for (int s = 0; s < batch; ++s) {
    if (!alloc.admit(seqs[s], total)) throw std::runtime_error("pool too small");
    for (int i = 0; i < prompt; ++i) prompts[s].push_back(tok(rng));
    pre.add_sequence(prompts[s].data(), prompt, 0, seqs[s]);
  }
  std::vector<float> logits;
  backend.forward(pre, logits);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_p = 0.9f;
  sp.seed = 42;
  TokenHistory history;
  history.init({}, V, false);
  SamplingParams greedy;  // temperature 0: the device sampler's arg-max, no sort
  greedy.temperature = 0.0f;
  std::vector<SampleRow> rows, greedy_rows;
  for (int s = 0; s < batch; ++s) {
    rows.push_back({s, &sp, &history, 0, false});
    greedy_rows.push_back({s, &greedy, &history, 0, false});
  }
  std::vector<SampledToken> sampled;
  SampledStep overlapped_step;
  std::vector<int32_t> next(batch);
  std::vector<double> times[4], device[4];
  for (int step = 0; step < warm + steps; ++step) {
    for (int& t : next) t = tok(rng);
    ForwardBatch b;
    for (int s = 0; s < batch; ++s) b.add_sequence(&next[s], 1, prompt + step, seqs[s]);
    const int mode = step % modes;
    const auto t0 = std::chrono::steady_clock::now();
    if (mode >= 2) {
      backend.forward_and_sample(b, mode == 2 ? rows : greedy_rows, sampled);
    } else {
      backend.forward(b, logits);
      if (mode == 1)
        for (int s = 0; s < batch; ++s)
          sampled.push_back(
              sample_token(&logits[static_cast<size_t>(s) * V], V, sp, history, step, false));
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sampled.clear();
    if (step >= warm) {
      times[mode].push_back(dt);
      device[mode].push_back(backend.last_device_seconds());
    }
  }
  const double med = median(times[0]), dev = median(device[0]);
  const double wbytes = static_cast<double>(backend.weight_bytes());
  // us_per_step: forward() end to end (host arrays in, all logits back on the host). device_us:
  // the GPU's share (batch upload to last logit), comparable to a peer that samples on the GPU.
  // sample_host_us / sample_device_us: a whole step with a token per sequence, either way (top-p
  // 0.9); greedy_device_us: the same with the device sampler's arg-max — tokens back, the step a
  // greedy server pays and what the PyTorch peers time (their arg-max fed back on the device).
  // weight_GBps: the bytes of every weight over the device time (a batch-1 step reads each once).
  nlohmann::json r = {
      {"batch", batch},
      {"steps", steps},
      {"prompt", prompt},
      {"graphs", graphs},
      {"us_per_step_median", med * 1e6},
      {"us_per_step_min",
       times[0].empty() ? 0.0 : *std::min_element(times[0].begin(), times[0].end()) * 1e6},
      {"device_us_per_step_median", dev * 1e6},
      {"tok_s", batch / med},
      {"device_tok_s", batch / dev},
      {"sample_host_us_per_step_median", median(times[1]) * 1e6},
      {"weight_bytes", wbytes},
      {"weight_GBps", wbytes / dev * 1e-9},
      {"options",
       {{"device_sampling", backend.device_sampling()},
        {"tensor_cores", backend.tensor_cores()},
        {"small_batch_gemv", backend.small_batch_gemv()},
        {"ordered_sums", backend.ordered_sums()},
        {"dependent_launch", backend.dependent_launch()},
        {"block_tables", backend.block_tables()},
        {"split_attention", backend.split_attention()},
        {"warp_cores", backend.warp_cores()},
        {"pipelined_gemm", backend.pipelined_gemm()},
        {"early_weights", backend.early_weights()},
        {"early_epilogue", backend.early_epilogue()},
        {"gemm_chains", backend.gemm_chains()},
        {"sequence_blocks", backend.sequence_blocks()},
        {"sequences_per_block", backend.sequences_per_block()},
        {"sample_candidates", backend.sample_candidates()}}}};
  if (overlapped_steps > 0) {
    // Overlapped greedy steps (Backend::launch_and_sample, what EngineOptions::overlap_steps
    // runs): each queued before the previous one's tokens are read, its rows fed them on the
    // device, so the host's work (upload, launch, reading tokens) hides behind the device's. Wall
    // time of overlapped_steps steps after the first, the last one's tokens read outside the
    // window.
    int pos = prompt + warm + steps;
    auto launch = [&](bool fed) {
      ForwardBatch b;
      for (int s = 0; s < batch; ++s) {
        const int32_t t = fed ? ForwardBatch::sampled_token(s) : next[s];
        b.add_sequence(&t, 1, pos, seqs[s]);
      }
      ++pos;
      backend.launch_and_sample(b, greedy_rows);
    };
    launch(false);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < overlapped_steps; ++i) {
      launch(true);
      backend.collect_sampled(overlapped_step);
    }
    const double overlapped =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
        overlapped_steps;
    backend.collect_sampled(overlapped_step);
    r["overlap_greedy_steps"] = overlapped_steps;
    r["overlap_greedy_us_per_step"] = overlapped * 1e6;
    r["overlap_greedy_tok_s"] = batch / overlapped;
  }
  if (device_sampling) {
    r["sample_device_us_per_step_median"] = median(times[2]) * 1e6;
    r["sample_device_tok_s"] = batch / median(times[2]);
    r["greedy_device_us_per_step_median"] = median(times[3]) * 1e6;
    r["greedy_device_tok_s"] = batch / median(times[3]);
  }
  return r;
}

// Device time of a batch-1 decode step at every position 1 … l−1 of one sequence: attention's
// cost grows with the prefix, a recurrent state's stays flat, a FIR window's grows until W.
nlohmann::json context_sweep(const ModelConfig& cfg, const WeightSource& w, CudaWeightType wt,
                             int every) {
  CudaBackendOptions o;
  o.weights = wt;
  o.pool_bytes = int64_t{1} << 30;
  CudaBackend backend(cfg, w, o);
  PagePool pool(backend.total_pages());
  StateAllocator alloc(backend, pool);
  SequenceState seq;
  const int L = static_cast<int>(cfg.max_seq_len);
  if (!alloc.admit(seq, L)) throw std::runtime_error("pool too small");
  std::vector<float> logits;
  nlohmann::json pos = nlohmann::json::array(), us = nlohmann::json::array();
  for (int p = 0; p < L; ++p) {
    const int32_t t = (p * 7919) % static_cast<int>(cfg.vocab_size);
    ForwardBatch b;
    b.add_sequence(&t, 1, p, seq);
    backend.forward(b, logits);
    if (p > 0 && p % every == 0) {
      pos.push_back(p);
      us.push_back(backend.last_device_seconds() * 1e6);
    }
  }
  return {{"position", pos}, {"device_us", us}};
}

}  // namespace
}  // namespace mixserve

int main(int argc, char** argv) {
  using namespace mixserve;
  BenchArgs a("mixserve-cuda-bench",
              "Decode step time of the CUDA backend per mixer and batch size.");
  a.flag("mixers",
         "aft_simple,aft_local,aft_full,attention,retnet,she,he,we,me,rwkv,linear,performer",
         "mixer kinds (one model of m layers each)");
  a.flag("batches", "1,8,64,256", "batch sizes");
  a.flag("steps", "64", "decode steps timed (after 8 warm-up steps)");
  a.flag("prompt", "16", "prompt tokens prefilled first");
  a.flag("vocab", "5000", "u");
  a.flag("ctx", "128", "l");
  a.flag("d", "128", "d");
  a.flag("ffn", "512", "c");
  a.flag("layers", "18", "m");
  a.flag("heads", "4", "heads of attention, retnet, linear, performer");
  a.flag("window", "0", "W of aft_local, she, he, we, me (0: the mixer's default)");
  a.flag("weights", "f16", "f32, f16, bf16, int8, int4");
  a.toggle("no-graphs", "run every step eagerly");
  a.toggle("device-sampling", "also time whole steps sampled on the device (forward_and_sample)");
  a.toggle("context-sweep",
           "also time batch-1 steps at every position (per-token cost vs context)");
  a.flag("sweep-every", "4", "context sweep: record every n-th position");
  a.flag("out", "", "write the results to this JSON file");
  std::string err;
  if (!a.parse(argc - 1, argv + 1, err)) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  if (a.help_requested()) {
    std::cout << a.help();
    return 0;
  }
  if (!cuda_device_available()) {
    std::cerr << "error: no CUDA device\n";
    return 1;
  }
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  nlohmann::json all = {
      {"device", cuda_device_name()},
      {"commit", MIXSERVE_VERSION},
      {"date", date},
      {"weights", a.str("weights")},
      {"config",
       {{"u", a.integer("vocab")},
        {"l", a.integer("ctx")},
        {"d", a.integer("d")},
        {"c", a.integer("ffn")},
        {"m", a.integer("layers")},
        {"heads", a.integer("heads")},
        {"window", a.integer("window")}}},
      {"tensor_cores",
       std::getenv("MIXSERVE_CUDA_TENSOR_CORES") ? std::getenv("MIXSERVE_CUDA_TENSOR_CORES") : "0"},
      {"results", nlohmann::json::array()}};
  auto save = [&] { write_json_file(a.str("out"), all); };
  try {
    const CudaWeightType wt = parse_cuda_weight_type(a.str("weights"));
    for (const std::string& mixer : a.strings("mixers")) {
      ModelConfig cfg =
          paper_config(mixer, static_cast<int>(a.integer("vocab")),
                       static_cast<int>(a.integer("ctx")), static_cast<int>(a.integer("d")),
                       static_cast<int>(a.integer("ffn")), static_cast<int>(a.integer("layers")),
                       static_cast<int>(a.integer("heads")), static_cast<int>(a.integer("window")));
      RandomWeights w(cfg);
      for (const std::string& b : a.strings("batches")) {
        nlohmann::json r = bench(cfg, w, wt, std::stoi(b), static_cast<int>(a.integer("steps")),
                                 static_cast<int>(a.integer("prompt")),
                                 a.str("no-graphs") != "true", a.str("device-sampling") == "true");
        r["mixer"] = mixer;
        std::cout << r.dump() << std::endl;
        all["results"].push_back(r);
        save();  // after every result: a failure or a time limit later keeps it
      }
      if (a.str("context-sweep") == "true") {
        nlohmann::json c = context_sweep(cfg, w, wt, static_cast<int>(a.integer("sweep-every")));
        c["mixer"] = mixer;
        std::cout << c.dump() << std::endl;
        all["context_sweep"].push_back(c);
        save();
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    all["error"] = e.what();
    save();
    return 1;
  }
  save();
  return 0;
}
