// tokenizers' normalizers: NFC/NFD/NFKC/NFKD (ICU's Normalizer2), Lowercase, Prepend, Replace,
// Strip, Sequence. Others are refused by make_normalizer.
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <stdexcept>

#include "engine/tokenizer/hf/hf_internal.h"

namespace mixserve::hf {

namespace {

bool is_ascii(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(const std::string& form) {
    UErrorCode err = U_ZERO_ERROR;
    if (form == "NFC")
      n_ = icu::Normalizer2::getNFCInstance(err);
    else if (form == "NFD")
      n_ = icu::Normalizer2::getNFDInstance(err);
    else if (form == "NFKC")
      n_ = icu::Normalizer2::getNFKCInstance(err);
    else
      n_ = icu::Normalizer2::getNFKDInstance(err);
    if (U_FAILURE(err)) throw std::runtime_error(form + " normalizer: ICU has no data for it");
  }
  void normalize(std::string& s) const override {
    if (is_ascii(s)) return;
    UErrorCode err = U_ZERO_ERROR;
    const icu::UnicodeString in = icu::UnicodeString::fromUTF8(s);
    if (n_->isNormalized(in, err) && U_SUCCESS(err)) return;
    err = U_ZERO_ERROR;
    const icu::UnicodeString out = n_->normalize(in, err);
    if (U_FAILURE(err)) throw std::runtime_error("ICU normalization failed");
    s.clear();
    out.toUTF8String(s);
  }

 private:
  const icu::Normalizer2* n_ = nullptr;
};

class Lowercase : public Normalizer {
 public:
  // Rust's char::to_lowercase, char by char (no context: a final sigma stays σ).
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      const unsigned char b = static_cast<unsigned char>(s[i]);
      if (b < 0x80) {
        out += static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b);
        ++i;
        continue;
      }
      const char32_t cp = next_cp(s, i);
      UChar src[2], dst[8];
      int32_t n = 0;
      U16_APPEND_UNSAFE(src, n, static_cast<UChar32>(cp));
      UErrorCode err = U_ZERO_ERROR;
      const int32_t m = u_strToLower(dst, 8, src, n, "", &err);
      if (U_FAILURE(err)) {
        append_utf8(out, cp);
        continue;
      }
      for (int32_t k = 0; k < m;) {
        UChar32 c;
        U16_NEXT(dst, k, m, c);
        append_utf8(out, static_cast<char32_t>(c));
      }
    }
    s = std::move(out);
  }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : p_(std::move(p)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, p_);
  }

 private:
  std::string p_;
};

class Replace : public Normalizer {
 public:
  Replace(std::unique_ptr<Regex> re, std::string content) : content_(std::move(content)) {
    p_.regex = std::move(re);
  }
  void normalize(std::string& s) const override {
    std::vector<std::pair<Span, bool>> m;
    p_.find_matches(s, m);
    std::string out;
    for (auto& [sp, is] : m) {
      if (is)
        out += content_;
      else
        out.append(s, sp.first, sp.second - sp.first);
    }
    s = std::move(out);
  }

 private:
  Pattern p_;
  std::string content_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      for (size_t i = 0; i < s.size();) {
        if (!is_whitespace(next_cp(s, i))) break;
        b = i;
      }
    }
    if (right_) {
      // Walk back over whole characters.
      while (e > b) {
        size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        size_t j = k;
        if (!is_whitespace(next_cp(s, j))) break;
        e = k;
      }
    }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> v) : v_(std::move(v)) {}
  void normalize(std::string& s) const override {
    for (auto& n : v_) n->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> v_;
};

}  // namespace

std::unique_ptr<Regex> make_pattern_regex(const nlohmann::json& pattern) {
  if (pattern.contains("String"))
    return std::make_unique<Regex>(regex_escape(pattern.at("String").get<std::string>()));
  if (pattern.contains("Regex"))
    return std::make_unique<Regex>(pattern.at("Regex").get<std::string>());
  throw std::runtime_error("pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j) {
  const std::string type = j.at("type").get<std::string>();
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return std::make_unique<UnicodeNormalizer>(type);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Prepend") return std::make_unique<Prepend>(j.at("prepend").get<std::string>());
  if (type == "Replace")
    return std::make_unique<Replace>(make_pattern_regex(j.at("pattern")),
                                     j.at("content").get<std::string>());
  if (type == "Strip")
    return std::make_unique<Strip>(j.value("strip_left", true), j.value("strip_right", true));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> v;
    for (const auto& n : j.at("normalizers")) v.push_back(make_normalizer(n));
    return std::make_unique<SequenceNormalizer>(std::move(v));
  }
  throw std::runtime_error("unsupported normalizer type \"" + type + "\"");
}

}  // namespace mixserve::hf
