// sentencepiece tokenizers (BPE and unigram) written from the model file: mixserve does not link
// libsentencepiece. Debian's libsentencepiece carries its own copy of protobuf 3.14 and exports
// its symbols; in a process that also loads libprotobuf 3.21 (every gRPC server) the two collide
// at start-up and the process dies (see docs/tokenizer.md). The model file is a small protobuf
// that we read field by field. Text is normalized as the model says (sp_normalizer.h), then
// encoded by sentencepiece's BPE (highest-scoring adjacent pair merged first, ties to the left)
// or unigram (Viterbi over the pieces' scores), with byte fallback; decoding follows
// sentencepiece's rules. tests/tokenizer checks both against the Python library under every
// normalization rule, model type and whitespace option; tests/engine/test_tokenizer.cc on fixtures.
#include "engine/tokenizer/sentencepiece.h"

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <fstream>
#include <mutex>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "engine/model_error.h"
#include "engine/tokenizer/sp_normalizer.h"
#include "engine/tokenizer/sp_piece_trie.h"

namespace mixserve {

namespace {

// --- the protobuf wire format, just what a ModelProto needs ---
struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  const std::string& file;
  [[noreturn]] void bad() const {
    throw ModelError(file + ": not a sentencepiece model (malformed protobuf)");
  }
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
      case 0:
        varint();
        break;
      case 1:
        if (end - p < 8) bad();
        p += 8;
        break;
      case 2:
        sub();
        break;
      case 5:
        if (end - p < 4) bad();
        p += 4;
        break;
      default:
        bad();
    }
  }
};

enum PieceType {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

const std::string kSpace = "\xE2\x96\x81";  // ▁ U+2581, sentencepiece's whitespace symbol
enum ModelType { kUnigram = 1, kBpe = 2 };

struct StringHash {  // lets the word cache be searched by string_view
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class SentencePieceModel : public Tokenizer {
 public:
  explicit SentencePieceModel(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw ModelError(path + ": cannot open tokenizer");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string data = ss.str();
    Wire w{reinterpret_cast<const uint8_t*>(data.data()),
           reinterpret_cast<const uint8_t*>(data.data()) + data.size(), path};
    int model_type = kUnigram;  // unless the TrainerSpec says otherwise
    std::string normalizer = "nmt_nfkc";
    SpNormalizerSpec norm_spec;
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
          if ((k >> 3) == 1 && (k & 7) == 2)
            piece = pw.bytes();
          else if ((k >> 3) == 2 && (k & 7) == 5)
            score = pw.fixed32();
          else if ((k >> 3) == 3 && (k & 7) == 0)
            ptype = static_cast<int>(pw.varint());
          else
            pw.skip(static_cast<int>(k & 7));
        }
        add_piece(piece, score, ptype);
      } else if (field == 2 && type == 2) {  // TrainerSpec
        Wire tw = w.sub();
        while (!tw.done()) {
          const uint64_t k = tw.varint();
          const int f2 = static_cast<int>(k >> 3);
          if ((k & 7) != 0) {
            tw.skip(static_cast<int>(k & 7));
            continue;
          }
          const int64_t v = static_cast<int64_t>(tw.varint());
          if (f2 == 3)
            model_type = static_cast<int>(v);
          else if (f2 == 35)
            byte_fallback_ = v != 0;
          else if (f2 == 24)
            norm_spec.treat_whitespace_as_suffix = v != 0;
        }
      } else if (field == 3 && type == 2) {  // NormalizerSpec
        Wire nw = w.sub();
        while (!nw.done()) {
          const uint64_t k = nw.varint();
          const int f2 = static_cast<int>(k >> 3);
          if (f2 == 1 && (k & 7) == 2)
            normalizer = nw.bytes();
          else if (f2 == 2 && (k & 7) == 2)
            norm_spec.charsmap = nw.bytes();
          else if (f2 == 3 && (k & 7) == 0)
            norm_spec.add_dummy_prefix = nw.varint() != 0;
          else if (f2 == 4 && (k & 7) == 0)
            norm_spec.remove_extra_whitespaces = nw.varint() != 0;
          else if (f2 == 5 && (k & 7) == 0)
            norm_spec.escape_whitespaces = nw.varint() != 0;
          else
            nw.skip(static_cast<int>(k & 7));
        }
      } else {
        w.skip(type);
      }
    }
    if (pieces_.empty()) throw ModelError(path + ": a sentencepiece model without pieces");
    if (model_type != kUnigram && model_type != kBpe)
      throw ModelError(path + ": sentencepiece model type " +
                       (model_type == 3   ? std::string("word")
                        : model_type == 4 ? "char"
                                          : std::to_string(model_type)) +
                       " is not supported (unigram and bpe are)");
    model_type_ = model_type;
    dummy_prefix_ = norm_spec.add_dummy_prefix;
    trim_spaces_ = norm_spec.remove_extra_whitespaces;
    suffix_space_ = norm_spec.treat_whitespace_as_suffix;
    index_pieces(path);
    try {
      normalizer_ = std::make_unique<SpNormalizer>(std::move(norm_spec), user_defined_);
    } catch (const std::invalid_argument& e) {
      throw ModelError(path + ": " + e.what());
    }
    normalizer_name_ = normalizer;
  }

  // sentencepiece's BPE: (piece, id) in order; unknown pieces carry unk_id_.
  // BPE of the whole normalized text. When no piece holds ▁ anywhere but at its start (at its end
  // for a suffix model), no merge crosses a word boundary, so each word is encoded alone and
  // remembered: the KJV's 4.4 MB has ~13,000 distinct words.
  void encode_bpe(const std::string& norm,
                  std::vector<std::pair<std::string_view, int32_t>>& out) const {
    if (!words_independent_) return encode_bpe_span(norm, out);
    std::string_view rest = norm;
    std::vector<std::pair<std::string_view, int32_t>> word_pieces;
    while (!rest.empty()) {
      // The word: up to the next ▁ after its first character (prefix model), or through the next ▁.
      size_t end = suffix_space_ ? rest.find(kSpace) : rest.find(kSpace, 1);
      end = end == std::string_view::npos ? rest.size() : suffix_space_ ? end + kSpace.size() : end;
      const std::string_view word = rest.substr(0, end);
      rest.remove_prefix(end);
      {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        if (auto it = word_cache_.find(word); it != word_cache_.end()) {
          size_t at = 0;
          for (const auto& [len, id] : it->second) {
            out.push_back({word.substr(at, len), id});
            at += len;
          }
          continue;
        }
      }
      word_pieces.clear();
      encode_bpe_span(word, word_pieces);
      std::vector<std::pair<uint32_t, int32_t>> entry;
      for (const auto& [piece, id] : word_pieces) {
        out.push_back({piece, id});
        entry.push_back({static_cast<uint32_t>(piece.size()), id});
      }
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (word_cache_.size() >= kWordCacheSize) word_cache_.clear();
      word_cache_.emplace(std::string(word), std::move(entry));
    }
  }

  void encode_bpe_span(std::string_view norm,
                       std::vector<std::pair<std::string_view, int32_t>>& out) const {
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
      auto it = mergeable_.find(norm.substr(sym[l].begin, sym[l].len + sym[r].len));
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
    for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
      const std::string_view piece = norm.substr(sym[i].begin, sym[i].len);
      out.push_back({piece, piece_id(piece)});
    }
  }

  // sentencepiece's unigram (EncodeOptimized): the best-scoring segmentation by Viterbi over
  // the pieces, a character no piece starts with costing the lowest score minus 10 as unknown.
  void encode_unigram(const std::string& norm,
                      std::vector<std::pair<std::string_view, int32_t>>& out) const {
    struct Best {
      int32_t id = -1;
      float score = 0;
      int64_t starts_at = -1;
    };
    const size_t size = norm.size();
    std::vector<Best> best(size + 1);
    const float unk_score = min_score_ - 10.0f;
    for (size_t start = 0; start < size;) {
      const float here = best[start].score;
      const size_t char_len =
          std::min(utf8_len(static_cast<unsigned char>(norm[start])), size - start);
      bool has_single = false;
      trie_.prefixes(std::string_view(norm).substr(start), [&](size_t length, int32_t id) {
        if (types_[id] == kUnused) return;
        Best& target = best[start + length];
        const float score =
            (types_[id] == kUserDefined ? static_cast<float>(length) * max_score_ - 0.1f
                                        : scores_[id]) +
            here;
        if (target.starts_at == -1 || score > target.score)
          target = {id, score, static_cast<int64_t>(start)};
        if (length == char_len) has_single = true;
      });
      if (!has_single) {
        Best& target = best[start + char_len];
        const float score = unk_score + here;
        if (target.starts_at == -1 || score > target.score)
          target = {unk_id_, score, static_cast<int64_t>(start)};
      }
      start += char_len;
    }
    const size_t first = out.size();
    for (size_t end = size; end > 0;) {
      const Best& b = best[end];
      out.push_back({std::string_view(norm).substr(b.starts_at, end - b.starts_at), b.id});
      end = static_cast<size_t>(b.starts_at);
    }
    std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  }

  std::vector<int32_t> encode(const std::string& text) const override {
    const std::string norm = normalizer_->normalize(text);
    std::vector<std::pair<std::string_view, int32_t>> pieces;
    if (model_type_ == kBpe)
      encode_bpe(norm, pieces);
    else
      encode_unigram(norm, pieces);
    // As SentencePieceProcessor::Encode: an unknown piece becomes its bytes with byte fallback,
    // and a run of unknown pieces is one unknown token without it.
    std::vector<int32_t> ids;
    ids.reserve(pieces.size());
    bool prev_unk = false;
    for (const auto& [piece, id] : pieces) {
      const bool unk = id == unk_id_;
      if (unk && byte_fallback_) {
        for (unsigned char c : piece) ids.push_back(byte_ids_[c] >= 0 ? byte_ids_[c] : unk_id_);
        prev_unk = false;
        continue;
      }
      if (!(unk && prev_unk)) ids.push_back(id);
      prev_unk = unk;
    }
    return ids;
  }

  std::string decode(const int32_t* ids, size_t n) const override {
    std::string out, bytes;
    bool first = true;        // the first text piece loses its dummy-prefix space
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
      if (first && !suffix_space_ && (dummy_prefix_ || trim_spaces_) &&
          piece.compare(0, kSpace.size(), kSpace) == 0)
        piece.erase(0, kSpace.size());
      first = false;
      for (size_t at; (at = piece.find(kSpace)) != std::string::npos;)
        piece.replace(at, kSpace.size(), " ");
      out += piece;
    }
    flush_bytes();
    // With the dummy space as a suffix, sentencepiece 0.1.97 keeps it: "tabs and tabs ".
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
  std::string kind() const override {
    return model_type_ == kBpe ? "sentencepiece-bpe" : "sentencepiece-unigram";
  }
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
    return !((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
             cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF));
  }

  void add_piece(const std::string& piece, float score, int type) {
    pieces_.push_back(piece);
    scores_.push_back(score);
    types_.push_back(type);
  }
  // The lookups, built once all pieces are read (their string_views point into pieces_).
  void index_pieces(const std::string& path) {
    std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
    byte_value_.assign(pieces_.size(), -1);
    for (int32_t id = 0; id < static_cast<int32_t>(pieces_.size()); ++id) {
      const std::string& piece = pieces_[id];
      const int type = types_[id];
      // sentencepiece looks up control, unknown and byte pieces first, then the mergeable ones
      if (type == kNormal || type == kUserDefined || type == kUnused)
        mergeable_.emplace(piece, id);
      else
        reserved_.emplace(piece, id);
      if (type == kUserDefined) user_defined_.push_back(piece);
      if (type == kUnknown) unk_id_ = id;
      if (type == kControl && piece == "<s>") bos_id_ = id;
      if (type == kControl && piece == "</s>") eos_id_ = id;
      if (type < kNormal || type > kByte)
        throw ModelError(path + ": piece " + std::to_string(id) + " has an unknown type " +
                         std::to_string(type));
      if (type == kByte) {
        if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>' ||
            !std::isxdigit(static_cast<unsigned char>(piece[3])) ||
            !std::isxdigit(static_cast<unsigned char>(piece[4])))
          throw ModelError(path + ": byte piece " + std::to_string(id) +
                           " is not of the form <0xNN>");
        const int v = std::stoi(piece.substr(3, 2), nullptr, 16);
        byte_ids_[v] = id;
        byte_value_[id] = v;
      }
      if (type == kNormal) {
        min_score_ = std::min(min_score_, scores_[id]);
        max_score_ = std::max(max_score_, scores_[id]);
      }
      if ((type == kNormal || type == kUserDefined || type == kUnused) && piece.empty())
        throw ModelError(path + ": piece " + std::to_string(id) + " is empty");
    }
    if (unk_id_ < 0 || types_[unk_id_] != kUnknown)
      throw ModelError(path + ": the model has no unknown piece");
    if (byte_fallback_)
      for (int b = 0; b < 256; ++b)
        if (byte_ids_[b] < 0)
          throw ModelError(path + ": byte_fallback is on but the byte piece <0x" +
                           "0123456789ABCDEF"[b >> 4] + "0123456789ABCDEF"[b & 15] +
                           "> is missing");
    std::vector<std::pair<std::string_view, int32_t>> keys;
    for (const auto& [piece, id] : mergeable_) keys.push_back({piece, id});
    trie_.build(keys);
    words_independent_ = true;
    for (const auto& [piece, id] : mergeable_) {
      const size_t at = piece.find(kSpace, suffix_space_ ? 0 : 1);
      if (at != std::string::npos && !(suffix_space_ && at + kSpace.size() == piece.size()))
        words_independent_ = false;
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
        for (size_t at; (at = text.find(kSpace)) != std::string::npos;)
          text.replace(at, kSpace.size(), " ");
      }
      token_texts_[id] = std::move(text);
    }
  }
  int32_t piece_id(std::string_view piece) const {
    if (auto it = reserved_.find(piece); it != reserved_.end()) return it->second;
    auto m = mergeable_.find(piece);
    return m == mergeable_.end() ? unk_id_ : m->second;
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
  int32_t unk_id_ = -1, bos_id_ = -1, eos_id_ = -1;
  int model_type_ = kBpe;
  std::string normalizer_name_;
  std::unique_ptr<SpNormalizer> normalizer_;
  PieceTrie trie_;
  bool words_independent_ = false;  // no merge crosses a ▁ boundary: BPE runs word by word
  static constexpr size_t kWordCacheSize = 1 << 16;
  mutable std::mutex cache_mutex_;
  // A word's pieces as (length, id): the same for every occurrence of the word.
  mutable std::unordered_map<std::string, std::vector<std::pair<uint32_t, int32_t>>, StringHash,
                             std::equal_to<>>
      word_cache_;
  float min_score_ = FLT_MAX,
        max_score_ = FLT_MIN;  // over normal pieces, as sentencepiece sets them
  bool byte_fallback_ = false, dummy_prefix_ = true, trim_spaces_ = true, escape_spaces_ = true,
       suffix_space_ = false;

 public:
  SentencePieceModel(const SentencePieceModel&) = delete;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  return std::make_unique<SentencePieceModel>(path);
}

}  // namespace mixserve
