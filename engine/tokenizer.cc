// The tokenizer factory and the streaming detokenizer shared by every tokenizer kind.
#include "engine/tokenizer.h"

#include <algorithm>

#include "engine/tokenizer/sentencepiece.h"

namespace mixserve {

namespace {

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
  return load_sentencepiece(path);
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
