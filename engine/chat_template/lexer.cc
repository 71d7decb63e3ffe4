// The lexer: @huggingface/jinja's preprocessing (one trailing newline dropped, lstrip_blocks,
// trim_blocks, the `generation` tags removed) then its tokenizer, rule for rule. Every byte kept
// remembers where it was in the source, for "line L, column C" in syntax errors.
#include <string>
#include <vector>

#include "engine/chat_template/internal.h"

namespace mixserve::jinja {

void fail(const std::string& message) {
  throw ChatTemplateError(message);
}

void syntax_error(const std::string& source, size_t pos, const std::string& message) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < pos && i < source.size();) {
    if (source[i] == '\n') {
      ++line;
      column = 1;
      ++i;
    } else {
      decode_utf8(source, i);
      ++column;
    }
  }
  fail("line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message);
}

namespace {

// Text with, for every byte, its offset in the original source.
struct Src {
  std::string s;
  std::vector<size_t> at;
  void put(const Src& from, size_t i) {
    s.push_back(from.s[i]);
    at.push_back(from.at[i]);
  }
};

bool space_at(const std::string& s, size_t i, size_t* len = nullptr) {
  if (i >= s.size()) return false;
  size_t j = i;
  const uint32_t cp = decode_utf8(s, j);
  if (len) *len = j - i;
  return js_space(cp);
}

bool is_line_start(const std::string& s, size_t i) {
  if (i == 0) return true;
  if (s[i - 1] == '\n' || s[i - 1] == '\r') return true;
  // U+2028 and U+2029 end lines for JavaScript's ^ with the m flag.
  return i >= 3 && s.compare(i - 3, 2, "\xE2\x80") == 0 &&
         (s[i - 1] == '\xA8' || s[i - 1] == '\xA9');
}

Src preprocess(const std::string& source) {
  Src in;
  in.s = source;
  in.at.resize(source.size());
  for (size_t i = 0; i < source.size(); ++i) in.at[i] = i;
  if (!in.s.empty() && in.s.back() == '\n') {
    in.s.pop_back();
    in.at.pop_back();
  }
  // lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1"
  Src l;
  for (size_t i = 0; i < in.s.size();) {
    if (is_line_start(in.s, i)) {
      size_t j = i;
      while (j < in.s.size() && (in.s[j] == ' ' || in.s[j] == '\t')) ++j;
      if (j + 1 < in.s.size() && in.s[j] == '{' &&
          (in.s[j + 1] == '#' || in.s[j + 1] == '%' || in.s[j + 1] == '-')) {
        i = j;
      }
    }
    l.put(in, i++);
    // A line start may follow any byte: keep copying one byte at a time.
  }
  // trim_blocks: /([#%-]})\n/g -> "$1"
  Src t;
  for (size_t i = 0; i < l.s.size(); ++i) {
    t.put(l, i);
    if (i + 2 < l.s.size() && l.s[i + 1] == '}' && l.s[i + 2] == '\n' &&
        (l.s[i] == '#' || l.s[i] == '%' || l.s[i] == '-')) {
      t.put(l, ++i);
      ++i;  // the newline
    }
  }
  // /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs -> (lstrip ? "" : before) + (rstrip ? "" :
  // after)
  Src g;
  const std::string& s = t.s;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i, len = 0;
    while (space_at(s, j, &len)) j += len;
    bool matched = false;
    if (s.compare(j, 2, "{%") == 0) {
      size_t k = j + 2;
      const bool lstrip = k < s.size() && s[k] == '-';
      if (lstrip) ++k;
      while (space_at(s, k, &len)) k += len;
      if (s.compare(k, 3, "end") == 0 && s.compare(k + 3, 10, "generation") == 0) k += 3;
      if (s.compare(k, 10, "generation") == 0) {
        k += 10;
        while (space_at(s, k, &len)) k += len;
        const bool rstrip = k < s.size() && s[k] == '-';
        if (rstrip) ++k;
        if (s.compare(k, 2, "%}") == 0) {
          k += 2;
          size_t e = k;
          while (space_at(s, e, &len)) e += len;
          if (!lstrip)
            for (size_t q = i; q < j; ++q) g.put(t, q);
          if (!rstrip)
            for (size_t q = k; q < e; ++q) g.put(t, q);
          i = e;
          matched = true;
        }
      }
    }
    if (!matched) {
      if (j == i) j = i + 1;
      for (size_t q = i; q < j; ++q) g.put(t, q);
      i = j;
    }
  }
  return g;
}

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

struct Table {
  const char* seq;
  Tok type;
};
constexpr Table kTable[] = {{"{%", Tok::OpenStatement},  {"%}", Tok::CloseStatement},
                            {"{{", Tok::OpenExpression}, {"}}", Tok::CloseExpression},
                            {"(", Tok::OpenParen},       {")", Tok::CloseParen},
                            {"{", Tok::OpenCurly},       {"}", Tok::CloseCurly},
                            {"[", Tok::OpenSquare},      {"]", Tok::CloseSquare},
                            {",", Tok::Comma},           {".", Tok::Dot},
                            {":", Tok::Colon},           {"|", Tok::Pipe},
                            {"<=", Tok::Comparison},     {">=", Tok::Comparison},
                            {"==", Tok::Comparison},     {"!=", Tok::Comparison},
                            {"<", Tok::Comparison},      {">", Tok::Comparison},
                            {"+", Tok::Additive},        {"-", Tok::Additive},
                            {"~", Tok::Additive},        {"**", Tok::Power},
                            {"*", Tok::Multiplicative},  {"//", Tok::Multiplicative},
                            {"/", Tok::Multiplicative},  {"%", Tok::Multiplicative},
                            {"=", Tok::Equals}};

class Lexer {
 public:
  explicit Lexer(const std::string& source) : source_(source), src_(preprocess(source)) {}

  std::vector<Token> run() {
    const std::string& s = src_.s;
    int curly = 0;
    while (pos_ < s.size()) {
      const Tok* last = tokens_.empty() ? nullptr : &tokens_.back().type;
      if (!last || *last == Tok::CloseStatement || *last == Tok::CloseExpression ||
          *last == Tok::Comment) {
        const size_t start = pos_;
        while (pos_ < s.size() &&
               !(s[pos_] == '{' && pos_ + 1 < s.size() &&
                 (s[pos_ + 1] == '%' || s[pos_ + 1] == '{' || s[pos_ + 1] == '#')))
          ++pos_;
        if (pos_ > start) {
          push(Tok::Text, s.substr(start, pos_ - start), start);
          continue;
        }
      }
      if (s.compare(pos_, 2, "{#") == 0) {
        const size_t start = pos_;
        pos_ += 2;
        const bool strip_before = pos_ < s.size() && s[pos_] == '-';
        if (strip_before) ++pos_;
        const size_t body = pos_;
        while (!(pos_ + 1 < s.size() && s[pos_] == '#' && s[pos_ + 1] == '}')) {
          if (pos_ + 2 >= s.size()) error(start, "Missing end of comment tag");
          ++pos_;
        }
        std::string comment = s.substr(body, pos_ - body);
        const bool strip_after = !comment.empty() && comment.back() == '-';
        if (strip_after) comment.pop_back();
        if (strip_before) strip_trailing();
        push(Tok::Comment, comment, start);
        pos_ += 2;
        if (strip_after) skip_spaces();
        continue;
      }
      if (s.compare(pos_, 3, "{%-") == 0) {
        strip_trailing();
        push(Tok::OpenStatement, "{%", pos_);
        pos_ += 3;
        continue;
      }
      if (s.compare(pos_, 3, "{{-") == 0) {
        strip_trailing();
        push(Tok::OpenExpression, "{{", pos_);
        curly = 0;
        pos_ += 3;
        continue;
      }
      consume_spaces();
      if (s.compare(pos_, 3, "-%}") == 0) {
        push(Tok::CloseStatement, "%}", pos_);
        pos_ += 3;
        skip_spaces();
        continue;
      }
      if (s.compare(pos_, 3, "-}}") == 0) {
        push(Tok::CloseExpression, "}}", pos_);
        pos_ += 3;
        skip_spaces();
        continue;
      }
      if (pos_ >= s.size()) break;  // JavaScript reads past the end here; it then fails the same
      const char c = s[pos_];
      if (c == '-' || c == '+') {
        const Tok* prev = tokens_.empty() ? nullptr : &tokens_.back().type;
        if (!prev || *prev == Tok::Text) error(pos_, std::string("Unexpected character: ") + c);
        if (*prev != Tok::Ident && *prev != Tok::Number && *prev != Tok::String &&
            *prev != Tok::CloseParen && *prev != Tok::CloseSquare) {
          const size_t start = pos_++;
          std::string num = digits();
          if (!num.empty() && pos_ + 1 < s.size() && s[pos_] == '.' && is_digit(s[pos_ + 1])) {
            ++pos_;
            num.push_back('.');
            num.append(digits());
          }
          std::string text(1, c);
          text.append(num);
          push(num.empty() ? Tok::Unary : Tok::Number, text, start);
          continue;
        }
      }
      bool matched = false;
      for (const Table& t : kTable) {
        const std::string_view seq(t.seq);
        if (seq == "}}" && curly > 0) continue;
        if (s.compare(pos_, seq.size(), seq) == 0) {
          push(t.type, std::string(seq), pos_);
          if (t.type == Tok::OpenExpression) curly = 0;
          if (t.type == Tok::OpenCurly) ++curly;
          if (t.type == Tok::CloseCurly) --curly;
          pos_ += seq.size();
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (c == '\'' || c == '"') {
        const size_t start = pos_++;
        push(Tok::String, string_literal(c, start), start);
        ++pos_;
        continue;
      }
      if (is_digit(c)) {
        const size_t start = pos_;
        std::string num = digits();
        if ((tokens_.empty() || tokens_.back().type != Tok::Dot) && pos_ + 1 < s.size() &&
            s[pos_] == '.' && is_digit(s[pos_ + 1])) {
          ++pos_;
          num.push_back('.');
          num.append(digits());
        }
        push(Tok::Number, num, start);
        continue;
      }
      if (is_word(c)) {
        const size_t start = pos_;
        while (pos_ < s.size() && is_word(s[pos_])) ++pos_;
        at_end_check(start);
        push(Tok::Ident, s.substr(start, pos_ - start), start);
        continue;
      }
      size_t j = pos_;
      decode_utf8(s, j);
      error(pos_, "Unexpected character: " + s.substr(pos_, j - pos_));
    }
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(size_t pos, const std::string& message) {
    const size_t at = pos < src_.at.size() ? src_.at[pos] : source_.size();
    syntax_error(source_, at, message);
  }
  void push(Tok type, std::string value, size_t pos) {
    const size_t at = pos < src_.at.size() ? src_.at[pos] : source_.size();
    tokens_.push_back(Token{type, std::move(value), at});
  }
  // The oracle's consumeWhile fails when a consumed character reaches the end of the input.
  void at_end_check(size_t start) {
    if (pos_ > start && pos_ >= src_.s.size()) error(start, "Unexpected end of input");
  }
  std::string digits() {
    const size_t start = pos_;
    while (pos_ < src_.s.size() && is_digit(src_.s[pos_])) ++pos_;
    at_end_check(start);
    return src_.s.substr(start, pos_ - start);
  }
  void consume_spaces() {
    const size_t start = pos_;
    size_t len = 0;
    while (space_at(src_.s, pos_, &len)) pos_ += len;
    at_end_check(start);
  }
  void skip_spaces() {
    size_t len = 0;
    while (space_at(src_.s, pos_, &len)) pos_ += len;
  }
  void strip_trailing() {
    if (tokens_.empty() || tokens_.back().type != Tok::Text) return;
    std::string& v = tokens_.back().value;
    v = js_trim(v, false, true);
    if (v.empty()) tokens_.pop_back();
  }
  std::string string_literal(char quote, size_t start) {
    const std::string& s = src_.s;
    std::string out;
    while (true) {
      if (pos_ >= s.size()) error(start, "Unexpected end of input (unterminated string)");
      const char c = s[pos_];
      if (c == quote) break;
      if (c == '\\') {
        ++pos_;
        if (pos_ >= s.size()) error(start, "Unexpected end of input");
        const char e = s[pos_++];
        if (e == 'x' || e == 'u') {
          const size_t n = e == 'x' ? 2 : 4;
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const int d = pos_ + k < s.size() ? hex_digit(s[pos_ + k]) : -1;
            if (d < 0) error(pos_ - 2, std::string("Invalid hexadecimal escape sequence: \\") + e);
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          pos_ += n;
          // A surrogate pair written as two \u escapes is one code point; a lone half is U+FFFD.
          if (cp >= 0xD800 && cp < 0xDC00 && s.compare(pos_, 2, "\\u") == 0) {
            uint32_t lo = 0;
            bool ok = true;
            for (size_t k = 0; k < 4; ++k) {
              const int d = pos_ + 2 + k < s.size() ? hex_digit(s[pos_ + 2 + k]) : -1;
              if (d < 0) ok = false;
              lo = lo * 16 + static_cast<uint32_t>(d < 0 ? 0 : d);
            }
            if (ok && lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              pos_ += 6;
            }
          }
          if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
          append_utf8(out, cp);
          continue;
        }
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'v':
            out += '\v';
            break;
          case '\'':
            out += '\'';
            break;
          case '"':
            out += '"';
            break;
          case '\\':
            out += '\\';
            break;
          default:
            error(pos_ - 2, std::string("Unexpected escaped character: ") + e);
        }
        continue;
      }
      out += c;
      ++pos_;
      if (pos_ >= s.size()) error(start, "Unexpected end of input (unterminated string)");
    }
    return out;
  }

  const std::string& source_;
  Src src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  return Lexer(source).run();
}

}  // namespace mixserve::jinja
