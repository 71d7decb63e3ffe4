#include "engine/tokenize.h"

namespace mixserve {

std::vector<int32_t> encode(const LoadedModel& model, const std::string& text,
                            bool add_special_tokens) {
  return add_special_tokens ? model.encode_prompt(text) : model.encode_text(text);
}

std::optional<RequestError> resolve_prompt(const LoadedModel& model, GenerateParams& params) {
  if (params.prompt_text) {
    if (!params.prompt.empty())
      return RequestError{"give exactly one of prompt (text) or prompt token ids", "prompt"};
    if (!model.tokenizer)
      return RequestError{"model \"" + model.id + "\" has no tokenizer; send token ids instead",
                          "prompt"};
    std::vector<int32_t> ids = encode(model, *params.prompt_text, params.add_special_tokens);
    if (ids.empty()) return RequestError{"the prompt encodes to no tokens", "prompt"};
    params.prompt = std::move(ids);
    params.prompt_text.reset();
  }
  if (params.truncate_prompt_tokens < 0)
    return RequestError{"truncate_prompt_tokens must be at least 1", "truncate_prompt_tokens"};
  const size_t keep = static_cast<size_t>(params.truncate_prompt_tokens);
  if (keep > 0 && params.prompt.size() > keep)
    params.prompt.erase(params.prompt.begin(), params.prompt.end() - static_cast<ptrdiff_t>(keep));
  return std::nullopt;
}

std::vector<std::string> token_pieces(const LoadedModel& model, const std::vector<int32_t>& ids) {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (int32_t id : ids) pieces.push_back(model.tokenizer->id_to_piece(id));
  return pieces;
}

std::optional<RequestError> detokenize(const LoadedModel& model, const std::vector<int32_t>& ids,
                                       std::string& text) {
  const Tokenizer* tok = model.tokenizer.get();
  if (!tok) return RequestError{"model \"" + model.id + "\" has no tokenizer", "model"};
  for (int32_t id : ids)
    if (id < 0 || id >= tok->vocab_size())
      return RequestError{"token " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(tok->vocab_size()) + ")",
                          "tokens"};
  text = tok->decode(ids);
  return std::nullopt;
}

}  // namespace mixserve
