// tokenizers' decoders (decode_chain over the token strings): ByteLevel, ByteFallback, Fuse,
// Strip, Replace, Metaspace, Sequence.
#include <stdexcept>

#include "engine/tokenizer/hf/hf_internal.h"

namespace mixserve::hf {

namespace {

// The bytes a byte-level token stands for; its own UTF-8 when a char stands for no byte.
std::string byte_level_bytes(const std::string& t) {
  std::string bytes;
  for (size_t i = 0; i < t.size();) {
    const int b = symbol_to_byte(next_cp(t, i));
    if (b < 0) return t;
    bytes += static_cast<char>(b);
  }
  return bytes;
}

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) bytes += byte_level_bytes(t);
    tokens.assign(1, utf8_lossy(bytes));
  }
  void token_inside(std::string& t) const override { t = byte_level_bytes(t); }
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xE2>" -> 0xE2 as u8::from_str_radix(&t[3..5], 16) reads it; -1 otherwise.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  if (t[3] == '+' && lo >= 0) return lo;
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    const auto flush = [&] {
      if (bytes.empty()) return;
      if (is_valid_utf8(bytes))
        out.push_back(bytes);
      else
        for (size_t k = 0; k < bytes.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      bytes.clear();
    };
    for (std::string& t : tokens) {
      const int b = fallback_byte(t);
      if (b >= 0) {
        bytes += static_cast<char>(b);
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
  void token_inside(std::string& t) const override {
    const int b = fallback_byte(t);
    if (b >= 0) t = std::string(1, static_cast<char>(b));
  }
};

class Fuse : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t c, size_t start, size_t stop) : c_(c), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<size_t> at;  // byte offset of each char
      for (size_t i = 0; i < t.size();) {
        at.push_back(i);
        next_cp(t, i);
      }
      const size_t n = at.size();
      const auto cp = [&](size_t k) {
        size_t i = at[k];
        return next_cp(t, i);
      };
      size_t start_cut = 0, stop_cut = n;
      for (size_t k = 0; k < n && k < start_; ++k) {
        if (cp(k) != c_) break;
        start_cut = k + 1;
      }
      for (size_t k = 0; k < n && k < stop_; ++k) {
        if (cp(n - 1 - k) != c_) break;
        stop_cut = n - 1 - k;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      const size_t b = at[start_cut], e = stop_cut == n ? t.size() : at[stop_cut];
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t c_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> re, std::string content) : content_(std::move(content)) {
    p_.regex = std::move(re);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) token_inside(t);
  }
  void token_inside(std::string& t) const override {
    std::vector<std::pair<Span, bool>> m;
    p_.find_matches(t, m);
    std::string out;
    for (auto& [sp, is] : m) {
      if (is)
        out += content_;
      else
        out.append(t, sp.first, sp.second - sp.first);
    }
    t = std::move(out);
  }

 private:
  Pattern p_;
  std::string content_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t rep, bool prepend) : rep_(rep), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) replace(tokens[k], k == 0 && prepend_);
  }
  void token_inside(std::string& t) const override { replace(t, false); }

 private:
  void replace(std::string& t, bool first) const {
    std::string out;
    for (size_t i = 0; i < t.size();) {
      const size_t s = i;
      const char32_t c = next_cp(t, i);
      if (c != rep_)
        out.append(t, s, i - s);
      else if (!first)
        out += ' ';
    }
    t = std::move(out);
  }
  char32_t rep_;
  bool prepend_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> v) : v_(std::move(v)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& d : v_) d->decode_chain(tokens);
  }
  void token_inside(std::string& t) const override {
    for (auto& d : v_) d->token_inside(t);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> v_;
};

char32_t one_char(const std::string& s, const char* what) {
  size_t i = 0;
  if (s.empty()) throw std::runtime_error(std::string(what) + " is empty");
  const char32_t c = next_cp(s, i);
  if (i != s.size())
    throw std::runtime_error(std::string(what) + " \"" + s + "\" is not one character");
  return c;
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j) {
  const std::string type = j.at("type").get<std::string>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(
        one_char(j.at("content").get<std::string>(), "Strip content"),
        size_t(json_uint(j.at("start"), "Strip start")),
        size_t(json_uint(j.at("stop"), "Strip stop")));
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(make_pattern_regex(j.at("pattern")),
                                            j.at("content").get<std::string>());
  if (type == "Metaspace") {
    bool prepend = true;
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null())
      prepend = j["prepend_scheme"].get<std::string>() != "never";
    else if (j.contains("add_prefix_space"))
      prepend = j["add_prefix_space"].get<bool>();
    return std::make_unique<MetaspaceDecoder>(
        one_char(j.value("replacement", std::string("\xE2\x96\x81")), "Metaspace replacement"),
        prepend);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> v;
    for (const auto& d : j.at("decoders")) v.push_back(make_decoder(d));
    return std::make_unique<SequenceDecoder>(std::move(v));
  }
  throw std::runtime_error("unsupported decoder type \"" + type + "\"");
}

}  // namespace mixserve::hf
