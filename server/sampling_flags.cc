#include "server/sampling_flags.h"

namespace mixserve {

void add_sampling_flags(CliArgs& a) {
  a.flag("max-tokens", "64", "tokens to generate at most");
  a.flag("temperature", "1.0", "sampling temperature; 0 is greedy");
  a.flag("top-k", "0", "keep the k most likely tokens (0: off)");
  a.flag("top-p", "1.0", "keep the smallest set of tokens with this much probability (1: off)");
  a.flag("min-p", "0.0", "drop tokens below min-p times the top probability (0: off)");
  a.flag("repetition-penalty", "1.0", "divide logits of tokens seen in prompt or output (1: off)");
  a.flag("presence-penalty", "0.0", "subtract from logits of tokens already generated");
  a.flag("frequency-penalty", "0.0", "subtract this times the count of each generated token");
  a.flag("seed", "", "seed of the request's sampler (unset: random)");
  a.flag("stop", "", "stop string (not included in the output)", true);
  a.flag("stop-token-id", "", "token id that ends generation", true);
  a.toggle("ignore-eos", "keep generating past the end-of-sequence token");
  a.flag("logprobs", "0", "report this many top alternatives per token (0..20)");
  a.flag("priority", "0", "scheduling priority; lower runs first");
}

GenerateParams sampling_from_flags(const CliArgs& a) {
  GenerateParams p;
  p.max_tokens = static_cast<int32_t>(a.integer("max-tokens"));
  p.sampling.temperature = static_cast<float>(a.number("temperature"));
  p.sampling.top_k = static_cast<int>(a.integer("top-k"));
  p.sampling.top_p = static_cast<float>(a.number("top-p"));
  p.sampling.min_p = static_cast<float>(a.number("min-p"));
  p.sampling.repetition_penalty = static_cast<float>(a.number("repetition-penalty"));
  p.sampling.presence_penalty = static_cast<float>(a.number("presence-penalty"));
  p.sampling.frequency_penalty = static_cast<float>(a.number("frequency-penalty"));
  p.sampling.logprobs = static_cast<int>(a.integer("logprobs"));
  if (!a.str("seed").empty()) p.seed = static_cast<uint64_t>(a.integer("seed"));
  for (const std::string& s : a.all("stop")) p.stop.push_back(s);
  for (const std::string& s : a.all("stop-token-id")) p.stop_token_ids.push_back(std::stoi(s));
  p.ignore_eos = a.on("ignore-eos");
  p.priority = static_cast<int32_t>(a.integer("priority"));
  return p;
}

}  // namespace mixserve
