// The one file that includes sentencepiece (see tokenizer.h).
#include "engine/tokenizer.h"

#include <sentencepiece_processor.h>

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
    sp_.Encode(text, &ids);
    return {ids.begin(), ids.end()};
  }
  std::string decode(const int32_t* ids, size_t n) const override {
    std::string out;
    sp_.Decode(std::vector<int>(ids, ids + n), &out);
    return out;
  }
  int vocab_size() const override { return sp_.GetPieceSize(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  std::string id_to_piece(int32_t id) const override { return sp_.IdToPiece(id); }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

bool ends_incomplete(const std::string& s) {  // sentencepiece renders partial UTF-8 as U+FFFD
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok,
                                               const std::vector<int32_t>& context)
    : tok_(tok) {
  const size_t keep = std::min<size_t>(context.size(), 6);
  ids_.assign(context.end() - keep, context.end());
  prefix_ = 0;
  read_ = ids_.size();
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  const std::string before = tok_.decode(ids_.data() + prefix_, read_ - prefix_);
  const std::string now = tok_.decode(ids_.data() + prefix_, ids_.size() - prefix_);
  if (now.size() <= before.size() || ends_incomplete(now)) return "";
  std::string delta = now.substr(before.size());
  prefix_ = read_;
  read_ = ids_.size();
  return delta;
}

std::string IncrementalDetokenizer::flush() {
  const std::string before = tok_.decode(ids_.data() + prefix_, read_ - prefix_);
  const std::string now = tok_.decode(ids_.data() + prefix_, ids_.size() - prefix_);
  prefix_ = read_ = ids_.size();
  return now.size() > before.size() ? now.substr(before.size()) : "";
}

}  // namespace mixserve
