// The shipped default model as the request fuzzers validate against: its real config.json and
// tokenizer, with an engine over the null backend (validation reads only the config; no weights,
// no engine thread). Plus the properties every request accepted by validate_request must have.
#pragma once

#include <memory>
#include <string>

#include "engine/chat_template.h"
#include "engine/engine.h"
#include "engine/model_config.h"
#include "engine/null_backend.h"
#include "engine/tokenizer.h"
#include "fuzz/fuzz_check.h"
#include "server/api.h"

namespace mixserve::fuzz {

inline ServedModel& served_model() {
  static ServedModel* served = [] {
    auto s = new ServedModel;
    s->model.id = "default";
    s->model.dir = MIXSERVE_SOURCE_DIR "/models/default";
    s->model.config = load_model_config(s->model.dir + "/config.json");
    s->model.tokenizer = Tokenizer::load(MIXSERVE_SOURCE_DIR "/models/tokenizer.model");
    s->engine = std::make_unique<Engine>(
        s->model, std::make_unique<NullBackend>(s->model.config, int64_t{1} << 20));
    s->backend = "null";
    // ChatML, so that chat bodies get rendered, encoded and validated too.
    s->model.bos_token = "<s>";
    s->model.set_chat_template(
        "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        "fuzz/chatml.jinja");
    return s;
  }();
  return *served;
}

// A small max_tokens cap, so that the cap's check is reached too.
inline const ServerLimits& fuzz_limits() {
  static const ServerLimits limits{1 << 20, 4096, 200};
  return limits;
}

// What the engine may rely on for a request that passed validation.
inline void check_validated(const ApiRequest& req, const GenerateParams& p) {
  const ServedModel& served = served_model();
  const ModelConfig& cfg = served.model.config;
  const int64_t prompt = static_cast<int64_t>(p.prompt.size());
  FUZZ_CHECK(prompt >= 1 && prompt < cfg.max_seq_len);
  for (int32_t t : p.prompt) FUZZ_CHECK(t >= 0 && t < cfg.vocab_size);
  FUZZ_CHECK(p.max_tokens >= 1 && p.max_tokens <= fuzz_limits().max_tokens_cap);
  FUZZ_CHECK(prompt + p.max_tokens <= cfg.max_seq_len);
  for (const std::string& s : p.stop) FUZZ_CHECK(!s.empty() && is_utf8(s));
  for (int32_t t : p.stop_token_ids) FUZZ_CHECK(t >= 0 && t < cfg.vocab_size);
  FUZZ_CHECK(p.deadline.has_value() == req.timeout_s.has_value());
  FUZZ_CHECK(!served.engine->validate(p));
  FUZZ_CHECK(!p.prompt_text);  // encoded by the engine (Engine::prepare)
  std::vector<int32_t> want;   // the prompt as given, encoded, truncated
  if (req.chat) {
    want = p.prompt;  // rendered by the template: checked by the template's own tests
  } else if (req.prompt_text) {
    FUZZ_CHECK(is_utf8(*req.prompt_text));
    want = req.add_special_tokens ? served.model.encode_prompt(*req.prompt_text)
                                  : served.model.encode_text(*req.prompt_text);
  } else {
    FUZZ_CHECK(req.prompt_ids.has_value());
    want = *req.prompt_ids;
  }
  if (req.truncate_prompt_tokens > 0 && want.size() > size_t(req.truncate_prompt_tokens))
    want.erase(want.begin(), want.end() - req.truncate_prompt_tokens);
  FUZZ_CHECK(p.prompt == want);
  // Everything but the prompt and the deadline passes through unchanged.
  FUZZ_CHECK(p.max_tokens == req.params.max_tokens && p.stop == req.params.stop &&
             p.stop_token_ids == req.params.stop_token_ids && p.seed == req.params.seed &&
             p.priority == req.params.priority && p.session == req.params.session);
}

inline void check_rejected(const ApiError& e) {
  FUZZ_CHECK(!e.message.empty());
  FUZZ_CHECK(e.code == ApiCode::kInvalidArgument);
}

}  // namespace mixserve::fuzz
