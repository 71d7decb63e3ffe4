// How a model directory's tokenizer is chosen and configured (engine/tokenizer_dir.h): the file by
// what the directory holds, bos/eos/pad/add_bos_token and stop tokens from the JSON files beside
// it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/model_error.h"
#include "engine/tokenizer_dir.h"
#include "tests/support/tiny_tokenizers.h"

namespace mixserve {
namespace {

namespace fs = std::filesystem;

class TokenizerDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mixserve_tokdir_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  void copy_kjv_model() {
    fs::copy_file(fs::path(MIXSERVE_SOURCE_DIR) / "models" / "tokenizer.model",
                  dir_ / "tokenizer.model");
  }
  void write_tiny_tokenizer_json(bool with_bos_template) {
    write("tokenizer.json", tiny_byte_level_tokenizer_json(with_bos_template));
  }
  std::string expect_error(const std::string& needle) {
    try {
      load_tokenizer_dir(dir_.string());
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error; expected one with \"" << needle << "\"";
    return "";
  }
  fs::path dir_;
};

TEST_F(TokenizerDir, NoTokenizerFilesMeansNoTokenizer) {
  EXPECT_EQ(load_tokenizer_dir(dir_.string()).tokenizer, nullptr);
}

TEST_F(TokenizerDir, SentencepieceAloneUsesItsOwnSpecialPieces) {
  copy_kjv_model();
  TokenizerSetup s = load_tokenizer_dir(dir_.string());
  ASSERT_NE(s.tokenizer, nullptr);
  EXPECT_EQ(s.files, "tokenizer.model");
  EXPECT_EQ(s.tokenizer->kind(), "sentencepiece-bpe");
  EXPECT_EQ(s.bos_id, 1);
  EXPECT_EQ(s.eos_id, 2);
  EXPECT_FALSE(s.add_bos);
  EXPECT_TRUE(s.prompt_prefix.empty());
  EXPECT_EQ(s.stop_ids, std::vector<int32_t>{2});
}

TEST_F(TokenizerDir, TokenizerConfigAddsBosAndNamesTokens) {
  copy_kjv_model();
  write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<s>",
      "eos_token": {"__type": "AddedToken", "content": "</s>"}, "pad_token": "<unk>"})");
  TokenizerSetup s = load_tokenizer_dir(dir_.string());
  EXPECT_TRUE(s.add_bos);
  EXPECT_EQ(s.prompt_prefix, std::vector<int32_t>{1});
  EXPECT_EQ(s.eos_id, 2);
  EXPECT_EQ(s.pad_id, 0);
}

TEST_F(TokenizerDir, ChatTemplateFromTheConfigOrItsOwnFile) {
  copy_kjv_model();
  TokenizerSetup s = load_tokenizer_dir(dir_.string());
  EXPECT_EQ(s.chat_template, "");
  EXPECT_EQ(s.bos_token, "<s>");
  EXPECT_EQ(s.eos_token, "</s>");
  write("tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  s = load_tokenizer_dir(dir_.string());
  EXPECT_EQ(s.chat_template, "{{ messages }}");
  EXPECT_EQ(s.chat_template_file, (dir_ / "tokenizer_config.json").string());
  // Named templates (transformers): "default" is the chat template; tool_use alone is none.
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"},
      {"name": "default", "template": "D"}]})");
  EXPECT_EQ(load_tokenizer_dir(dir_.string()).chat_template, "D");
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(load_tokenizer_dir(dir_.string()).chat_template, "");
  // chat_template.jinja (transformers >= 4.43) comes first.
  write("tokenizer_config.json", R"({"chat_template": "old"})");
  write("chat_template.jinja", "new\n");
  s = load_tokenizer_dir(dir_.string());
  EXPECT_EQ(s.chat_template, "new\n");
  EXPECT_EQ(s.chat_template_file, (dir_ / "chat_template.jinja").string());
  fs::remove(dir_ / "chat_template.jinja");
  write("tokenizer_config.json", R"({"chat_template": 5})");
  expect_error("chat_template must be a string or a list");
}

TEST_F(TokenizerDir, SpecialTokensMapOverridesTokenizerConfigAsTransformersDoes) {
  copy_kjv_model();
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  write("special_tokens_map.json", R"({"eos_token": "<s>"})");
  EXPECT_EQ(load_tokenizer_dir(dir_.string()).eos_id, 1);
}

TEST_F(TokenizerDir, GenerationConfigAddsStopTokens) {
  copy_kjv_model();
  write("generation_config.json",
        R"({"bos_token_id": 1, "eos_token_id": [2, 7, 2], "pad_token_id": 0})");
  TokenizerSetup s = load_tokenizer_dir(dir_.string());
  EXPECT_EQ(s.stop_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(s.pad_id, 0);
}

TEST_F(TokenizerDir, BadConfigurationIsOneLineNamingTheFile) {
  copy_kjv_model();
  write("tokenizer_config.json", R"({"eos_token": "<nope>"})");
  expect_error("tokenizer_config.json: eos_token \"<nope>\" is not a token of tokenizer.model");
  write("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  expect_error("tokenizer_config.json: add_bos_token must be true or false");
  write("tokenizer_config.json", R"({"eos_token": 5})");
  expect_error("tokenizer_config.json: eos_token must be a string");
  write("tokenizer_config.json", "{not json");
  expect_error("tokenizer_config.json: not valid JSON");
  fs::remove(dir_ / "tokenizer_config.json");
  write("generation_config.json", R"({"eos_token_id": [2, 99999]})");
  expect_error(
      "generation_config.json: eos_token_id 99999 is outside the tokenizer's vocabulary [0, 5000)");
  write("generation_config.json", R"({"eos_token_id": "2"})");
  expect_error("generation_config.json: eos_token_id must be a token id");
}

TEST_F(TokenizerDir, VocabJsonWithoutMergesIsRefused) {
  write("vocab.json", R"({"a": 0})");
  expect_error("vocab.json: found without merges.txt");
}

TEST_F(TokenizerDir, TokenizerJsonComesFirstAndBringsItsTemplate) {
#ifndef MIXSERVE_HF_TOKENIZERS
  GTEST_SKIP() << "this build has no tokenizer.json support (no Oniguruma/ICU)";
#endif
  copy_kjv_model();  // present, but tokenizer.json wins
  write_tiny_tokenizer_json(/*with_bos_template=*/true);
  TokenizerSetup s = load_tokenizer_dir(dir_.string());
  ASSERT_NE(s.tokenizer, nullptr);
  EXPECT_EQ(s.files, "tokenizer.json");
  EXPECT_EQ(s.tokenizer->kind(), "tokenizer.json-bpe");
  EXPECT_EQ(s.prompt_prefix, std::vector<int32_t>{257});
  EXPECT_EQ(s.tokenizer->encode("hi!"), (std::vector<int32_t>{256, '!'}));
  // add_bos_token false in tokenizer_config.json turns the template's BOS off, as transformers
  // does.
  write("tokenizer_config.json",
        R"({"add_bos_token": false, "bos_token": "<|bos|>", "eos_token": "<|end|>"})");
  s = load_tokenizer_dir(dir_.string());
  EXPECT_TRUE(s.prompt_prefix.empty());
  EXPECT_EQ(s.eos_id, 258);
  EXPECT_EQ(s.stop_ids, std::vector<int32_t>{258});
}

TEST_F(TokenizerDir, MalformedTokenizerJsonIsAnErrorNotAFallback) {
  copy_kjv_model();
  write("tokenizer.json", "{\"model\": ");
  expect_error("tokenizer.json");
}

}  // namespace
}  // namespace mixserve
