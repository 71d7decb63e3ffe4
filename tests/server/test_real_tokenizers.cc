// A checkpoint as the Hub ships it, served end to end: a GPT-2-small-shaped random-init directory
// (n_embd 768, 12 layers, vocabulary 50257, Hugging Face's tensor names) with GPT-2's real
// tokenizer, once as vocab.json + merges.txt and once as a tokenizer.json that Hugging Face's own
// tokenizers library wrote. tests/tokenizer/prepare_gpt2_small.sh makes both (nothing of it is
// committed) and the oracles' ids for the prompts: Hugging Face's tokenizers (Rust), and
// gpt-3-encoder (GPT-2's encoder in JavaScript) for the prompts without a special token, which
// it reads as plain text where transformers and vLLM match it whole.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "mixserve/v1/generation.grpc.pb.h"
#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

using json = nlohmann::json;

class RealTokenizers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Shared by every build tree and test process (ctest runs each test in its own): made once.
    work_ = new std::string(source_dir() + "/build/tokenizer-oracles/gpt2-small");
    int rc = -1;
    const std::string out =
        run(source_dir() + "/tests/tokenizer/prepare_gpt2_small.sh " + *work_ + " 2>&1", &rc);
    if (rc != 0) {
      start_error_ = new std::string("prepare_gpt2_small.sh failed:\n" + out);
      return;
    }
    std::ifstream f(*work_ + "/expected.json");
    expected_ = new json(json::parse(f));
    // Two 124M-parameter models: an ASan build takes far longer than the usual 30 s to load them.
    // Set-up that fails fails every test (SetUp), where an exception or assertion here would only
    // have skipped them.
    try {
      server_ = new ServerProcess(
          {"--model", *work_ + "/gpt2-small", "--served-model-name", "gpt2", "--model",
           *work_ + "/gpt2-small-json", "--served-model-name", "gpt2-json", "--threads", "2"},
          std::chrono::seconds(300));
    } catch (const std::exception& e) {
      start_error_ = new std::string(e.what());
      return;
    }
    channel_ = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials()));
  }
  void SetUp() override {
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    ASSERT_NE(server_, nullptr);
  }
  static void TearDownTestSuite() {
    delete start_error_;
    delete channel_;
    delete server_;
    delete expected_;
    delete work_;
  }
  static json complete(const std::string& model, const std::string& prompt, int max_tokens,
                       bool logprobs = false) {
    json req = {
        {"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
    if (logprobs) req["logprobs"] = 1;
    HttpResult r = post_json(server_->http_url("/v1/completions"), req.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  }
  // gpt-3-encoder's decode of ids (its TextDecoder turns incomplete UTF-8 into U+FFFD, as
  // tokenizers' from_utf8_lossy does).
  static std::string oracle_decode(const std::vector<int32_t>& ids) {
    const std::string script = temp_dir() + "/decode.js";
    std::ofstream(script) << "const {decode} = require('gpt-3-encoder');\n"
                             "process.stdout.write(decode(JSON.parse(process.argv[2])));\n";
    int rc = -1;
    std::string out = run(
        "NODE_PATH=" + *work_ + "/node/node_modules node " + script + " '" + json(ids).dump() + "'",
        &rc);
    EXPECT_EQ(rc, 0) << out;
    return out;
  }
  static std::string* work_;
  static std::string* start_error_;
  static json* expected_;
  static ServerProcess* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
};
std::string* RealTokenizers::work_ = nullptr;
std::string* RealTokenizers::start_error_ = nullptr;
json* RealTokenizers::expected_ = nullptr;
ServerProcess* RealTokenizers::server_ = nullptr;
std::shared_ptr<grpc::Channel>* RealTokenizers::channel_ = nullptr;

TEST_F(RealTokenizers, ModelsSayWhichTokenizerTheyUse) {
  json models = json::parse(curl(server_->http_url("/v1/models")).body)["data"];
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0]["id"], "gpt2");
  EXPECT_EQ(models[0]["tokenizer"], "gpt2-vocab-merges");
  EXPECT_EQ(models[0]["vocab_size"], 50257);
  EXPECT_EQ(models[1]["id"], "gpt2-json");
  EXPECT_EQ(models[1]["tokenizer"], "tokenizer.json-bpe");
  auto stub = v1::TextGeneration::NewStub(*channel_);
  grpc::ClientContext ctx;
  v1::ListModelsResponse lm;
  ASSERT_TRUE(stub->ListModels(&ctx, v1::ListModelsRequest(), &lm).ok());
  ASSERT_EQ(lm.models_size(), 2);
  EXPECT_EQ(lm.models(0).tokenizer(), "gpt2-vocab-merges");
  EXPECT_EQ(lm.models(1).tokenizer(), "tokenizer.json-bpe");
  EXPECT_EQ(lm.models(0).format(), "gpt2");
}

TEST_F(RealTokenizers, PromptTokensAreTheOraclesOverRestAndGrpc) {
  auto stub = v1::TextGeneration::NewStub(*channel_);
  const json& prompts = (*expected_)["prompts"];
  ASSERT_GE(prompts.size(), 4u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string prompt = prompts[i];
    const std::vector<int32_t> ids = (*expected_)["ids"][i];
    if (prompt.find("<|endoftext|>") == std::string::npos) {
      EXPECT_EQ(ids, (*expected_)["gpt3_ids"][i].get<std::vector<int32_t>>())
          << "the two oracles differ: " << prompt;
    }
    for (const char* model : {"gpt2", "gpt2-json"}) {
      json res = complete(model, prompt, 1);
      EXPECT_EQ(res["usage"]["prompt_tokens"], ids.size()) << model << ": " << prompt;
      grpc::ClientContext ctx;
      v1::TokenizeRequest tr;
      tr.set_model(model);
      tr.set_text(prompt);
      v1::TokenizeResponse tres;
      ASSERT_TRUE(stub->Tokenize(&ctx, tr, &tres).ok());
      EXPECT_EQ(std::vector<int32_t>(tres.token_ids().begin(), tres.token_ids().end()), ids)
          << model << ": " << prompt;
    }
  }
}

TEST_F(RealTokenizers, GeneratedTextIsTheOraclesDecodeOfTheTokensStreamedOrNot) {
  auto stub = v1::TextGeneration::NewStub(*channel_);
  const std::string prompt = (*expected_)["prompts"][1];
  for (const char* model : {"gpt2", "gpt2-json"}) {
    // gRPC: the token ids and the text deltas of one greedy generation.
    v1::GenerateRequest req;
    req.set_model(model);
    req.set_prompt(prompt);
    req.set_max_tokens(24);
    req.set_temperature(0);
    req.set_ignore_eos(true);
    grpc::ClientContext ctx;
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateResponse r;
    std::vector<int32_t> ids;
    std::string grpc_text;
    while (reader->Read(&r)) {
      ids.insert(ids.end(), r.token_ids().begin(), r.token_ids().end());
      grpc_text += r.text();
    }
    ASSERT_TRUE(reader->Finish().ok());
    ASSERT_EQ(ids.size(), 24u);
    EXPECT_EQ(grpc_text, oracle_decode(ids)) << model;
    // REST, whole and streamed, gives the same text.
    json body = {{"model", model},
                 {"prompt", prompt},
                 {"max_tokens", 24},
                 {"temperature", 0},
                 {"ignore_eos", true}};
    HttpResult whole = post_json(server_->http_url("/v1/completions"), body.dump());
    ASSERT_EQ(whole.status, 200) << whole.body;
    EXPECT_EQ(json::parse(whole.body)["choices"][0]["text"], grpc_text) << model;
    body["stream"] = true;
    HttpResult streamed = post_json(server_->http_url("/v1/completions"), body.dump(), {"-N"});
    std::string text;
    std::istringstream lines(streamed.body);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("data: {", 0) == 0)
        text += json::parse(line.substr(6))["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(text, grpc_text) << model;
  }
}

TEST_F(RealTokenizers, LogprobsShowEachTokensTextOrItsBytes) {
  json res = complete("gpt2", (*expected_)["prompts"][0], 16, /*logprobs=*/true);
  const json& tokens = res["choices"][0]["logprobs"]["tokens"];
  ASSERT_EQ(tokens.size(), 16u);
  std::string joined;
  bool any_bytes = false;
  for (const json& t : tokens) {
    const std::string s = t;
    any_bytes |= s.rfind("bytes:", 0) == 0;
    joined += s;
  }
  // Without byte tokens the tokens' texts add up to the text, as in OpenAI's API.
  if (!any_bytes) {
    EXPECT_EQ(joined, res["choices"][0]["text"]);
  }
}

}  // namespace
}  // namespace mixserve::testing
