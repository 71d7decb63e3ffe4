// A sentencepiece BPE tokenizer written from the model file: mixserve does not link
// libsentencepiece. Debian's libsentencepiece carries its own copy of protobuf 3.14 and exports
// its symbols; in a process that also loads libprotobuf 3.21 (every gRPC server) the two collide
// at start-up and the process dies (see docs/tokenizer.md). The model file is a small protobuf
// that we read field by field; encoding is sentencepiece's BPE (highest-scoring adjacent pair
// merged first, ties to the left), with byte fallback; decoding follows sentencepiece's rules.
// tests/engine/test_tokenizer.cc checks both against the Python sentencepiece on fixtures.
#include "engine/tokenizer/sentencepiece.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "engine/model_error.h"

namespace mixserve {

namespace {

// --- the protobuf wire format, just what a ModelProto needs ---
struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  const std::string& file;
  [[noreturn]] void bad() const { throw ModelError(file + ": not a sentencepiece model (malformed protobuf)"); }
  bool done() const { return p >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) bad();
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad();
  }
  Wire sub() {  // a length-delimited field as its own reader
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end - p)) bad();
    Wire w{p, p + n, file};
    p += n;
    return w;
  }
  std::string bytes() {
    Wire w = sub();
    return std::string(reinterpret_cast<const char*>(w.p), w.end - w.p);
  }
  float fixed32() {
    if (end - p < 4) bad();
    float f;
    std::memcpy(&f, p, 4);
    p += 4;
    return f;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); break;
      case 1: if (end - p < 8) bad(); p += 8; break;
      case 2: sub(); break;
      case 5: if (end - p < 4) bad(); p += 4; break;
      default: bad();
    }
  }
};

enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

const std::string kSpace = "\xE2\x96\x81";  // ▁ U+2581, sentencepiece's whitespace symbol

class SentencePieceBpe : public Tokenizer {
 public:
  explicit SentencePieceBpe(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw ModelError(path + ": cannot open tokenizer");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string data = ss.str();
    Wire w{reinterpret_cast<const uint8_t*>(data.data()), reinterpret_cast<const uint8_t*>(data.data()) + data.size(), path};
    int model_type = 1;  // UNIGRAM unless said otherwise
    std::string normalizer = "nmt_nfkc", charsmap;
    while (!w.done()) {
      const uint64_t key = w.varint();
      const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
      if (field == 1 && type == 2) {  // SentencePiece
        Wire pw = w.sub();
        std::string piece;
        float score = 0;
        int ptype = kNormal;
        while (!pw.done()) {
          const uint64_t k = pw.varint();
          if ((k >> 3) == 1 && (k & 7) == 2) piece = pw.bytes();
          else if ((k >> 3) == 2 && (k & 7) == 5) score = pw.fixed32();
          else if ((k >> 3) == 3 && (k & 7) == 0) ptype = static_cast<int>(pw.varint());
          else pw.skip(static_cast<int>(k & 7));
        }
        add_piece(piece, score, ptype);
      } else if (field == 2 && type == 2) {  // TrainerSpec
        Wire tw = w.sub();
        while (!tw.done()) {
          const uint64_t k = tw.varint();
          const int f2 = static_cast<int>(k >> 3);
          if ((k & 7) != 0) { tw.skip(static_cast<int>(k & 7)); continue; }
          const int64_t v = static_cast<int64_t>(tw.varint());
          if (f2 == 3) model_type = static_cast<int>(v);
          else if (f2 == 35) byte_fallback_ = v != 0;
          else if (f2 == 24) suffix_space_ = v != 0;
        }
      } else if (field == 3 && type == 2) {  // NormalizerSpec
        Wire nw = w.sub();
        while (!nw.done()) {
          const uint64_t k = nw.varint();
          const int f2 = static_cast<int>(k >> 3);
          if (f2 == 1 && (k & 7) == 2) normalizer = nw.bytes();
          else if (f2 == 2 && (k & 7) == 2) charsmap = nw.bytes();
          else if (f2 == 3 && (k & 7) == 0) dummy_prefix_ = nw.varint() != 0;
          else if (f2 == 4 && (k & 7) == 0) trim_spaces_ = nw.varint() != 0;
          else if (f2 == 5 && (k & 7) == 0) escape_spaces_ = nw.varint() != 0;
          else nw.skip(static_cast<int>(k & 7));
        }
      } else {
        w.skip(type);
      }
    }
    if (pieces_.empty()) throw ModelError(path + ": a sentencepiece model without pieces");
    index_pieces();
    if (model_type != 2)
      throw ModelError(path + ": only BPE sentencepiece models are supported (this one is " +
                       (model_type == 1 ? "unigram" : "type " + std::to_string(model_type)) + ")");
    if (!charsmap.empty() || (normalizer != "identity" && !normalizer.empty()))
      throw ModelError(path + ": normalization \"" + normalizer + "\" is not supported; train the tokenizer with "
                       "normalization_rule_name=identity");
    if (suffix_space_) throw ModelError(path + ": treat_whitespace_as_suffix is not supported");
  }

  std::vector<int32_t> encode(const std::string& text) const override {
    const std::string norm = normalize(text);
    // Symbols: one UTF-8 character each (user-defined pieces stay whole), linked left to right.
    struct Symbol {
      int prev, next;
      size_t begin, len;
      bool frozen;
    };
    std::vector<Symbol> sym;
    for (size_t i = 0; i < norm.size();) {
      size_t len = 0;
      for (const std::string& u : user_defined_)  // longest user-defined prefix
        if (u.size() > len && norm.compare(i, u.size(), u) == 0) len = u.size();
      const bool frozen = len > 0;
      if (!frozen) len = std::min(utf8_len(static_cast<unsigned char>(norm[i])), norm.size() - i);
      sym.push_back({static_cast<int>(sym.size()) - 1, -1, i, len, frozen});
      if (sym.size() > 1) sym[sym.size() - 2].next = static_cast<int>(sym.size()) - 1;
      i += len;
    }
    struct Pair {
      int left, right;
      float score;
      size_t len;
    };
    auto worse = [](const Pair& a, const Pair& b) {  // highest score first, ties to the left
      return a.score != b.score ? a.score < b.score : a.left > b.left;
    };
    std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> agenda(worse);
    auto consider = [&](int l, int r) {
      if (l < 0 || r < 0 || sym[l].frozen || sym[r].frozen) return;
      auto it = mergeable_.find(std::string_view(norm).substr(sym[l].begin, sym[l].len + sym[r].len));
      if (it != mergeable_.end()) agenda.push({l, r, scores_[it->second], sym[l].len + sym[r].len});
    };
    for (size_t i = 1; i < sym.size(); ++i) consider(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!agenda.empty()) {
      const Pair top = agenda.top();
      agenda.pop();
      Symbol &l = sym[top.left], &r = sym[top.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != top.len) continue;  // stale
      l.len += r.len;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = top.left;
      r.len = 0;
      consider(l.prev, top.left);
      consider(top.left, l.next);
    }
    std::vector<int32_t> ids;
    for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
      const std::string_view piece = std::string_view(norm).substr(sym[i].begin, sym[i].len);
      const int32_t id = piece_id(piece);
      if (id != unk_id_ || !byte_fallback_) {
        ids.push_back(id);
        continue;
      }
      for (unsigned char c : piece) ids.push_back(byte_ids_[c] >= 0 ? byte_ids_[c] : unk_id_);
    }
    return ids;
  }

  std::string decode(const int32_t* ids, size_t n) const override {
    std::string out, bytes;
    bool first = true;  // the first text piece loses its dummy-prefix space
    auto flush_bytes = [&] {  // byte pieces form UTF-8; each byte of a broken sequence → U+FFFD
      for (size_t i = 0; i < bytes.size();) {
        const size_t len = utf8_len(static_cast<unsigned char>(bytes[i]));
        if (len > 1 && i + len <= bytes.size() && valid_sequence(bytes, i, len)) {
          out.append(bytes, i, len);
          i += len;
        } else if (len == 1 && static_cast<unsigned char>(bytes[i]) < 0x80) {
          out += bytes[i++];
        } else {
          out += "\xEF\xBF\xBD";
          ++i;
        }
      }
      bytes.clear();
    };
    for (size_t i = 0; i < n; ++i) {
      check(ids[i]);
      const int type = types_[ids[i]];
      if (type == kControl) continue;
      if (type == kByte) {
        bytes += static_cast<char>(byte_value_[ids[i]]);
        first = false;
        continue;
      }
      flush_bytes();
      if (type == kUnknown) {
        out += " \xE2\x81\x87 ";  // " ⁇ ", sentencepiece's unknown surface
        first = false;
        continue;
      }
      std::string piece = pieces_[ids[i]];
      if (first && dummy_prefix_ && piece.compare(0, kSpace.size(), kSpace) == 0) piece.erase(0, kSpace.size());
      first = false;
      for (size_t at; (at = piece.find(kSpace)) != std::string::npos;) piece.replace(at, kSpace.size(), " ");
      out += piece;
    }
    flush_bytes();
    return out;
  }

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  int32_t piece_to_id(std::string_view piece) const override {
    if (auto it = reserved_.find(piece); it != reserved_.end()) return it->second;
    auto m = mergeable_.find(piece);
    return m == mergeable_.end() ? -1 : m->second;
  }
  bool is_special(int32_t id) const override {
    check(id);
    return types_[id] == kControl;
  }
  std::string kind() const override { return "sentencepiece-bpe"; }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  int unk_id() const override { return unk_id_; }
  std::string id_to_piece(int32_t id) const override {
    check(id);
    return pieces_[id];
  }
  const std::string& token_text(int32_t id) const override {
    check(id);
    return token_texts_[id];
  }

 private:
  static size_t utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  }
  static bool valid_sequence(const std::string& s, size_t i, size_t len) {
    uint32_t cp = static_cast<unsigned char>(s[i]) & (0xff >> (len + 1));
    for (size_t k = 1; k < len; ++k) {
      const unsigned char c = s[i + k];
      if ((c >> 6) != 2) return false;
      cp = cp << 6 | (c & 0x3f);
    }
    return !((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
             (cp >= 0xD800 && cp <= 0xDFFF));
  }

  void add_piece(const std::string& piece, float score, int type) {
    pieces_.push_back(piece);
    scores_.push_back(score);
    types_.push_back(type);
  }
  // The lookups, built once all pieces are read (their string_views point into pieces_).
  void index_pieces() {
    std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
    byte_value_.assign(pieces_.size(), -1);
    for (int32_t id = 0; id < static_cast<int32_t>(pieces_.size()); ++id) {
      const std::string& piece = pieces_[id];
      const int type = types_[id];
      // sentencepiece looks up control, unknown and byte pieces first, then the mergeable ones
      if (type == kNormal || type == kUserDefined || type == kUnused) mergeable_.emplace(piece, id);
      else reserved_.emplace(piece, id);
      if (type == kUserDefined) user_defined_.push_back(piece);
      if (type == kUnknown) unk_id_ = id;
      if (type == kControl && piece == "<s>") bos_id_ = id;
      if (type == kControl && piece == "</s>") eos_id_ = id;
      if (type == kByte && piece.size() == 6 && piece.compare(0, 3, "<0x") == 0) {
        const int v = std::stoi(piece.substr(3, 2), nullptr, 16);
        byte_ids_[v] = id;
        byte_value_[id] = v;
      }
    }
    token_texts_.resize(pieces_.size());
    for (int32_t id = 0; id < static_cast<int32_t>(pieces_.size()); ++id) {
      std::string text = pieces_[id];
      if (byte_value_[id] >= 0x80) {
        static const char* hex = "0123456789abcdef";
        text = std::string("bytes:\\x") + hex[byte_value_[id] >> 4] + hex[byte_value_[id] & 15];
      } else if (byte_value_[id] >= 0) {
        text = std::string(1, static_cast<char>(byte_value_[id]));
      } else if (types_[id] != kControl && types_[id] != kUnknown) {
        for (size_t at; (at = text.find(kSpace)) != std::string::npos;) text.replace(at, kSpace.size(), " ");
      }
      token_texts_[id] = std::move(text);
    }
  }
  int32_t piece_id(std::string_view piece) const {
    if (auto it = reserved_.find(piece); it != reserved_.end()) return it->second;
    auto m = mergeable_.find(piece);
    return m == mergeable_.end() ? unk_id_ : m->second;
  }
  std::string normalize(const std::string& text) const {
    std::string s = text;
    if (trim_spaces_) {  // strip the ends, collapse runs of spaces
      std::string t;
      for (char c : s)
        if (c != ' ' || (!t.empty() && t.back() != ' ')) t += c;
      while (!t.empty() && t.back() == ' ') t.pop_back();
      s = t;
    }
    if (s.empty()) return s;
    std::string out = dummy_prefix_ ? (escape_spaces_ ? kSpace : " ") : "";
    for (char c : s) {
      if (c == ' ' && escape_spaces_) out += kSpace;
      else out += c;
    }
    return out;
  }
  void check(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(pieces_.size()))
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(pieces_.size()) + ")");
  }

  std::vector<std::string> pieces_;
  std::vector<std::string> token_texts_;  // token_text of every id
  std::vector<float> scores_;
  std::vector<int> types_, byte_value_;
  std::unordered_map<std::string_view, int32_t> mergeable_, reserved_;
  std::vector<std::string> user_defined_;
  int32_t byte_ids_[256];
  int32_t unk_id_ = 0, bos_id_ = -1, eos_id_ = -1;
  bool byte_fallback_ = false, dummy_prefix_ = true, trim_spaces_ = true, escape_spaces_ = true,
       suffix_space_ = false;

 public:
  SentencePieceBpe(const SentencePieceBpe&) = delete;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  return std::make_unique<SentencePieceBpe>(path);
}

}  // namespace mixserve
