// Encode and decode as tokenizers' Tokenizer::encode(text, add_special_tokens=false) and
// decode(ids, skip_special_tokens=true) do.
#include <stdexcept>

#include "engine/tokenizer/hf/hf_tokenizer_impl.h"

namespace mixserve::hf {

void HfTokenizer::finish() {
  int32_t max_id = -1;
  for (const auto& [tok, id] : model_->vocab()) {
    if (id < 0)
      throw std::runtime_error("vocab token \"" + tok + "\" has the negative id " +
                               std::to_string(id));
    max_id = std::max(max_id, id);
  }
  for (const AddedToken& t : added_) {
    if (t.id < 0)
      throw std::runtime_error("added token \"" + t.content + "\" has the negative id " +
                               std::to_string(t.id));
    max_id = std::max(max_id, t.id);
  }
  tokens_.assign(static_cast<size_t>(max_id) + 1, std::string());
  std::vector<uint8_t> have(tokens_.size(), 0);
  special_.assign(tokens_.size(), 0);
  for (const auto& [tok, id] : model_->vocab()) {
    if (have[id])
      throw std::runtime_error("vocab id " + std::to_string(id) + " is given to both \"" +
                               tokens_[id] + "\" and \"" + tok + "\"");
    have[id] = 1;
    tokens_[id] = tok;
  }
  for (const AddedToken& t : added_) {
    auto v = model_->vocab().find(t.content);
    if (v != model_->vocab().end() && v->second != t.id)
      throw std::runtime_error("added token \"" + t.content + "\" has id " + std::to_string(t.id) +
                               " but the vocab gives it " + std::to_string(v->second));
    if (have[t.id] && tokens_[t.id] != t.content)
      throw std::runtime_error("id " + std::to_string(t.id) + " is given to both \"" +
                               tokens_[t.id] + "\" and the added token \"" + t.content + "\"");
    auto [it, fresh] = added_ids_.emplace(t.content, t.id);
    if (!fresh && it->second != t.id)
      throw std::runtime_error("added token \"" + t.content +
                               "\" appears twice with different ids");
    have[t.id] = 1;
    tokens_[t.id] = t.content;
    if (t.special) special_[t.id] = 1;
  }
  for (size_t id = 0; id < have.size(); ++id)
    if (!have[id])
      throw std::runtime_error("no token has id " + std::to_string(id) +
                               " (ids must run from 0 without gaps; the largest is " +
                               std::to_string(max_id) + ")");
  for (const AddedToken& t : added_) (t.normalized && normalizer_ ? normalized_ : raw_).add(&t);
  texts_.resize(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    std::string t = tokens_[id];
    if (!special_[id] && decoder_) decoder_->token_inside(t);
    if (!is_valid_utf8(t)) {
      static const char hex[] = "0123456789abcdef";
      std::string b = "bytes:";  // as OpenAI shows a token that is not text: bytes:\xe2\x80
      for (char c : t) {
        const auto u = static_cast<unsigned char>(c);
        b += std::string("\\x") + hex[u >> 4] + hex[u & 15];
      }
      t = std::move(b);
    }
    texts_[id] = std::move(t);
  }
}

size_t HfTokenizer::check(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size())
    throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                            std::to_string(tokens_.size()) + ")");
  return static_cast<size_t>(id);
}

int32_t HfTokenizer::piece_to_id(std::string_view piece) const {
  const std::string p(piece);
  if (auto it = added_ids_.find(p); it != added_ids_.end()) return it->second;
  if (auto it = model_->vocab().find(p); it != model_->vocab().end()) return it->second;
  return -1;
}

void HfTokenizer::pre_tokenize(std::string_view s, bool at_start, std::vector<int32_t>& ids) const {
  if (s.empty()) return;
  if (!pre_) {
    model_->tokenize(s, ids);
    return;
  }
  pre_->split(s, at_start, [&](std::string_view word, bool) { model_->tokenize(word, ids); });
}

void HfTokenizer::encode_text(std::string_view s, bool at_start, std::vector<int32_t>& ids) const {
  if (!normalizer_) {
    pre_tokenize(s, at_start, ids);
    return;
  }
  std::string norm(s);
  normalizer_->normalize(norm);
  if (normalized_.empty()) {
    pre_tokenize(norm, at_start, ids);
    return;
  }
  std::vector<Split> splits;
  normalized_.find_matches(norm, splits);
  for (const Split& sp : splits) {
    if (sp.id >= 0)
      ids.push_back(sp.id);
    else
      pre_tokenize(std::string_view(norm).substr(sp.start, sp.end - sp.start),
                   at_start && sp.start == 0, ids);
  }
}

std::vector<int32_t> HfTokenizer::encode(const std::string& text) const {
  // Rust strings are valid UTF-8: other input is read as from_utf8_lossy reads it.
  std::string fixed;
  std::string_view s = text;
  if (!is_valid_utf8(s)) {
    fixed = utf8_lossy(s);
    s = fixed;
  }
  std::vector<int32_t> ids;
  ids.reserve(s.size() / 4 + 4);
  if (raw_.empty()) {
    encode_text(s, true, ids);
    return ids;
  }
  std::vector<Split> splits;
  raw_.find_matches(s, splits);
  for (const Split& sp : splits) {
    if (sp.id >= 0)
      ids.push_back(sp.id);
    else
      encode_text(s.substr(sp.start, sp.end - sp.start), sp.start == 0, ids);
  }
  return ids;
}

std::string HfTokenizer::decode(const int32_t* ids, size_t n) const {
  std::vector<std::string> toks;
  toks.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t id = check(ids[i]);
    if (!special_[id]) toks.push_back(tokens_[id]);
  }
  std::string out;
  if (decoder_) {
    decoder_->decode_chain(toks);
    for (const std::string& t : toks) out += t;
  } else {
    for (size_t i = 0; i < toks.size(); ++i) out += (i ? " " : "") + toks[i];
  }
  return out;
}

}  // namespace mixserve::hf
