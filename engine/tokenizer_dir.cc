#include "engine/tokenizer_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/model_error.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/sentencepiece.h"

namespace mixserve {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A JSON file of the directory, or null when it is absent. Malformed JSON is an error: a file the
// user put there that says something we cannot read must not be ignored.
json read_json(const fs::path& path) {
  if (!fs::exists(path)) return nullptr;
  std::ifstream f(path);
  if (!f) throw ModelError(path.string() + ": cannot read");
  json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ModelError(path.string() + ": not valid JSON");
  if (!j.is_object()) throw ModelError(path.string() + ": not a JSON object");
  return j;
}

// A token's name quoted for a one-line message: JSON escapes control characters, and bytes that
// are not UTF-8 become U+FFFD.
std::string quote_token(const std::string& name) {
  return json(name).dump(-1, ' ', false, json::error_handler_t::replace);
}

// A special token as tokenizer_config.json and special_tokens_map.json write it: a string, or
// an AddedToken object {"content": "...", ...}; null or absent means none.
std::optional<std::string> token_name(const json& file, const char* key, const fs::path& path) {
  if (file.is_null() || !file.contains(key) || file[key].is_null()) return std::nullopt;
  const json& v = file[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  throw ModelError(path.string() + ": " + key +
                   " must be a string or an object with a \"content\" string");
}

// generation_config.json's token ids: an integer or a list of integers.
std::vector<int32_t> token_ids(const json& file, const char* key, const fs::path& path,
                               int vocab_size) {
  std::vector<int32_t> ids;
  if (file.is_null() || !file.contains(key) || file[key].is_null()) return ids;
  const json& v = file[key];
  auto one = [&](const json& x) {
    if (!x.is_number_integer())
      throw ModelError(path.string() + ": " + key + " must be a token id or a list of token ids");
    if (x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab_size)
      throw ModelError(path.string() + ": " + key + " " + x.dump() +
                       " is outside the tokenizer's vocabulary [0, " + std::to_string(vocab_size) +
                       ")");
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  };
  if (v.is_array())
    for (const json& x : v) one(x);
  else
    one(v);
  return ids;
}

std::unique_ptr<Tokenizer> open_tokenizer(const fs::path& p, std::string& files) {
  if (fs::exists(p / "tokenizer.json")) {
    files = "tokenizer.json";
    return load_tokenizer_json((p / "tokenizer.json").string());
  }
  if (fs::exists(p / "tokenizer.model")) {
    files = "tokenizer.model";
    return load_sentencepiece((p / "tokenizer.model").string());
  }
  const bool vocab = fs::exists(p / "vocab.json"), merges = fs::exists(p / "merges.txt");
  if (vocab && merges) {
    files = "vocab.json + merges.txt";
    return load_gpt2_vocab_merges((p / "vocab.json").string(), (p / "merges.txt").string());
  }
  if (vocab || merges)
    throw ModelError((p / (vocab ? "vocab.json" : "merges.txt")).string() + ": found without " +
                     (vocab ? "merges.txt" : "vocab.json") + "; a GPT-2 tokenizer needs both");
  return nullptr;
}

void read_chat_template(const fs::path& p, const json& config, const fs::path& config_path,
                        TokenizerSetup& s) {
  const fs::path jinja = p / "chat_template.jinja";
  if (fs::exists(jinja)) {
    std::ifstream f(jinja, std::ios::binary);
    if (!f) throw ModelError(jinja.string() + ": cannot read it");
    s.chat_template.assign(std::istreambuf_iterator<char>(f), {});
    s.chat_template_file = jinja.string();
    return;
  }
  if (config.is_null() || !config.contains("chat_template") || config["chat_template"].is_null())
    return;
  const json& t = config["chat_template"];
  s.chat_template_file = config_path.string();
  if (t.is_string()) {
    s.chat_template = t.get<std::string>();
    return;
  }
  if (t.is_array()) {  // named templates (transformers): "default" is the chat template
    for (const json& named : t)
      if (named.is_object() && named.value("name", json()) == "default" &&
          named.contains("template") && named["template"].is_string()) {
        s.chat_template = named["template"].get<std::string>();
        return;
      }
    s.chat_template_file.clear();
    return;  // tool-use or RAG templates only: no chat template
  }
  throw ModelError(config_path.string() +
                   ": chat_template must be a string or a list of {\"name\", \"template\"}");
}

}  // namespace

TokenizerSetup load_tokenizer_dir(const std::string& dir) {
  const fs::path p(dir);
  TokenizerSetup s;
  s.tokenizer = open_tokenizer(p, s.files);
  if (!s.tokenizer) return s;
  const Tokenizer& tok = *s.tokenizer;
  const fs::path config_path = p / "tokenizer_config.json",
                 map_path = p / "special_tokens_map.json", gen_path = p / "generation_config.json";
  const json config = read_json(config_path), map = read_json(map_path), gen = read_json(gen_path);

  // transformers reads tokenizer_config.json, then lets special_tokens_map.json override it.
  auto resolve = [&](const char* key, int32_t fallback) {
    std::optional<std::string> name = token_name(map, key, map_path);
    fs::path from = map_path;
    if (!name) {
      name = token_name(config, key, config_path);
      from = config_path;
    }
    if (!name) return fallback;
    const int32_t id = tok.piece_to_id(*name);
    if (id < 0)
      throw ModelError(from.string() + ": " + key + " " + quote_token(*name) +
                       " is not a token of " + s.files);
    return id;
  };
  // generation_config.json's ids come first where tokenizer files name no token, as in vLLM.
  const int V = tok.vocab_size();
  const std::vector<int32_t> gen_bos = token_ids(gen, "bos_token_id", gen_path, V),
                             gen_eos = token_ids(gen, "eos_token_id", gen_path, V),
                             gen_pad = token_ids(gen, "pad_token_id", gen_path, V);
  s.bos_id = resolve("bos_token", gen_bos.empty() ? tok.bos_id() : gen_bos.front());
  s.eos_id = resolve("eos_token", gen_eos.empty() ? tok.eos_id() : gen_eos.front());
  s.pad_id = resolve("pad_token", gen_pad.empty() ? -1 : gen_pad.front());

  if (!config.is_null() && config.contains("add_bos_token") && !config["add_bos_token"].is_null()) {
    if (!config["add_bos_token"].is_boolean())
      throw ModelError(config_path.string() + ": add_bos_token must be true or false");
    s.add_bos = config["add_bos_token"].get<bool>();
    if (s.add_bos && s.bos_id < 0)
      throw ModelError(config_path.string() + ": add_bos_token is true but no bos_token is set");
    if (s.add_bos) s.prompt_prefix = {s.bos_id};
  } else {
    s.prompt_prefix = tok.template_prefix();
    s.add_bos = !s.prompt_prefix.empty() && s.prompt_prefix.front() == s.bos_id;
  }

  if (s.bos_id >= 0) s.bos_token = tok.id_to_piece(s.bos_id);
  if (s.eos_id >= 0) s.eos_token = tok.id_to_piece(s.eos_id);
  read_chat_template(p, config, config_path, s);

  if (s.eos_id >= 0) s.stop_ids.push_back(s.eos_id);
  for (int32_t id : gen_eos)
    if (std::find(s.stop_ids.begin(), s.stop_ids.end(), id) == s.stop_ids.end())
      s.stop_ids.push_back(id);
  return s;
}

}  // namespace mixserve
