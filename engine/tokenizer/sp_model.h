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

struct SpPieces {
  std::vector<std::string> piece;
  std::vector<float> score;
  std::vector<int> type;
  // sentencepiece's two lookups: normal, user-defined and unused pieces; the others (unknown,
  // control, byte), which PieceToId consults first.
  std::unordered_map<std::string_view, int32_t> normal, reserved;
  SpTrie normal_trie;   // `normal` as a trie (unigram's lattice)
  SpTrie user_defined;  // matched whole before anything else
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
