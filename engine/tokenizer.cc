// The one file that includes sentencepiece (see tokenizer.h).
#include "engine/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <stdexcept>

#include "engine/model_error.h"

namespace mixserve {

namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) {
    const auto status = sp_.Load(path);
    if (!status.ok())
      throw ModelError(path + ": cannot load sentencepiece model (" + status.ToString() + ")");
  }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) throw std::runtime_error("cannot encode text: " + status.ToString());
    return {ids.begin(), ids.end()};
  }
  std::string decode(const int32_t* ids, size_t n) const override {
    for (size_t i = 0; i < n; ++i) check(ids[i]);
    std::string out;
    const auto status = sp_.Decode(std::vector<int>(ids, ids + n), &out);
    if (!status.ok()) throw std::runtime_error("cannot decode ids: " + status.ToString());
    return out;
  }
  int vocab_size() const override { return sp_.GetPieceSize(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  int unk_id() const override { return sp_.unk_id(); }
  std::string id_to_piece(int32_t id) const override {
    check(id);
    return sp_.IdToPiece(id);
  }

 private:
  // sentencepiece aborts the process on an out-of-range id; we throw instead.
  void check(int32_t id) const {
    if (id < 0 || id >= sp_.GetPieceSize())
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(sp_.GetPieceSize()) + ")");
  }

  sentencepiece::SentencePieceProcessor sp_;
};

// sentencepiece renders every byte of an incomplete UTF-8 sequence as U+FFFD.
bool ends_with_replacement_char(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

// Context tokens kept before the first generated one, so that the first delta keeps the leading
// space sentencepiece strips at the start of a decode. (A prompt is text, so its tokens never
// end inside a character.)
constexpr size_t kContextTokens = 6;
// The window's ids before prefix_ are no longer needed; drop them now and then.
constexpr size_t kTrimAt = 64;

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok,
                                               const std::vector<int32_t>& context)
    : tok_(tok) {
  const size_t keep = std::min(context.size(), kContextTokens);
  ids_.assign(context.end() - static_cast<std::ptrdiff_t>(keep), context.end());
  tok_.decode(ids_);  // throws now for an out-of-range id rather than at the first push
  prefix_ = 0;
  read_ = ids_.size();
}

std::string IncrementalDetokenizer::emit(const std::string& window_text) {
  const std::string before = tok_.decode(ids_.data() + prefix_, read_ - prefix_);
  if (window_text.size() <= before.size()) return "";  // e.g. a control token: nothing new
  std::string delta = window_text.substr(before.size());
  prefix_ = read_;
  read_ = ids_.size();
  if (prefix_ >= kTrimAt) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_));
    read_ -= prefix_;
    prefix_ = 0;
  }
  return delta;
}

std::string IncrementalDetokenizer::window_text() const {
  return tok_.decode(ids_.data() + prefix_, ids_.size() - prefix_);
}

std::string IncrementalDetokenizer::push(int32_t id) {
  tok_.id_to_piece(id);  // range check before the id joins the window
  ids_.push_back(id);
  const std::string now = window_text();
  if (ends_with_replacement_char(now)) return "";  // an incomplete character: hold it
  return emit(now);
}

std::string IncrementalDetokenizer::flush() {
  return emit(window_text());
}

}  // namespace mixserve
