#include "clients/loadgen/prompts.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace mixserve::client {

int Lengths::draw(int len, std::mt19937_64& rng) const {
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1.0 - range_ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1.0 + range_ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

namespace {

// Joins the first `n` words of `words` (or all of them) with spaces.
std::string join_words(const std::vector<std::string>& words, size_t n) {
  std::string out;
  for (size_t i = 0; i < words.size() && i < n; ++i) out += (i ? " " : "") + words[i];
  return out;
}

size_t words_for(int tokens, double tokens_per_word) {
  return std::max<size_t>(1, static_cast<size_t>(std::floor(tokens / tokens_per_word)));
}

class RandomIds : public PromptSource {
 public:
  RandomIds(Lengths l, uint32_t vocab, int32_t first) : l_(l), vocab_(vocab), first_(first) {}
  Prompt next(std::mt19937_64& rng) override {
    Prompt p;
    p.expected_input_len = l_.draw(l_.input_len, rng);
    std::uniform_int_distribution<int32_t> id(first_, static_cast<int32_t>(vocab_) - 1);
    for (uint32_t i = 0; i < p.expected_input_len; ++i) p.ids.push_back(id(rng));
    p.max_tokens = l_.draw(l_.output_len, rng);
    return p;
  }

 private:
  Lengths l_;
  uint32_t vocab_;
  int32_t first_;
};

class RandomText : public PromptSource {
 public:
  RandomText(Lengths l, std::vector<std::string> words, double tpw)
      : l_(l), words_(std::move(words)), tpw_(tpw) {}
  Prompt next(std::mt19937_64& rng) override {
    Prompt p;
    p.expected_input_len = l_.draw(l_.input_len, rng);
    std::uniform_int_distribution<size_t> pick(0, words_.size() - 1);
    const size_t n = words_for(p.expected_input_len, tpw_);
    for (size_t i = 0; i < n; ++i) p.text += (i ? " " : "") + words_[pick(rng)];
    p.max_tokens = l_.draw(l_.output_len, rng);
    return p;
  }

 private:
  Lengths l_;
  std::vector<std::string> words_;
  double tpw_;
};

class Kjv : public PromptSource {
 public:
  Kjv(Lengths l, std::vector<std::string> verses, double tpw)
      : l_(l), verses_(std::move(verses)), tpw_(tpw) {}
  Prompt next(std::mt19937_64& rng) override {
    Prompt p;
    p.expected_input_len = l_.draw(l_.input_len, rng);
    const size_t want = words_for(p.expected_input_len, tpw_);
    size_t v = std::uniform_int_distribution<size_t>(0, verses_.size() - 1)(rng);
    std::vector<std::string> words;
    while (words.size() < want) {  // consecutive verses, wrapping from Revelation to Genesis
      std::istringstream in(verses_[v]);
      for (std::string w; in >> w;) words.push_back(w);
      v = (v + 1) % verses_.size();
    }
    p.text = join_words(words, want);
    p.max_tokens = l_.draw(l_.output_len, rng);
    return p;
  }

 private:
  Lengths l_;
  std::vector<std::string> verses_;
  double tpw_;
};

class FileLines : public PromptSource {
 public:
  FileLines(Lengths l, std::vector<std::string> lines) : l_(l), lines_(std::move(lines)) {}
  Prompt next(std::mt19937_64& rng) override {
    Prompt p;
    p.text = lines_[next_++ % lines_.size()];
    p.max_tokens = l_.draw(l_.output_len, rng);
    return p;
  }

 private:
  Lengths l_;
  std::vector<std::string> lines_;
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<PromptSource> random_ids_prompts(Lengths l, uint32_t vocab_size, int32_t first_id) {
  if (vocab_size <= static_cast<uint32_t>(first_id) + 1)
    throw std::invalid_argument("the vocabulary is too small");
  return std::make_unique<RandomIds>(l, vocab_size, first_id);
}

std::unique_ptr<PromptSource> random_text_prompts(Lengths l, std::vector<std::string> words,
                                                  double tokens_per_word) {
  if (words.empty()) throw std::invalid_argument("no words to draw from");
  return std::make_unique<RandomText>(l, std::move(words), tokens_per_word);
}

std::unique_ptr<PromptSource> kjv_prompts(Lengths l, std::vector<std::string> verses,
                                          double tokens_per_word) {
  if (verses.empty()) throw std::invalid_argument("no verses");
  return std::make_unique<Kjv>(l, std::move(verses), tokens_per_word);
}

std::unique_ptr<PromptSource> file_prompts(Lengths l, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) throw std::runtime_error(path + " has no prompts (one per line)");
  return std::make_unique<FileLines>(l, std::move(lines));
}

std::vector<std::string> load_kjv_verses() {
  FILE* pipe = popen("bible -f Gen1:1-Rev22:21 2>/dev/null", "r");
  if (!pipe) throw std::runtime_error("cannot run bible");
  std::vector<std::string> verses;
  std::string line;
  char buf[8192];
  while (std::fgets(buf, sizeof buf, pipe)) {
    line += buf;
    if (line.back() != '\n') continue;  // a verse longer than the buffer
    line.pop_back();
    const size_t space = line.find(' ');  // "Ge1:1 In the beginning ..."
    if (space != std::string::npos && line.find(':') < space)
      verses.push_back(line.substr(space + 1));
    line.clear();
  }
  pclose(pipe);
  if (verses.size() < 1000)
    throw std::runtime_error(
        "the KJV is not available: install Debian's bible-kjv (scripts/install-deps)");
  return verses;
}

std::vector<std::string> words_of(const std::vector<std::string>& verses) {
  std::vector<std::string> words;
  for (const auto& v : verses) {
    std::istringstream in(v);
    for (std::string w; in >> w;) words.push_back(w);
  }
  return words;
}

std::vector<std::string> fallback_words() {
  const char* text =
      "and the of to that in he shall unto for i his a lord they be is him not them it with all "
      "thou thy was god "
      "which my me said but ye their have will thee from as are when this out were upon man by you "
      "israel king son "
      "up there hath then people came had house on into her come one we children s before your "
      "also day land men "
      "shalt let go hand made over saying even against at now did every because after earth things "
      "no so went may "
      "us father what mine our if down hast these great name like brought whom any among heart "
      "city thus david "
      "forth should judah jerusalem make know hands away behold away moses sons set put given "
      "spirit servant light "
      "heaven life mercy glory water waters fire face voice word words way days place time sight "
      "bread peace";
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace mixserve::client
