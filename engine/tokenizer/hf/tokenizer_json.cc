// Reads tokenizer.json (Hugging Face tokenizers' format, BPE models) and GPT-2's vocab.json +
// merges.txt into an HfTokenizer. Anything unsupported or malformed is a ModelError naming the
// file and the reason, on one line.
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine/model_error.h"
#include "engine/tokenizer/hf/hf_tokenizer_impl.h"
#include "engine/tokenizer/hf_tokenizer.h"

namespace mixserve {

int64_t hf::json_uint(const nlohmann::json& j, const char* what, int64_t max) {
  if (!j.is_number_integer() ||
      (j.is_number_unsigned() ? j.get<uint64_t>() > uint64_t(max)
                              : j.get<int64_t>() < 0 || j.get<int64_t>() > max))
    throw std::runtime_error(std::string(what) + " " + j.dump() + " is not an integer in [0, " +
                             std::to_string(max) + "]");
  return j.get<int64_t>();
}

namespace {

using nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ModelError(path + ": cannot read the file");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// nlohmann's "[json.exception.type_error.302] type must be ..." without the bracket.
std::string json_reason(const json::exception& e) {
  std::string m = e.what();
  const size_t k = m.find("] ");
  return k == std::string::npos ? m : m.substr(k + 2);
}

bool present(const json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

hf::BpeConfig bpe_config(const json& m) {
  if (!m.is_object()) throw std::runtime_error("\"model\" is not an object");
  const std::string type = m.value("type", std::string("BPE"));
  if (type != "BPE")
    throw std::runtime_error("unsupported model type \"" + type + "\" (only BPE is supported)");
  if (present(m, "dropout") && m["dropout"].get<double>() != 0.0)
    throw std::runtime_error("BPE dropout " + m["dropout"].dump() +
                             " is not supported (encoding would be random)");
  hf::BpeConfig c;
  const json& vocab = m.at("vocab");
  if (!vocab.is_object()) throw std::runtime_error("model.vocab is not an object");
  c.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    c.vocab.emplace(it.key(), int32_t(hf::json_uint(it.value(), "token id")));
  for (const json& merge : m.at("merges")) {
    if (merge.is_string()) {
      const std::string s = merge.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos)
        throw std::runtime_error("merge \"" + s + "\" is not two tokens separated by a space");
      c.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (merge.is_array() && merge.size() == 2) {
      c.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      throw std::runtime_error("merge " + merge.dump() + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  if (present(m, "unk_token")) c.unk_token = m["unk_token"].get<std::string>(), c.has_unk = true;
  c.fuse_unk = m.value("fuse_unk", false);
  c.byte_fallback = m.value("byte_fallback", false);
  c.ignore_merges = m.value("ignore_merges", false);
  if (present(m, "continuing_subword_prefix"))
    c.continuing_subword_prefix = m["continuing_subword_prefix"].get<std::string>();
  if (present(m, "end_of_word_suffix"))
    c.end_of_word_suffix = m["end_of_word_suffix"].get<std::string>();
  return c;
}

// The ids a post-processor puts before a single sequence.
std::vector<int32_t> post_prefix(const json& p, const hf::HfTokenizer& tok) {
  const std::string type = p.at("type").get<std::string>();
  if (type == "ByteLevel") return {};
  if (type == "TemplateProcessing") {
    std::vector<int32_t> ids;
    for (const json& item : p.at("single")) {
      if (!item.contains("SpecialToken")) break;
      const std::string name = item["SpecialToken"].at("id").get<std::string>();
      const json& st = p.at("special_tokens");
      if (!st.contains(name))
        throw std::runtime_error("TemplateProcessing names the special token \"" + name +
                                 "\" without defining it");
      for (const json& id : st[name].at("ids"))
        ids.push_back(int32_t(hf::json_uint(id, "special token id")));
    }
    return ids;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing")
    return {int32_t(hf::json_uint(p.at("cls").at(1), "cls token id"))};
  if (type == "Sequence") {
    std::vector<int32_t> ids;
    for (const json& q : p.at("processors")) {
      const auto more = post_prefix(q, tok);
      ids.insert(ids.end(), more.begin(), more.end());
    }
    return ids;
  }
  throw std::runtime_error("unsupported post_processor type \"" + type + "\"");
}

std::unique_ptr<Tokenizer> parse_tokenizer_json(const std::string& text) {
  const json j = json::parse(text);
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  auto tok = std::make_unique<hf::HfTokenizer>();
  tok->kind_ = "tokenizer.json-bpe";
  tok->model_ = std::make_unique<hf::BpeModel>(bpe_config(j.at("model")));
  if (present(j, "normalizer")) tok->normalizer_ = hf::make_normalizer(j["normalizer"]);
  if (present(j, "pre_tokenizer")) tok->pre_ = hf::make_pre_tokenizer(j["pre_tokenizer"]);
  if (present(j, "decoder")) tok->decoder_ = hf::make_decoder(j["decoder"]);
  if (present(j, "added_tokens")) {
    for (const json& a : j["added_tokens"]) {
      hf::AddedToken t;
      t.id = int32_t(hf::json_uint(a.at("id"), "added token id"));
      t.content = a.at("content").get<std::string>();
      t.special = a.value("special", false);
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.normalized = a.value("normalized", !t.special);
      tok->added_.push_back(std::move(t));
    }
  }
  tok->finish();
  if (present(j, "post_processor")) {
    tok->prefix_ = post_prefix(j["post_processor"], *tok);
    for (int32_t id : tok->prefix_)
      if (id < 0 || id >= tok->vocab_size())
        throw std::runtime_error("post_processor id " + std::to_string(id) +
                                 " is outside the vocabulary");
  }
  return tok;
}

template <typename F>
std::unique_ptr<Tokenizer> with_file_name(const std::string& name, F&& f) {
  try {
    return f();
  } catch (const ModelError&) {
    throw;
  } catch (const json::exception& e) {
    throw ModelError(name + ": " + json_reason(e));
  } catch (const std::exception& e) {
    throw ModelError(name + ": " + e.what());
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json_from_memory(const std::string& json_text,
                                                           const std::string& name) {
  return with_file_name(name, [&] { return parse_tokenizer_json(json_text); });
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path) {
  return load_tokenizer_json_from_memory(read_file(path), path);
}

std::unique_ptr<Tokenizer> load_gpt2_vocab_merges_from_memory(const std::string& vocab_text,
                                                              const std::string& merges_text,
                                                              const std::string& vocab_name,
                                                              const std::string& merges_name) {
  hf::BpeConfig c;
  with_file_name(vocab_name, [&]() -> std::unique_ptr<Tokenizer> {
    const json v = json::parse(vocab_text);
    if (!v.is_object()) throw std::runtime_error("not a JSON object of token: id");
    for (auto it = v.begin(); it != v.end(); ++it)
      c.vocab.emplace(it.key(), int32_t(hf::json_uint(it.value(), "token id")));
    return nullptr;
  });
  with_file_name(merges_name, [&]() -> std::unique_ptr<Tokenizer> {
    std::istringstream in(merges_text);
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("#version", 0) == 0) continue;
      if (line.empty() && in.peek() == std::char_traits<char>::eof()) break;
      const size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        throw std::runtime_error("line " + std::to_string(n) +
                                 " is not two tokens separated by one space");
      c.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
    return nullptr;
  });
  return with_file_name(vocab_name + " + " + merges_name, [&]() -> std::unique_ptr<Tokenizer> {
    auto tok = std::make_unique<hf::HfTokenizer>();
    tok->kind_ = "gpt2-vocab-merges";
    const auto eot = c.vocab.find("<|endoftext|>");
    if (eot != c.vocab.end()) {
      tok->added_.push_back({eot->second, "<|endoftext|>", true, false, false, false, false});
      tok->bos_ = tok->eos_ = eot->second;
    }
    tok->model_ = std::make_unique<hf::BpeModel>(std::move(c));
    tok->pre_ = hf::make_byte_level(false, true);
    tok->decoder_ = hf::make_decoder(json{{"type", "ByteLevel"}});
    tok->finish();
    return tok;
  });
}

std::unique_ptr<Tokenizer> load_gpt2_vocab_merges(const std::string& vocab_json,
                                                  const std::string& merges_txt) {
  return load_gpt2_vocab_merges_from_memory(read_file(vocab_json), read_file(merges_txt),
                                            vocab_json, merges_txt);
}

}  // namespace mixserve
