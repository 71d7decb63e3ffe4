// sentencepiece tokenizers written from the model file: mixserve does not link libsentencepiece.
// Debian's libsentencepiece carries its own copy of protobuf 3.14 and exports its symbols; in a
// process that also loads libprotobuf 3.21 (every gRPC server) the two collide at start-up and
// the process dies (see docs/tokenizer.md). The model file is a small protobuf that we read field
// by field. Encoding is sentencepiece's: the normalizer (sp_normalizer.cc), the model's
// segmentation (BPE: sp_bpe.cc, unigram: sp_unigram.cc), then the processor's rules for unknown
// pieces (runs merged, or spelled as <0xNN> byte pieces with byte_fallback); decoding follows
// sentencepiece_processor.cc. The reference is the Python sentencepiece 0.1.97 (Debian's), which
// tests/tokenizer/sp_oracle.py runs on models trained with every option.
#include "engine/tokenizer/sentencepiece.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine/model_error.h"
#include "engine/tokenizer/sp_model.h"
#include "engine/tokenizer/sp_normalizer.h"

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
        bad();  // groups (3, 4) appear in no sentencepiece message
    }
  }
};

// NormalizerSpec: the charsmap (field 2) and the whitespace flags (3-5).
struct NormalizerFields {
  std::string charsmap;
  SpNormalizerOptions options;
};
NormalizerFields read_normalizer(Wire w) {
  NormalizerFields n;
  while (!w.done()) {
    const uint64_t k = w.varint();
    const int field = static_cast<int>(k >> 3), type = static_cast<int>(k & 7);
    if (field == 2 && type == 2)
      n.charsmap = w.bytes();
    else if (field == 3 && type == 0)
      n.options.add_dummy_prefix = w.varint() != 0;
    else if (field == 4 && type == 0)
      n.options.remove_extra_whitespaces = w.varint() != 0;
    else if (field == 5 && type == 0)
      n.options.escape_whitespaces = w.varint() != 0;
    else
      w.skip(type);
  }
  return n;
}

class SentencePiece : public Tokenizer {
 public:
  SentencePiece(std::string_view data, const std::string& path) {
    Wire w{reinterpret_cast<const uint8_t*>(data.data()),
           reinterpret_cast<const uint8_t*>(data.data()) + data.size(), path};
    model_type_ = 1;  // UNIGRAM unless said otherwise
    NormalizerFields norm, denorm;
    bool suffix = false;
    while (!w.done()) {
      const uint64_t key = w.varint();
      const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
      if (field == 1 && type == 2) {  // SentencePiece
        Wire pw = w.sub();
        std::string piece;
        float score = 0;
        int ptype = kSpNormal;
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
        if (ptype < kSpNormal || ptype > kSpByte)
          ptype = kSpNormal;  // proto2: unknown enum → default
        p_.piece.push_back(std::move(piece));
        p_.score.push_back(score);
        p_.type.push_back(ptype);
      } else if (field == 2 && type == 2) {  // TrainerSpec
        Wire tw = w.sub();
        while (!tw.done()) {
          const uint64_t k = tw.varint();
          const int f2 = static_cast<int>(k >> 3);
          if (f2 == 44 && (k & 7) == 2) {
            unk_surface_ = tw.bytes();
            continue;
          }
          if ((k & 7) != 0) {
            tw.skip(static_cast<int>(k & 7));
            continue;
          }
          const uint64_t v = tw.varint();
          if (f2 == 3 && v >= 1 && v <= 4)
            model_type_ = static_cast<int>(v);
          else if (f2 == 35)
            byte_fallback_ = v != 0;
          else if (f2 == 24)
            suffix = v != 0;
        }
      } else if (field == 3 && type == 2) {
        norm = read_normalizer(w.sub());
      } else if (field == 5 && type == 2) {  // the denormalizer, applied after decoding
        denorm = read_normalizer(w.sub());
      } else {
        w.skip(type);
      }
    }
    if (model_type_ != 1 && model_type_ != 2)
      throw ModelError(path + ": sentencepiece model type " +
                       (model_type_ == 3 ? std::string("word") : std::string("char")) +
                       " is not supported (only unigram and bpe)");
    norm.options.treat_whitespace_as_suffix = suffix;
    p_.word_space = norm.options.escape_whitespaces ? std::string(kSpSpace) : " ";
    p_.word_suffix = suffix;
    index_pieces(path);
    dummy_prefix_ = norm.options.add_dummy_prefix;
    trim_spaces_ = norm.options.remove_extra_whitespaces;
    normalizer_ = SpNormalizer(SpCharsMap(norm.charsmap, path), norm.options);
    normalizer_.set_protected(p_.user_defined.empty() ? nullptr : &p_.user_defined);
    if (!denorm.charsmap.empty()) {
      has_denormalizer_ = true;
      denormalizer_ =
          SpNormalizer(SpCharsMap(denorm.charsmap, path + " (denormalizer)"), denorm.options);
    }
  }
  SentencePiece(const SentencePiece&) = delete;

  std::vector<int32_t> encode(const std::string& text) const override {
    const std::string norm = normalizer_.normalize(text);
    const std::vector<SpToken> tokens =
        model_type_ == 2 ? sp_bpe_encode(p_, norm) : sp_unigram_encode(p_, norm);
    // sentencepiece_processor.cc: a run of unknown pieces becomes one unknown id; with byte
    // fallback each unknown piece is spelled in byte pieces instead.
    std::vector<int32_t> ids;
    ids.reserve(tokens.size());
    bool prev_unk = false;
    for (const SpToken& t : tokens) {
      const bool unk = p_.type[t.id] == kSpUnknown;
      if (unk && byte_fallback_) {
        for (uint32_t i = 0; i < t.len; ++i)
          ids.push_back(byte_ids_[static_cast<uint8_t>(norm[t.begin + i])]);
      } else if (!(unk && prev_unk) || p_.type[t.id] == kSpControl) {
        ids.push_back(t.id);
      }
      prev_unk = unk;
    }
    return ids;
  }

  std::string decode(const int32_t* ids, size_t n) const override {
    std::string out, bytes;
    auto flush_bytes = [&] {  // byte pieces form UTF-8; each byte of a broken sequence → U+FFFD
      for (size_t i = 0; i < bytes.size();) {
        const size_t len = sp_utf8_char(std::string_view(bytes).substr(i));
        if (len) {
          out.append(bytes, i, len);
          i += len;
        } else {
          out += "\xEF\xBF\xBD";
          ++i;
        }
      }
      bytes.clear();
    };
    // The dummy prefix: while nothing is written, the first ▁ of a piece is dropped, once (with
    // remove_extra_whitespaces, of every piece until text appears), as sentencepiece does.
    bool bos_ws = true, bos_ws_seen = false;
    for (size_t i = 0; i < n; ++i) {
      check(ids[i]);
      const int32_t id = p_.canonical[ids[i]];  // sentencepiece decodes id → piece → id
      const int type = p_.type[id];
      if (type == kSpByte) {
        bytes += static_cast<char>(byte_value_[id]);
        continue;
      }
      flush_bytes();
      if (bos_ws_seen || !out.empty()) bos_ws = false;
      bos_ws_seen = false;
      if (type == kSpControl) continue;
      if (type == kSpUnknown) {
        out += unk_surface_;
        continue;
      }
      std::string_view piece = p_.piece[id];
      if (bos_ws && (dummy_prefix_ || trim_spaces_) &&
          piece.compare(0, kSpSpace.size(), kSpSpace) == 0) {
        piece.remove_prefix(kSpSpace.size());
        bos_ws_seen = !trim_spaces_;
      }
      for (size_t at; (at = piece.find(kSpSpace)) != std::string_view::npos;) {
        out.append(piece.substr(0, at)) += ' ';
        piece.remove_prefix(at + kSpSpace.size());
      }
      out.append(piece);
    }
    flush_bytes();
    return has_denormalizer_ ? denormalizer_.normalize(out) : out;
  }

  int vocab_size() const override { return static_cast<int>(p_.piece.size()); }
  int32_t piece_to_id(std::string_view piece) const override {
    if (auto it = p_.reserved.find(piece); it != p_.reserved.end()) return it->second;
    auto m = p_.normal.find(piece);
    return m == p_.normal.end() ? -1 : m->second;
  }
  bool is_special(int32_t id) const override {
    check(id);
    return p_.type[id] == kSpControl;
  }
  std::string kind() const override {
    return model_type_ == 2 ? "sentencepiece-bpe" : "sentencepiece-unigram";
  }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  int unk_id() const override { return p_.unk_id; }
  std::string id_to_piece(int32_t id) const override {
    check(id);
    return p_.piece[id];
  }
  const std::string& token_text(int32_t id) const override {
    check(id);
    return token_texts_[id];
  }

 private:
  // The lookups and checks of sentencepiece's ModelInterface::InitializePieces, once all pieces
  // are read (the maps' string_views point into p_.piece, which no longer changes).
  void index_pieces(const std::string& path) {
    const size_t n = p_.piece.size();
    if (n == 0) throw ModelError(path + ": a sentencepiece model without pieces");
    if (n > static_cast<size_t>(INT32_MAX)) throw ModelError(path + ": too many pieces");
    std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
    byte_value_.assign(n, -1);
    std::vector<std::pair<std::string_view, int32_t>> normal, user_defined;
    p_.min_score = 3.40282347e+38f;  // FLT_MAX and FLT_MIN, as unigram_model.cc starts them
    p_.max_score = 1.17549435e-38f;
    for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
      const std::string& piece = p_.piece[id];
      const int type = p_.type[id];
      const std::string quoted = "\"" + piece + "\" (id " + std::to_string(id) + ")";
      if (piece.empty()) throw ModelError(path + ": piece " + std::to_string(id) + " is empty");
      const bool is_normal = type == kSpNormal || type == kSpUserDefined || type == kSpUnused;
      if (!(is_normal ? p_.normal : p_.reserved).emplace(piece, id).second)
        throw ModelError(path + ": piece " + quoted + " is defined twice");
      if (is_normal) normal.emplace_back(piece, id);
      if (type == kSpNormal) {
        p_.min_score = std::min(p_.min_score, p_.score[id]);
        p_.max_score = std::max(p_.max_score, p_.score[id]);
      }
      if (type == kSpUnused) p_.has_unused = true;
      if (type == kSpUserDefined) user_defined.emplace_back(piece, id);
      if (type == kSpUnknown) {
        if (p_.unk_id >= 0)
          throw ModelError(path + ": two unknown pieces, " + quoted + " and id " +
                           std::to_string(p_.unk_id));
        p_.unk_id = id;
      }
      if (type == kSpControl && piece == "<s>") bos_id_ = id;
      if (type == kSpControl && piece == "</s>") eos_id_ = id;
      if (type == kSpByte) {
        if (!byte_fallback_)
          throw ModelError(path + ": byte piece " + quoted + " in a model without byte_fallback");
        static const char* hex = "0123456789ABCDEF";
        int v = -1;
        for (int b = 0; b < 256 && v < 0; ++b)
          if (piece == std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">") v = b;
        if (v < 0) throw ModelError(path + ": byte piece " + quoted + " is not <0xNN>");
        byte_ids_[v] = id;
        byte_value_[id] = v;
      }
    }
    if (p_.unk_id < 0) throw ModelError(path + ": no unknown piece (<unk>)");
    if (byte_fallback_)
      for (int b = 0; b < 256; ++b)
        if (byte_ids_[b] < 0)
          throw ModelError(path + ": byte_fallback is set but byte piece " + std::to_string(b) +
                           " (<0xNN>) is missing");
    if (model_type_ == 1 && normal.empty())
      throw ModelError(path + ": a unigram model without normal pieces");
    if (model_type_ == 1) p_.normal_trie = SpTrie(normal);
    if (model_type_ == 2) {
      for (const auto& [piece, id] : normal)
        for (size_t k = 1; k < piece.size(); ++k) {
          auto l = p_.normal.find(piece.substr(0, k)), r = p_.normal.find(piece.substr(k));
          if (l != p_.normal.end() && r != p_.normal.end())
            p_.merges.insert(l->second, r->second, id);
        }
      p_.split_words = true;
      const std::string& ws = p_.word_space;
      for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
        const std::string& piece = p_.piece[id];
        if (p_.type[id] != kSpNormal && p_.type[id] != kSpUnused) continue;
        const size_t at = p_.word_suffix ? piece.find(ws) : piece.find(ws, 1);
        if (at != std::string::npos && !(p_.word_suffix && at + ws.size() == piece.size()))
          p_.split_words = false;
      }
      for (int c = 0; c < 128; ++c) {
        auto it = p_.normal.find(std::string(1, static_cast<char>(c)));
        p_.ascii[c] = it == p_.normal.end() ? -1 : it->second;
      }
    }
    p_.user_defined = SpTrie(std::move(user_defined));
    p_.canonical.resize(n);
    for (int32_t id = 0; id < static_cast<int32_t>(n); ++id)
      p_.canonical[id] = p_.piece_to_id(p_.piece[id]);
    token_texts_.resize(n);
    for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
      std::string text = p_.piece[id];
      if (byte_value_[id] >= 0x80) {
        static const char* hex = "0123456789abcdef";
        text = std::string("bytes:\\x") + hex[byte_value_[id] >> 4] + hex[byte_value_[id] & 15];
      } else if (byte_value_[id] >= 0) {
        text = std::string(1, static_cast<char>(byte_value_[id]));
      } else if (p_.type[id] != kSpControl && p_.type[id] != kSpUnknown) {
        for (size_t at; (at = text.find(kSpSpace)) != std::string::npos;)
          text.replace(at, kSpSpace.size(), 1, ' ');
      }
      token_texts_[id] = std::move(text);
    }
  }
  void check(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(p_.piece.size()))
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(p_.piece.size()) + ")");
  }

  SpPieces p_;
  SpNormalizer normalizer_, denormalizer_;
  bool has_denormalizer_ = false;
  int model_type_ = 1;                    // TrainerSpec.ModelType: 1 unigram, 2 BPE
  std::vector<std::string> token_texts_;  // token_text of every id
  std::vector<int> byte_value_;
  int32_t byte_ids_[256];
  std::string unk_surface_ = " \xE2\x81\x87 ";  // " ⁇ ", TrainerSpec.unk_surface's default
  int32_t bos_id_ = -1, eos_id_ = -1;
  bool byte_fallback_ = false, dummy_prefix_ = true, trim_spaces_ = true;
};

}  // namespace

void SpPairMap::insert(uint32_t left, uint32_t right, int32_t value) {
  if (2 * (size_ + 1) > keys_.size()) {  // grow: at most half full
    std::vector<uint64_t> keys = std::move(keys_);
    std::vector<int32_t> values = std::move(values_);
    keys_.assign(std::max<size_t>(64, 2 * keys.size()), kEmpty);
    values_.assign(keys_.size(), -1);
    mask_ = keys_.size() - 1;
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != kEmpty)
        insert(static_cast<uint32_t>(keys[i] >> 32), static_cast<uint32_t>(keys[i]), values[i]);
  }
  const uint64_t key = uint64_t{left} << 32 | right;
  size_t i = slot(key);
  while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
  if (keys_[i] == key) return;
  keys_[i] = key;
  values_[i] = value;
  ++size_;
}

std::unique_ptr<Tokenizer> load_sentencepiece_from_memory(std::string_view data,
                                                          const std::string& name) {
  return std::make_unique<SentencePiece>(data, name);
}

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ModelError(path + ": cannot open tokenizer");
  std::stringstream ss;
  ss << f.rdbuf();
  return load_sentencepiece_from_memory(ss.str(), path);
}

}  // namespace mixserve
