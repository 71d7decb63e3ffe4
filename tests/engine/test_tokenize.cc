// Tokenization on the engine's side (engine/tokenize.h): a text prompt is encoded by the engine
// exactly as the model's tokenizer encodes it, truncation keeps the last tokens, every refusal
// names the field at fault, logprobs' tokens come with their texts, and /detokenize's check.
#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/tokenize.h"
#include "engine/tokenizer.h"

namespace mixserve::testing {
namespace {

const LoadedModel& default_model() {  // the shipped default model: sentencepiece, 128 tokens
  static const LoadedModel m = load_model_dir(std::string(MIXSERVE_SOURCE_DIR) + "/models/default");
  return m;
}

std::unique_ptr<Engine> make_engine(const LoadedModel& m) {
  CpuBackendOptions o;
  o.pool_bytes = 8 << 20;
  o.threads = 1;
  return std::make_unique<Engine>(m, std::make_unique<CpuBackend>(m.config, *m.weights, o));
}

struct SubmitOutcome {
  SubmitResult submitted;
  std::vector<TokenOutput> events;
};

SubmitOutcome run(Engine& e, const GenerateParams& p) {
  SubmitOutcome r;
  bool done = false;  // the sink runs inside e.step(), on this thread
  r.submitted = e.submit(p, [&](TokenOutput&& o) {
    done = o.finish != FinishReason::kNone;
    r.events.push_back(std::move(o));
  });
  while (r.submitted.status == SubmitStatus::kOk && !done) e.step();
  return r;
}

TEST(Tokenize, ATextPromptIsWhatTheModelsTokenizerMakesOfIt) {
  const LoadedModel& m = default_model();
  ASSERT_TRUE(m.tokenizer);
  const std::string text = "In the beginning God created the heaven and the earth.";
  GenerateParams p;
  p.prompt_text = text;
  ASSERT_FALSE(resolve_prompt(m, p));
  EXPECT_EQ(p.prompt, m.encode_prompt(text));
  EXPECT_FALSE(p.prompt_text) << "the text is consumed";
  ASSERT_FALSE(resolve_prompt(m, p)) << "resolving twice changes nothing";
  EXPECT_EQ(p.prompt, m.encode_prompt(text));

  GenerateParams raw;
  raw.prompt_text = text;
  raw.add_special_tokens = false;
  ASSERT_FALSE(resolve_prompt(m, raw));
  EXPECT_EQ(raw.prompt, m.encode_text(text));
  EXPECT_EQ(encode(m, text, false), m.encode_text(text));
  EXPECT_EQ(encode(m, text, true), m.encode_prompt(text));

  GenerateParams cut;
  cut.prompt_text = text;
  cut.truncate_prompt_tokens = 3;
  ASSERT_FALSE(resolve_prompt(m, cut));
  const std::vector<int32_t> all = m.encode_prompt(text);
  ASSERT_GT(all.size(), 3u);
  EXPECT_EQ(cut.prompt, std::vector<int32_t>(all.end() - 3, all.end()));
}

TEST(Tokenize, RefusalsNameTheFieldAtFault) {
  const LoadedModel& m = default_model();
  GenerateParams both;
  both.prompt = {1, 2};
  both.prompt_text = "x";
  auto e = resolve_prompt(m, both);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");

  GenerateParams nothing;
  nothing.prompt_text = "";
  nothing.add_special_tokens = false;
  e = resolve_prompt(m, nothing);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "the prompt encodes to no tokens");

  GenerateParams negative;
  negative.prompt = {5};
  negative.truncate_prompt_tokens = -1;
  e = resolve_prompt(m, negative);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "truncate_prompt_tokens");

  const LoadedModel bare =
      load_model_dir(std::string(MIXSERVE_SOURCE_DIR) + "/tests/golden/aft_simple");
  ASSERT_FALSE(bare.tokenizer);
  GenerateParams text;
  text.prompt_text = "hello";
  e = resolve_prompt(bare, text);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "model \"aft_simple\" has no tokenizer; send token ids instead");
  std::string out;
  e = detokenize(bare, {1, 2}, out);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "model");
}

TEST(Tokenize, TheEngineChecksTheEncodedPromptAgainstTheContext) {
  const LoadedModel& m = default_model();
  auto engine = make_engine(m);
  std::string long_text;
  for (int i = 0; i < 200; ++i) long_text += "and the earth was without form ";
  GenerateParams p;
  p.prompt_text = long_text;
  const int64_t n = static_cast<int64_t>(m.encode_prompt(long_text).size());
  ASSERT_GE(n, m.config.max_seq_len);
  auto e = engine->prepare(p);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");
  EXPECT_EQ(e->message, "the prompt has " + std::to_string(n) + " tokens; model \"" + m.id +
                            "\" has a context of " + std::to_string(m.config.max_seq_len) +
                            " tokens, and at least one must be left to generate");
  SubmitResult r = engine->submit(p, [](TokenOutput&&) {});
  EXPECT_EQ(r.status, SubmitStatus::kInvalid);
  EXPECT_EQ(r.param, "prompt");

  GenerateParams q;
  q.prompt_text = "In the beginning";
  q.max_tokens = static_cast<int32_t>(m.config.max_seq_len);
  e = engine->prepare(q);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "max_tokens");
  EXPECT_EQ(engine->stats().waiting, 0) << "nothing was queued";
}

TEST(Tokenize, TextAndIdsGiveTheSameTokensAndLogprobsCarryTokenTexts) {
  const LoadedModel& m = default_model();
  auto engine = make_engine(m);
  const std::string text = "And God said, Let there be light";
  GenerateParams by_text;
  by_text.prompt_text = text;
  by_text.max_tokens = 8;
  by_text.seed = 7;
  by_text.sampling.logprobs = 3;
  GenerateParams by_ids = by_text;
  by_ids.prompt_text.reset();
  by_ids.prompt = m.encode_prompt(text);

  const SubmitOutcome a = run(*engine, by_text), b = run(*engine, by_ids);
  ASSERT_EQ(a.submitted.status, SubmitStatus::kOk);
  ASSERT_EQ(b.submitted.status, SubmitStatus::kOk);
  EXPECT_EQ(a.submitted.prompt_tokens, static_cast<int32_t>(by_ids.prompt.size()));
  std::vector<int32_t> ta, tb;
  for (const auto& o : a.events)
    if (o.token >= 0) ta.push_back(o.token);
  for (const auto& o : b.events)
    if (o.token >= 0) tb.push_back(o.token);
  EXPECT_EQ(ta, tb);
  ASSERT_FALSE(ta.empty());
  size_t labelled = 0;
  for (const auto& o : a.events)
    for (const SampledToken& s : o.logprobs) {
      ++labelled;
      EXPECT_EQ(s.text, m.tokenizer->token_text(s.token));
      ASSERT_EQ(s.top_text.size(), s.top.size());
      for (size_t i = 0; i < s.top.size(); ++i)
        EXPECT_EQ(s.top_text[i], m.tokenizer->token_text(s.top[i].first));
    }
  EXPECT_EQ(labelled, ta.size());
}

TEST(Tokenize, DetokenizeDecodesAndRefusesIdsOutsideTheVocabulary) {
  const LoadedModel& m = default_model();
  const std::vector<int32_t> ids = m.encode_text("Let there be light");
  std::string text;
  ASSERT_FALSE(detokenize(m, ids, text));
  EXPECT_EQ(text, m.tokenizer->decode(ids));
  const auto pieces = token_pieces(m, ids);
  ASSERT_EQ(pieces.size(), ids.size());
  EXPECT_EQ(pieces[0], m.tokenizer->id_to_piece(ids[0]));
  auto e = detokenize(m, {1, m.tokenizer->vocab_size()}, text);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tokens");
  e = detokenize(m, {-1}, text);
  ASSERT_TRUE(e);
}

}  // namespace
}  // namespace mixserve::testing
