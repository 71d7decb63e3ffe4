// The device sampler (kernels/sampling.cuh) against the host sampler (engine/sampler.cc) on the
// same logits: the same token for greedy and seeded sampling over many seeds and parameter sets
// (penalties, temperature, top-k, top-p, min-p, ties), logprobs within 1e-5; batch invariance
// (a row's result alone equals its result among others, bit for bit); and the engine on the CUDA
// backend giving the same tokens with device sampling on and off. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>

#include "engine/engine.h"
#include "kernels/cuda_backend.h"
#include "tests/support/golden.h"

namespace mixserve::testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device"

// Parameter sets covering every step of the recipe, alone and combined.
std::vector<SamplingParams> param_sets() {
  std::vector<SamplingParams> out;
  auto add = [&](float t, int k, float p, float min_p, float rep, float pres, float freq, int lp) {
    SamplingParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = min_p;
    s.repetition_penalty = rep;
    s.presence_penalty = pres;
    s.frequency_penalty = freq;
    s.logprobs = lp;
    out.push_back(s);
  };
  add(0, 0, 1, 0, 1, 0, 0, 0);           // greedy
  add(0, 0, 1, 0, 1.3f, 0.4f, 0.2f, 5);  // greedy with penalties and logprobs
  add(1, 0, 1, 0, 1, 0, 0, 0);           // plain sampling over the whole vocabulary
  add(0.7f, 0, 1, 0, 1, 0, 0, 20);
  add(1, 1, 1, 0, 1, 0, 0, 0);  // top-k 1
  add(1, 40, 1, 0, 1, 0, 0, 3);
  add(1, 0, 0.9f, 0, 1, 0, 0, 0);
  add(1.5f, 0, 0.5f, 0, 1, 0, 0, 0);
  add(1, 0, 1, 0.05f, 1, 0, 0, 0);  // min-p without an order
  add(0.8f, 50, 0.95f, 0.02f, 1.2f, 0.5f, 0.3f, 2);
  add(2, 200, 0.8f, 0, 0.8f, -0.5f, -0.2f, 1);
  add(100, 0, 0.99f, 0, 1, 0, 0, 0);  // nearly flat: long top-p prefixes
  // min_tokens: a suppressed list (with a repeat and an id past the vocabulary) while the step is
  // below it, greedy and sampled, with penalties on the same ids.
  for (float t : {0.0f, 1.0f}) {
    add(t, 0, 1, 0, 1.1f, 0.3f, 0.1f, 2);
    out.back().min_tokens = 1 << 20;
    for (int32_t id = 0; id < 64; ++id) out.back().suppressed.push_back(id);
    out.back().suppressed.push_back(3);
    out.back().suppressed.push_back(1 << 30);
  }
  return out;
}

// Logits rows: normal, scaled up (peaked), and coarse (many exact ties).
std::vector<float> make_logits(int rows, int V, std::mt19937& rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> l(static_cast<size_t>(rows) * V);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < V; ++i) {
      float v = n(rng);
      if (r % 3 == 1) v *= 6.0f;
      if (r % 3 == 2) v = std::round(v * 2.0f) / 2.0f;
      l[static_cast<size_t>(r) * V + i] = v;
    }
  return l;
}

struct Case {
  SamplingParams params;
  TokenHistory history;
  int row = 0;
  uint64_t step = 0;
  bool want_logprob = false;
  int32_t pending = -1;  // a generated token the history lacks (overlapped steps); −1 none
};

// pending: most cases get a pending token — one generated before, one only in the prompt, a new
// one, one past the vocabulary.
std::vector<Case> make_cases(int rows, int V, int seeds, std::mt19937& rng, bool pending = false) {
  std::vector<Case> cases;
  const auto sets = param_sets();
  for (int s = 0; s < seeds; ++s)
    for (size_t p = 0; p < sets.size(); ++p) {
      Case c;
      c.params = sets[p];
      c.params.seed = 1000003ull * s + p;
      c.row = static_cast<int>((s * sets.size() + p) % rows);
      c.step = static_cast<uint64_t>(s * 7 + p);
      c.want_logprob = (s + p) % 2 == 0;
      std::vector<int32_t> prompt;
      for (int i = 0; i < 20; ++i)
        prompt.push_back(std::uniform_int_distribution<int>(0, V - 1)(rng));
      const bool track = c.params.repetition_penalty != 1 || c.params.presence_penalty != 0 ||
                         c.params.frequency_penalty != 0;
      c.history.init(prompt, V, track);
      for (int i = 0; i < 12; ++i)
        c.history.add_output(prompt[i % 5] + (i % 3));  // repeats, for the counts
      if (pending) {
        const int32_t choices[] = {prompt[1], prompt[19], static_cast<int32_t>((s * 31 + p) % V),
                                   V + 3};
        if ((s + p) % 5 != 4) c.pending = choices[(s + p) % 5];
      }
      cases.push_back(std::move(c));
    }
  return cases;
}

// The rows, and (for pending tokens) the batch tokens they name: case i's at row i.
std::vector<SampleRow> rows_of(const std::vector<Case>& cases,
                               std::vector<int32_t>* batch_tokens = nullptr) {
  std::vector<SampleRow> rows;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    rows.push_back({c.row, &c.params, &c.history, c.step, c.want_logprob});
    if (c.pending >= 0) rows.back().pending_row = static_cast<int32_t>(i);
    if (batch_tokens) batch_tokens->push_back(c.pending);
  }
  return rows;
}

// candidates: the sampler sorts only the tokens above its threshold (sample_candidates).
// pending: rows with a pending token (make_cases), sampled as the host samples them.
void expect_same_as_host(int V, int rows, int seeds, bool candidates = false,
                         bool pending = false) {
  std::mt19937 rng(V);
  const std::vector<float> logits = make_logits(rows, V, rng);
  const std::vector<Case> cases = make_cases(rows, V, seeds, rng, pending);
  std::vector<int32_t> batch_tokens;
  const std::vector<SampleRow> sample_rows = rows_of(cases, &batch_tokens);
  const std::vector<SampledToken> got =
      cuda_sample_logits(logits, V, sample_rows, candidates, batch_tokens);
  ASSERT_EQ(got.size(), cases.size());
  int sampled = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const SampledToken want = sample_token(&logits[static_cast<size_t>(c.row) * V], V, c.params,
                                           c.history, c.step, c.want_logprob, c.pending);
    const std::string what =
        std::string(candidates ? "candidates, " : "") + "V=" + std::to_string(V) + " case " +
        std::to_string(i) + " (T=" + std::to_string(c.params.temperature) +
        " k=" + std::to_string(c.params.top_k) + " p=" + std::to_string(c.params.top_p) +
        " min_p=" + std::to_string(c.params.min_p) + ")";
    ASSERT_EQ(got[i].token, want.token) << what;
    EXPECT_NEAR(got[i].logprob, want.logprob, 1e-5) << what;
    ASSERT_EQ(got[i].top.size(), want.top.size()) << what;
    for (size_t j = 0; j < want.top.size(); ++j) {
      EXPECT_EQ(got[i].top[j].first, want.top[j].first) << what << " top " << j;
      EXPECT_NEAR(got[i].top[j].second, want.top[j].second, 1e-5) << what << " top " << j;
    }
    sampled += c.params.temperature > 0;
  }
  EXPECT_GT(sampled, 0);
}

// The paper's vocabulary (candidates in shared memory), a tiny one, and GPT-2's (the global
// workspace path, V rounded up to 65536).
TEST(CudaSampling, SameTokensAsTheHostSampler) {
  SKIP_WITHOUT_GPU();
  expect_same_as_host(5000, 9, 40);
  expect_same_as_host(7, 3, 20);
  expect_same_as_host(50257, 6, 3);
}

// Overlapped steps: a row's pending token (read from the pass's tokens on the device) counts in
// its penalties as the host's history counts it after add_output — generated before, only in the
// prompt, new, past the vocabulary; with and without sampling candidates.
TEST(CudaSampling, APendingTokenCountsAsTheHostsHistoryWould) {
  SKIP_WITHOUT_GPU();
  for (bool candidates : {false, true}) {
    expect_same_as_host(5000, 9, 40, candidates, true);
    expect_same_as_host(7, 3, 20, candidates, true);
  }
  expect_same_as_host(50257, 6, 3, false, true);
}

// Each row sampled alone gives the bits it gives among all the others.
TEST(CudaSampling, BatchInvariantBitwise) {
  SKIP_WITHOUT_GPU();
  const int V = 5000, rows = 9;
  std::mt19937 rng(3);
  const std::vector<float> logits = make_logits(rows, V, rng);
  const std::vector<Case> cases = make_cases(rows, V, 6, rng);
  const std::vector<SampleRow> all = rows_of(cases);
  for (bool candidates : {false, true}) {
    const std::vector<SampledToken> together = cuda_sample_logits(logits, V, all, candidates);
    for (size_t i = 0; i < all.size(); i += 5) {
      const std::vector<SampledToken> alone = cuda_sample_logits(logits, V, {all[i]}, candidates);
      ASSERT_EQ(alone[0].token, together[i].token) << "case " << i << " candidates " << candidates;
      EXPECT_EQ(0, std::memcmp(&alone[0].logprob, &together[i].logprob, sizeof(float)))
          << "case " << i;
      EXPECT_EQ(alone[0].top, together[i].top) << "case " << i;
    }
  }
}

// Sorting only the candidates above the threshold (sample_candidates): the host's tokens at the
// same vocabularies and settings (top-k, top-p, both, min-p, nearly flat rows whose prefix is
// long: the full sort's fallback), and the full sort's tokens, bit for bit.
TEST(CudaSampling, CandidatesGiveTheHostsTokens) {
  SKIP_WITHOUT_GPU();
  expect_same_as_host(5000, 9, 40, true);
  expect_same_as_host(7, 3, 20, true);
  expect_same_as_host(50257, 6, 3, true);
  const int V = 5000, rows = 9;
  std::mt19937 rng(11);
  const std::vector<float> logits = make_logits(rows, V, rng);
  const std::vector<Case> cases = make_cases(rows, V, 10, rng);
  const std::vector<SampledToken> full = cuda_sample_logits(logits, V, rows_of(cases), false),
                                  cand = cuda_sample_logits(logits, V, rows_of(cases), true);
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_EQ(cand[i].token, full[i].token) << "case " << i;
    EXPECT_EQ(0, std::memcmp(&cand[i].logprob, &full[i].logprob, sizeof(float))) << "case " << i;
  }
}

std::unique_ptr<CudaBackend> gpu_backend(const Fixture& fx, bool device_sampling) {
  CudaBackendOptions o;
  o.pool_bytes = 32 << 20;
  o.device_sampling = device_sampling;
  auto b = std::make_unique<CudaBackend>(fx.cfg, *fx.weights, o);
  EXPECT_EQ(b->device_sampling(), device_sampling) << "MIXSERVE_CUDA_SAMPLING overrides the option";
  return b;
}

// forward_and_sample on the device: tokens equal the host path's, and logits_row hands back the
// same logits forward() gives, bit for bit.
TEST(CudaSampling, BackendForwardAndSampleMatchesHostPath) {
  SKIP_WITHOUT_GPU();
  unsetenv("MIXSERVE_CUDA_SAMPLING");
  Fixture fx = load_fixture("hybrid_b");
  auto dev = gpu_backend(fx, true), host = gpu_backend(fx, false);
  Runner rd(*dev), rh(*host);
  const int V = static_cast<int>(fx.cfg.vocab_size);
  std::mt19937 rng(5);
  for (int batch : {1, 7, 64}) {  // decode steps (graphs) after a prefill (eager)
    std::vector<SequenceState> sd(batch), shs(batch);
    std::vector<std::vector<int32_t>> toks(batch);
    ForwardBatch bd, bh;
    for (int s = 0; s < batch; ++s) {
      ASSERT_TRUE(rd.alloc.admit(sd[s], 24));
      ASSERT_TRUE(rh.alloc.admit(shs[s], 24));
      for (int i = 0; i < 1 + s % 5; ++i)
        toks[s].push_back(std::uniform_int_distribution<int>(0, V - 1)(rng));
    }
    SamplingParams sp;
    sp.temperature = 0.9f;
    sp.top_p = 0.9f;
    sp.logprobs = 2;
    sp.seed = 77;
    TokenHistory h;
    h.init({}, V, false);
    for (int step = 0; step < 4; ++step) {
      bd.clear();
      bh.clear();
      std::vector<SampleRow> rows;
      for (int s = 0; s < batch; ++s) {
        const int pos = step == 0 ? 0 : static_cast<int>(toks[s].size()) - 1;
        const int n = static_cast<int>(toks[s].size()) - pos;
        bd.add_sequence(toks[s].data() + pos, n, pos, sd[s]);
        bh.add_sequence(toks[s].data() + pos, n, pos, shs[s]);
        rows.push_back({s, &sp, &h, static_cast<uint64_t>(step * 100 + s), s % 2 == 0});
      }
      std::vector<SampledToken> td, th;
      dev->forward_and_sample(bd, rows, td);
      host->forward_and_sample(bh, rows, th);
      ASSERT_EQ(td.size(), th.size());
      std::vector<float> rd_row(V), rh_row(V);
      for (int s = 0; s < batch; ++s) {
        ASSERT_EQ(td[s].token, th[s].token)
            << "batch " << batch << " step " << step << " seq " << s;
        EXPECT_NEAR(td[s].logprob, th[s].logprob, 1e-5);
        dev->logits_row(s, rd_row.data());
        host->logits_row(s, rh_row.data());
        ASSERT_EQ(0, std::memcmp(rd_row.data(), rh_row.data(), V * sizeof(float)))
            << "logits row " << s;
        toks[s].push_back(td[s].token);
      }
    }
    for (auto& s : sd) rd.alloc.release(s);
    for (auto& s : shs) rh.alloc.release(s);
  }
}

std::vector<std::vector<TokenOutput>> run_engine(const Fixture& fx, bool device_sampling,
                                                 const std::vector<GenerateParams>& reqs,
                                                 EngineOptions opts) {
  LoadedModel model;
  model.id = fx.name;
  model.config = fx.cfg;
  Engine engine(model, gpu_backend(fx, device_sampling), opts);
  std::vector<std::vector<TokenOutput>> out(reqs.size());
  std::vector<std::promise<void>> done(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto r = engine.submit(reqs[i], [&, i](TokenOutput&& o) {
      const bool last = o.finish != FinishReason::kNone;
      out[i].push_back(std::move(o));
      if (last) done[i].set_value();
    });
    EXPECT_EQ(r.status, SubmitStatus::kOk) << r.message;
  }
  while (engine.step()) {
  }
  for (auto& d : done) d.get_future().get();
  EXPECT_EQ(engine.verify(), "");
  engine.clear_cache();
  return out;
}

// The engine on the CUDA backend: 48 seeded requests (greedy, top-p, penalties, logprobs,
// repeated prompts that hit the prefix cache) give the same tokens with device sampling on and
// off, logprobs within 1e-5.
TEST(CudaSampling, EngineSameTokensWithDeviceSamplingOnAndOff) {
  SKIP_WITHOUT_GPU();
  unsetenv("MIXSERVE_CUDA_SAMPLING");
  for (const std::string name : {"hybrid_a", "attention"}) {
    Fixture fx = load_fixture(name);
    std::mt19937 rng(11);
    std::vector<GenerateParams> reqs(48);
    for (size_t i = 0; i < reqs.size(); ++i) {
      GenerateParams& p = reqs[i];
      if (i % 4 == 3) {
        p.prompt = reqs[i - 1].prompt;  // a repeat: served from the cache's snapshot
      } else {
        const int len = std::uniform_int_distribution<int>(4, 30)(rng);
        for (int t = 0; t < len; ++t)
          p.prompt.push_back(std::uniform_int_distribution<int>(0, fx.cfg.vocab_size - 1)(rng));
      }
      p.max_tokens = 8;
      p.ignore_eos = true;
      p.seed = 500 + i;
      p.sampling.temperature = i % 5 == 0 ? 0.0f : 1.0f;
      p.sampling.top_p = i % 2 ? 0.9f : 1.0f;
      p.sampling.top_k = i % 3 == 0 ? 20 : 0;
      p.sampling.repetition_penalty = i % 4 == 1 ? 1.2f : 1.0f;
      p.sampling.frequency_penalty = i % 6 == 2 ? 0.5f : 0.0f;
      p.sampling.logprobs = i % 7 == 0 ? 3 : 0;
      p.return_logprob = i % 2 == 0;
    }
    EngineOptions opts;
    opts.prefill_chunk = 8;
    opts.step_token_budget = 64;
    opts.cache_entries = 16;
    opts.cache_min_tokens = 4;
    auto on = run_engine(fx, true, reqs, opts), off = run_engine(fx, false, reqs, opts);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_EQ(on[i].size(), off[i].size()) << name << " request " << i;
      for (size_t t = 0; t < on[i].size(); ++t) {
        EXPECT_EQ(on[i][t].token, off[i][t].token) << name << " request " << i << " token " << t;
        ASSERT_EQ(on[i][t].logprobs.size(), off[i][t].logprobs.size());
        for (size_t j = 0; j < on[i][t].logprobs.size(); ++j) {
          EXPECT_NEAR(on[i][t].logprobs[j].logprob, off[i][t].logprobs[j].logprob, 1e-5);
          EXPECT_EQ(on[i][t].logprobs[j].top.size(), off[i][t].logprobs[j].top.size());
        }
      }
    }
  }
}

}  // namespace
}  // namespace mixserve::testing
