// What sentencepiece.cc (the model file, encode's and decode's outer rules) shares with the two
// segmentation algorithms, sp_bpe.cc and sp_unigram.cc. Internal to engine/tokenizer/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/sp_trie.h"

namespace mixserve {

// ModelProto.SentencePiece.Type
enum SpPieceType {
  kSpNormal = 1,
  kSpUnknown = 2,
  kSpControl = 3,
  kSpUserDefined = 4,
  kSpUnused = 5,
  kSpByte = 6
};

// BPE's merges by ids: (left << 32 | right) → the normal piece spelled left + right, for every
// two normal pieces that make one. Hashing two ids is cheaper than hashing their text, and open
// addressing with a multiplicative hash is cheaper than std::unordered_map, whose integer lookups
// pay a division per node visited (BPE does a few per byte).
class SpPairMap {
 public:
  void insert(uint32_t left, uint32_t right, int32_t value);  // the first value stays
  int32_t find(uint32_t left, uint32_t right) const {         // −1 if none
    if (keys_.empty()) return -1;
    const uint64_t key = uint64_t{left} << 32 | right;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return values_[i];
      if (keys_[i] == kEmpty) return -1;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are below 2^31
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> 32 & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<int32_t> values_;
  size_t mask_ = 0, size_ = 0;
};

struct SpPieces {
  std::vector<std::string> piece;
  std::vector<float> score;
  std::vector<int> type;
  // sentencepiece's two lookups: normal, user-defined and unused pieces; the others (unknown,
  // control, byte), which PieceToId consults first.
  std::unordered_map<std::string_view, int32_t> normal, reserved;
  SpTrie normal_trie;  // `normal` as a trie (unigram's lattice)
  SpPairMap merges;    // BPE's merges by ids
  // Whether no mergeable piece holds word_space (▁, or ' ' without escape_whitespaces) except
  // at its start (at its end with treat_whitespace_as_suffix): BPE can then merge word by word.
  bool split_words = false, word_suffix = false;
  std::string word_space;
  int32_t ascii[128];
  std::vector<int32_t> canonical;  // piece_to_id(piece[id]): a reserved piece wins a tie   // the
                                   // normal piece of each ASCII character, −1 if none
  SpTrie user_defined;             // matched whole before anything else
  bool has_unused = false;
  int32_t unk_id = -1;
  float min_score = 0, max_score = 0;  // over normal pieces, as unigram_model.cc computes them

  int32_t piece_to_id(std::string_view p) const {  // sentencepiece's PieceToId
    if (auto it = reserved.find(p); it != reserved.end()) return it->second;
    auto it = normal.find(p);
    return it == normal.end() ? unk_id : it->second;
  }
};

struct SpToken {  // one piece of a segmentation: normalized[begin, begin + len) is id
  uint32_t begin, len;
  int32_t id;
};

// The segmentations of a normalized text, as bpe_model.cc and unigram_model.cc Encode return
// them (unknown pieces as unk_id, one per unknown character; the caller merges and expands them).
std::vector<SpToken> sp_bpe_encode(const SpPieces& pieces, std::string_view normalized);
std::vector<SpToken> sp_unigram_encode(const SpPieces& pieces, std::string_view normalized);

}  // namespace mixserve
