// sentencepiece's unigram segmentation (unigram_model.cc, EncodeOptimized): the Viterbi path of
// highest total score, from the pieces that start at each character. A character no piece of
// exactly its length covers gets an unknown piece scored kUnkPenalty below the lowest piece;
// user-defined symbols score length × max_score − 0.1, which beats any split of them.
#include <algorithm>

#include "engine/tokenizer/sp_model.h"
#include "engine/tokenizer/sp_normalizer.h"

namespace mixserve {

std::vector<SpToken> sp_unigram_encode(const SpPieces& pieces, std::string_view norm) {
  constexpr float kUnkPenalty = 10.0f;
  struct Best {  // the best path ending at a byte position
    float score = 0;
    int32_t start = -1, id = -1;
  };
  const size_t size = norm.size();
  const float unk_score = pieces.min_score - kUnkPenalty;
  std::vector<Best> best(size + 1);
  for (size_t start = 0; start < size;) {
    const float here = best[start].score;
    const size_t char_len = sp_one_char_len(norm.substr(start));
    bool covered = false;  // a piece of exactly this character's length
    // The sums are computed as sentencepiece computes them (the user-defined score in double,
    // every total stored as float), so ties and near-ties resolve the same way.
    auto offer = [&](size_t end, double score, int32_t id) {
      const double total = score + here;
      Best& b = best[end];
      if (b.start == -1 || total > b.score)
        b = {static_cast<float>(total), static_cast<int32_t>(start), id};
    };
    pieces.normal_trie.prefixes(norm.substr(start), [&](size_t len, int32_t id) {
      const int type = pieces.type[id];
      if (type == kSpUnused) return;
      offer(start + len, type == kSpUserDefined ? len * pieces.max_score - 0.1 : pieces.score[id],
            id);
      covered |= len == char_len;
    });
    if (!covered) offer(start + char_len, unk_score, pieces.unk_id);
    start += char_len;
  }
  std::vector<SpToken> out;
  for (size_t end = size; end > 0;) {
    const Best& b = best[end];
    out.push_back({static_cast<uint32_t>(b.start), static_cast<uint32_t>(end - b.start), b.id});
    end = static_cast<size_t>(b.start);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace mixserve
