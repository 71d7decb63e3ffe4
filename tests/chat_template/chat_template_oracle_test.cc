// ChatTemplate against Hugging Face's own renderer: every templates/*.jinja x conversations.json
// case, as @huggingface/jinja rendered it into $MIXSERVE_CHAT_TEMPLATE_ORACLE (oracle_test.sh runs
// oracle.js once per build tree). Byte equality for every output; where the oracle threw, we
// must throw, with the same message when the oracle's error came from raise_exception.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/chat_template.h"

namespace mixserve {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) throw std::runtime_error(std::string(name) + " is not set (run oracle_test.sh)");
  return v;
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The first differing byte, with some context, for the failure message.
std::string where_differs(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + "\n  oracle: " +
         nlohmann::json(want.substr(from, 120))
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n  ours:   " +
         nlohmann::json(got.substr(from, 120))
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TEST(ChatTemplateOracle, EveryTemplateAndCaseMatchesHuggingFaceJinja) {
  const std::string source_dir = env("MIXSERVE_SOURCE_DIR");
  const std::string dir = source_dir + "/tests/chat_template/";
  const auto renders = nlohmann::ordered_json::parse(read(env("MIXSERVE_CHAT_TEMPLATE_ORACLE")));
  const auto cases = nlohmann::ordered_json::parse(read(dir + "conversations.json"));
  std::map<std::string, const nlohmann::ordered_json*> vars;
  for (const auto& c : cases.at("cases")) vars[c.at("name").get<std::string>()] = &c.at("vars");
  vars["snippet_vars"] = &cases.at("snippet_vars");
  // snippets.txt: one template a line, named "snippets.txt:LINE" in the oracle's results.
  std::vector<std::string> snippets;
  {
    std::istringstream in(read(dir + "snippets.txt"));
    for (std::string line; std::getline(in, line);) snippets.push_back(line);
  }
  auto source_of = [&](const std::string& name) {
    const std::string prefix = "snippets.txt:";
    if (name.rfind(prefix, 0) == 0) return snippets.at(std::stoul(name.substr(prefix.size())) - 1);
    return read(dir + "templates/" + name);
  };

  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  std::map<std::string, std::string> parse_errors;
  size_t pairs = 0, outputs = 0, errors = 0, raised = 0, failures = 0;
  for (const auto& r : renders.at("results")) {
    const std::string name = r.at("template"), case_name = r.at("case");
    const std::string label = name + " x " + case_name;
    ++pairs;
    if (!templates.count(name) && !parse_errors.count(name)) {
      try {
        templates[name] = std::make_unique<ChatTemplate>(source_of(name));
      } catch (const ChatTemplateError& e) {
        parse_errors[name] = e.what();
      }
    }
    bool ok = true;
    std::string got, error;
    if (parse_errors.count(name)) {
      ok = false;
      error = parse_errors[name];
    } else {
      try {
        got = templates[name]->render(*vars.at(case_name));
      } catch (const ChatTemplateError& e) {
        ok = false;
        error = e.what();
      }
    }
    const bool want_ok = r.at("ok");
    std::string problem;
    if (want_ok) {
      ++outputs;
      const std::string want = r.at("output");
      if (!ok)
        problem = "the oracle rendered, we threw: " + error;
      else if (got != want)
        problem = where_differs(want, got);
    } else {
      ++errors;
      const std::string want = r.at("error");
      if (ok) {
        problem =
            "the oracle threw (" + want + "), we rendered " + std::to_string(got.size()) + " bytes";
      } else if (r.at("raised").get<bool>()) {
        ++raised;
        if (error != want)
          problem =
              "raise_exception message differs: oracle \"" + want + "\", ours \"" + error + "\"";
      }
    }
    if (!problem.empty()) {
      ++failures;
      ADD_FAILURE() << label << ": " << problem;
    }
  }
  std::printf(
      "chat template oracle (@huggingface/jinja %s): %zu pairs (%zu outputs, %zu errors of "
      "which %zu raise_exception), %zu differ\n",
      renders.at("version").get<std::string>().c_str(), pairs, outputs, errors, raised, failures);
  EXPECT_GT(pairs, 100u);
  EXPECT_EQ(failures, 0u);
}

}  // namespace
}  // namespace mixserve
