// tokenizers' pre-tokenizers: ByteLevel, Split, Sequence, Digits, Metaspace, Whitespace,
// WhitespaceSplit. Each splits a piece of text into smaller ones, as PreTokenizedString::split
// does (empty pieces dropped).
#include <stdexcept>

#include "engine/tokenizer/hf/hf_internal.h"

namespace mixserve::hf {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void split(std::string_view piece, bool at_start, const Emit& emit) const override {
    std::string prefixed;
    if (add_prefix_space_ && !piece.empty() && piece[0] != ' ') {
      prefixed = " ";
      prefixed += piece;
      piece = prefixed;
    }
    std::string mapped;
    const auto out = [&](std::string_view s, bool start) {
      mapped.clear();
      for (char c : s) mapped += byte_to_symbol(static_cast<uint8_t>(c));
      emit(mapped, start);
    };
    if (!use_regex_) {
      if (!piece.empty()) out(piece, at_start);
      return;
    }
    // GPT-2's pattern matches every character, so the Isolated pieces are its matches.
    thread_local std::vector<Span> spans;
    spans.clear();
    gpt2_split(piece, spans);
    for (const Span& sp : spans)
      out(piece.substr(sp.first, sp.second - sp.first), at_start && sp.first == 0);
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class SplitPre : public PreTokenizer {
 public:
  SplitPre(Pattern p, Behavior b) : p_(std::move(p)), b_(b) {}
  void split(std::string_view piece, bool at_start, const Emit& emit) const override {
    std::vector<Span> spans;
    split_text(piece, p_, b_, spans);
    for (const Span& sp : spans)
      emit(piece.substr(sp.first, sp.second - sp.first), at_start && sp.first == 0);
  }

 private:
  Pattern p_;
  Behavior b_;
};

class Metaspace : public PreTokenizer {
 public:
  Metaspace(std::string replacement, int scheme, bool split)
      : rep_(std::move(replacement)), scheme_(scheme), split_(split) {
    size_t i = 0;
    rep_cp_ = next_cp(rep_, i);
    p_.chars = [c = rep_cp_](char32_t x) { return x == c; };
  }
  void split(std::string_view piece, bool at_start, const Emit& emit) const override {
    std::string s;
    for (char c : piece) {
      if (c == ' ')
        s += rep_;
      else
        s += c;
    }
    const bool starts = s.compare(0, rep_.size(), rep_) == 0;
    if (!s.empty() && !starts && (scheme_ == 0 || (scheme_ == 1 && at_start))) s.insert(0, rep_);
    if (!split_) {
      if (!s.empty()) emit(s, at_start);
      return;
    }
    std::vector<Span> spans;
    split_text(s, p_, Behavior::MergedWithNext, spans);
    for (const Span& sp : spans)
      emit(std::string_view(s).substr(sp.first, sp.second - sp.first), at_start && sp.first == 0);
  }

 private:
  std::string rep_;
  char32_t rep_cp_;
  int scheme_;  // 0 always, 1 first, 2 never
  bool split_;
  Pattern p_;
};

// Whitespace: the matches of `\w+|[^\w\s]+`, which the Rust library runs in the regex crate
// (not Oniguruma), so \w is regex-syntax's (Alphabetic, marks, Nd, Pc, Join_Control) and \s is
// White_Space: runs of word characters and runs of other non-space characters.
class Whitespace : public PreTokenizer {
 public:
  void split(std::string_view piece, bool at_start, const Emit& emit) const override {
    size_t i = 0, run = 0;
    int run_class = -1;  // 0 word, 1 other
    const auto flush = [&](size_t end) {
      if (run_class >= 0) emit(piece.substr(run, end - run), at_start && run == 0);
      run_class = -1;
    };
    while (i < piece.size()) {
      const size_t s = i;
      const char32_t c = next_cp(piece, i);
      const int cls = is_word_char(c) ? 0 : is_whitespace(c) ? 2 : 1;
      if (cls == run_class) continue;
      flush(s);
      if (cls != 2) run_class = cls, run = s;
    }
    flush(piece.size());
  }
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
  void split(std::string_view piece, bool at_start, const Emit& emit) const override {
    run(0, piece, at_start, emit);
  }

 private:
  void run(size_t k, std::string_view piece, bool at_start, const Emit& emit) const {
    if (k == v_.size()) {
      emit(piece, at_start);
      return;
    }
    v_[k]->split(piece, at_start, [&](std::string_view p, bool s) { run(k + 1, p, s, emit); });
  }
  std::vector<std::unique_ptr<PreTokenizer>> v_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_byte_level(bool add_prefix_space, bool use_regex) {
  return std::make_unique<ByteLevel>(add_prefix_space, use_regex);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j) {
  const std::string type = j.at("type").get<std::string>();
  if (type == "ByteLevel")
    return make_byte_level(j.value("add_prefix_space", true), j.value("use_regex", true));
  if (type == "Split") {
    Pattern p;
    p.regex = make_pattern_regex(j.at("pattern"));
    p.invert = j.value("invert", false);
    return std::make_unique<SplitPre>(std::move(p),
                                      parse_behavior(j.at("behavior").get<std::string>()));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> v;
    for (const auto& p : j.at("pretokenizers")) v.push_back(make_pre_tokenizer(p));
    return std::make_unique<SequencePreTokenizer>(std::move(v));
  }
  if (type == "Digits") {
    Pattern p;
    p.chars = is_numeric;
    return std::make_unique<SplitPre>(std::move(p), j.value("individual_digits", false)
                                                        ? Behavior::Isolated
                                                        : Behavior::Contiguous);
  }
  if (type == "Metaspace") {
    int scheme = 0;
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "always")
        scheme = 0;
      else if (s == "first")
        scheme = 1;
      else if (s == "never")
        scheme = 2;
      else
        throw std::runtime_error("unsupported Metaspace prepend_scheme \"" + s + "\"");
    } else if (j.contains("add_prefix_space")) {
      scheme = j["add_prefix_space"].get<bool>() ? 0 : 2;
    }
    const std::string rep = j.value("replacement", std::string("\xE2\x96\x81"));
    if (rep.empty()) throw std::runtime_error("Metaspace replacement is empty");
    return std::make_unique<Metaspace>(rep, scheme, j.value("split", true));
  }
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") {
    Pattern p;
    p.chars = is_whitespace;
    return std::make_unique<SplitPre>(std::move(p), Behavior::Removed);
  }
  throw std::runtime_error("unsupported pre_tokenizer type \"" + type + "\"");
}

}  // namespace mixserve::hf
