// Where mixserve-loadgen's prompts come from: random token ids or random KJV-like words of drawn
// lengths, lines of a text file, or passages of the King James Bible (Debian's bible-kjv).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace mixserve::client {

struct Prompt {
  std::string text;  // used when ids is empty
  std::vector<int32_t> ids;
  uint32_t max_tokens = 0;
  uint32_t expected_input_len = 0;  // what was aimed at; the report uses the server's usage
};

// Lengths drawn uniformly from [len * (1 - range_ratio), len * (1 + range_ratio)] (vLLM's random
// dataset), never below 1.
struct Lengths {
  int input_len = 32;
  int output_len = 32;
  double range_ratio = 0.0;
  int draw(int len, std::mt19937_64& rng) const;
};

class PromptSource {
 public:
  virtual ~PromptSource() = default;
  virtual Prompt next(std::mt19937_64& rng) = 0;
};

// Token ids drawn uniformly from [first_id, vocab_size): no server-side tokenization at all.
std::unique_ptr<PromptSource> random_ids_prompts(Lengths lengths, uint32_t vocab_size,
                                                 int32_t first_id);
// Words drawn from `words` (KJV unigram frequencies when the list is the corpus' words), about
// input_len / tokens_per_word of them.
std::unique_ptr<PromptSource> random_text_prompts(Lengths lengths, std::vector<std::string> words,
                                                  double tokens_per_word);
// Runs of consecutive verses from a random verse on, cut to about input_len tokens.
std::unique_ptr<PromptSource> kjv_prompts(Lengths lengths, std::vector<std::string> verses,
                                          double tokens_per_word);
// One prompt per non-empty line, in file order, starting over at the end; output lengths drawn.
std::unique_ptr<PromptSource> file_prompts(Lengths lengths, const std::string& path);

// The King James Bible, one verse per entry without its reference (`bible -f Gen1:1-Rev22:21`).
// Throws std::runtime_error when the bible program is missing.
std::vector<std::string> load_kjv_verses();
// Every word of the verses, in order: drawing uniformly from it follows the corpus' frequencies.
std::vector<std::string> words_of(const std::vector<std::string>& verses);
// A few hundred common KJV words, for random text when the bible program is absent.
std::vector<std::string> fallback_words();

}  // namespace mixserve::client
