#include "app/sampling_flags.h"

namespace mixserve {

void add_sampling_flags(CLI::App& app, SamplingFlags& f) {
  app.add_option("--max-tokens", f.max_tokens, "tokens to generate at most")
      ->check(cli::count())
      ->capture_default_str();
  app.add_option("--temperature", f.temperature, "sampling temperature; 0 is greedy")
      ->check(cli::number(0, 100))
      ->capture_default_str();
  app.add_option("--top-k", f.top_k, "keep the k most likely tokens (0: off)")
      ->check(cli::non_negative())
      ->capture_default_str();
  app.add_option("--top-p", f.top_p,
                 "keep the smallest set of tokens with this much probability (1: off)")
      ->check(cli::number(0, 1, true))
      ->capture_default_str();
  app.add_option("--min-p", f.min_p, "drop tokens below min-p times the top probability (0: off)")
      ->check(cli::fraction())
      ->capture_default_str();
  app.add_option("--repetition-penalty", f.repetition_penalty,
                 "divide logits of tokens seen in prompt or output (1: off)")
      ->check(cli::number(0, 10, true))
      ->capture_default_str();
  app.add_option("--presence-penalty", f.presence_penalty,
                 "subtract from logits of tokens already generated")
      ->check(cli::number(-2, 2))
      ->capture_default_str();
  app.add_option("--frequency-penalty", f.frequency_penalty,
                 "subtract this times the count of each generated token")
      ->check(cli::number(-2, 2))
      ->capture_default_str();
  f.seed_flag = app.add_option("--seed", f.seed, "seed of the request's sampler (unset: random)")
                    ->check(cli::integer(0));
  cli::add_list(app, "--stop", f.stop, "stop string (not included in the output)");
  cli::add_list(app, "--stop-token-id", f.stop_token_ids,
                "token id that ends generation (a list: 1,2,3)")
      ->delimiter(',')
      ->check(cli::integer(0, cli::kIntMax));
  cli::add_bool(app, "--ignore-eos", f.ignore_eos,
                "keep generating past the end-of-sequence token");
  app.add_option("--logprobs", f.logprobs, "report this many top alternatives per token")
      ->check(cli::integer(0, 20))
      ->capture_default_str();
  app.add_option("--priority", f.priority, "scheduling priority; lower runs first")
      ->check(cli::integer(std::numeric_limits<int32_t>::min(), cli::kIntMax))
      ->capture_default_str();
}

GenerateParams SamplingFlags::params() const {
  GenerateParams p;
  p.max_tokens = max_tokens;
  p.sampling.temperature = static_cast<float>(temperature);
  p.sampling.top_k = top_k;
  p.sampling.top_p = static_cast<float>(top_p);
  p.sampling.min_p = static_cast<float>(min_p);
  p.sampling.repetition_penalty = static_cast<float>(repetition_penalty);
  p.sampling.presence_penalty = static_cast<float>(presence_penalty);
  p.sampling.frequency_penalty = static_cast<float>(frequency_penalty);
  p.sampling.logprobs = logprobs;
  if (seed_flag && seed_flag->count() > 0) p.seed = seed;
  p.stop = stop;
  p.stop_token_ids = stop_token_ids;
  p.ignore_eos = ignore_eos;
  p.priority = priority;
  return p;
}

}  // namespace mixserve
