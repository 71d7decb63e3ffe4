// The Tokenizer of a tokenizer.json or a vocab.json + merges.txt pair: Hugging Face's pipeline
// (added tokens, normalizer, pre-tokenizer, BPE, decoder) over the parts in hf_internal.h.
#pragma once

#include "engine/tokenizer.h"
#include "engine/tokenizer/hf/hf_internal.h"

namespace mixserve::hf {

class HfTokenizer : public Tokenizer {
 public:
  // Everything but the derived tables; finish() checks the ids and builds them (throws
  // std::runtime_error with the reason).
  std::string kind_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::vector<int32_t> prefix_;
  int32_t bos_ = -1, eos_ = -1;
  void finish();

  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int bos_id() const override { return bos_; }
  int eos_id() const override { return eos_; }
  int unk_id() const override { return model_->unk_id(); }
  std::string id_to_piece(int32_t id) const override { return tokens_.at(check(id)); }
  int32_t piece_to_id(std::string_view piece) const override;
  bool is_special(int32_t id) const override { return special_.at(check(id)) != 0; }
  std::string kind() const override { return kind_; }
  std::vector<int32_t> template_prefix() const override { return prefix_; }
  const std::string& token_text(int32_t id) const override { return texts_.at(check(id)); }

 private:
  size_t check(int32_t id) const;
  void encode_text(std::string_view s, bool at_start, std::vector<int32_t>& ids) const;
  void pre_tokenize(std::string_view s, bool at_start, std::vector<int32_t>& ids) const;
  AddedMatcher raw_, normalized_;
  std::vector<std::string> tokens_;  // by id
  std::vector<uint8_t> special_;
  std::vector<std::string> texts_;
  std::unordered_map<std::string, int32_t> added_ids_;
};

}  // namespace mixserve::hf
