// Text <-> token ids through sentencepiece, behind an interface of ours: Debian's
// sentencepiece_processor.h clashes with Abseil (DESIGN §11), so it is included in exactly one
// .cc (tokenizer.cc) and never in a header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mixserve {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Loads a sentencepiece model; throws ModelError naming the file.
  static std::unique_ptr<Tokenizer> load(const std::string& path);

  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const {
    return decode(ids.data(), ids.size());
  }
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // −1 when the model has none
  virtual int eos_id() const = 0;
  virtual std::string id_to_piece(int32_t id) const = 0;
};

// Streams text as tokens arrive, never splitting a UTF-8 character (byte-fallback tokens are
// held until the character is complete) and keeping the leading spaces sentencepiece strips
// from the start of a decode: each delta is decode(window) minus decode(window without the
// newest tokens), the window starting a few tokens back (vLLM's prefix/read offsets).
class IncrementalDetokenizer {
 public:
  // context: the prompt's ids, so the first delta keeps its leading space.
  IncrementalDetokenizer(const Tokenizer& tok, const std::vector<int32_t>& context);
  std::string push(int32_t id);  // the text this token completes ("" while it is held)
  std::string flush();           // what is still held at the end (incomplete bytes as U+FFFD)

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0, read_ = 0;
};

}  // namespace mixserve
