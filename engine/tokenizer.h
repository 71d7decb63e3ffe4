// Text <-> token ids. Two families, each read and run by our own code (docs/tokenizer.md says
// why): sentencepiece models (tokenizer.model: BPE or unigram, with the model's normalizer) in
// engine/tokenizer/sentencepiece.*, and Hugging Face tokenizers (tokenizer.json, or GPT-2's
// vocab.json + merges.txt: BPE, byte-level or with byte fallback) in engine/tokenizer/hf_*.
// Which one a model directory uses, and its bos/eos/stop tokens, is decided in
// engine/tokenizer_dir.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mixserve {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Loads a sentencepiece model (tokenizer.model); throws ModelError naming the file.
  static std::unique_ptr<Tokenizer> load(const std::string& path);

  // The text's ids alone, as the oracle's encode without a template: sentencepiece's
  // EncodeAsIds, Hugging Face's encode(text, add_special_tokens=False). BOS is the caller's.
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Special tokens (sentencepiece control pieces, tokenizer.json's special added tokens) are
  // skipped, as vLLM's skip_special_tokens=True does. Incomplete UTF-8 at any point reads as
  // U+FFFD, as the oracle renders it. Throws std::out_of_range for an id outside the vocabulary.
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const {
    return decode(ids.data(), ids.size());
  }
  virtual int vocab_size() const = 0;  // ids are [0, vocab_size), added tokens included
  virtual int bos_id() const = 0;      // the tokenizer's own notion; −1 when it has none
  virtual int eos_id() const = 0;
  virtual int unk_id() const = 0;
  virtual std::string id_to_piece(int32_t id) const = 0;  // throws std::out_of_range like decode
  // The id of a piece or added token spelled exactly so ("<|endoftext|>", "</s>"); −1 if none.
  virtual int32_t piece_to_id(std::string_view piece) const = 0;
  virtual bool is_special(int32_t id) const = 0;  // skipped by decode
  // What the model directory's tokenizer is, as /v1/models and ListModels report it:
  // "sentencepiece-bpe", "sentencepiece-unigram", "tokenizer.json-bpe", "gpt2-vocab-merges".
  virtual std::string kind() const = 0;
  // The ids the tokenizer's own post-processor puts before one sequence (tokenizer.json's
  // TemplateProcessing "single", e.g. Llama-3's <|begin_of_text|>); sentencepiece has none.
  virtual std::vector<int32_t> template_prefix() const { return {}; }
  // The token on its own as OpenAI's logprobs show it: its text as it reads inside a sequence
  // (" of", with the leading space), and a byte that is not a character by itself as
  // "bytes:\\xe2". Precomputed, so streaming logprobs costs a lookup per token.
  virtual const std::string& token_text(int32_t id) const = 0;  // throws std::out_of_range
};

// Streams text as tokens arrive. Each delta is decode(window) minus decode(window without the
// newest tokens), the window starting a few tokens back (vLLM's prefix/read offsets), so
// sentencepiece's stripping of the first piece's leading space (▁) applies to both sides alike
// and cancels. A token whose decode ends in U+FFFD is held: it is an incomplete UTF-8 sequence
// from byte-fallback tokens (<0xE2>...), emitted once the character is complete. So the text
// emitted so far is always decode(context + ids) minus decode(context), less any incomplete
// character at the end, and every delta is valid UTF-8.
class IncrementalDetokenizer {
 public:
  // context: the prompt's ids, so the first delta keeps its leading space ("Hi" + " there").
  IncrementalDetokenizer(const Tokenizer& tok, const std::vector<int32_t>& context);
  std::string push(int32_t id);  // the text this token completes ("" while it is held)
  std::string flush();           // what is still held at the end (incomplete bytes as U+FFFD)

 private:
  std::string window_text() const;  // decode(ids_[prefix_, end))
  // The text of ids_[read_, end) given window_text(); moves the window on past it.
  std::string emit(const std::string& window_text);

  const Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0;  // the window starts here
  size_t read_ = 0;    // text up to here has been emitted
};

}  // namespace mixserve
