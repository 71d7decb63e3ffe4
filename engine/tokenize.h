// Everything the front ends ask of a model's tokenizer, so that tokenization stays on the
// engine's side: a request's prompt text becomes ids here (Engine::submit calls resolve_prompt),
// the engine detokenizes what it generates and labels logprobs' tokens (SampledToken::text), and
// /tokenize, /detokenize and gRPC Tokenize call the functions below. Front ends hold text and ids
// and never call the Tokenizer (scripts/check-layout enforces it).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/model_dir.h"
#include "engine/request.h"

namespace mixserve {

// Text's ids: with the model's prompt prefix (BOS) when add_special_tokens, else with special
// tokens' texts read as those tokens. The model must have a tokenizer.
std::vector<int32_t> encode(const LoadedModel& model, const std::string& text,
                            bool add_special_tokens);

// Sets params.prompt from params.prompt_text when that is given (and clears the text), then keeps
// the last truncate_prompt_tokens ids. Fails when the model has no tokenizer, the text encodes to
// no tokens, or both forms are given.
std::optional<RequestError> resolve_prompt(const LoadedModel& model, GenerateParams& params);

// The tokenizer's piece for each id (/tokenize's token_strs, gRPC Tokenize's pieces). The model
// must have a tokenizer and the ids must come from it.
std::vector<std::string> token_pieces(const LoadedModel& model, const std::vector<int32_t>& ids);

// The text of ids (/detokenize). Fails when the model has no tokenizer or an id is outside its
// vocabulary.
std::optional<RequestError> detokenize(const LoadedModel& model, const std::vector<int32_t>& ids,
                                       std::string& text);

}  // namespace mixserve
