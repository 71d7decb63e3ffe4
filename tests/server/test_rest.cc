// The REST gateway, as a user hits it with curl: completions (JSON and SSE), models, health,
// readiness, metrics, the playground page, and a table of bad inputs that each get the right
// status in OpenAI's error shape with nothing queued.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

using json = nlohmann::json;

class Rest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ =
        new ServerProcess({"--model", source_dir() + "/models/default", "--model",
                           source_dir() + "/tests/golden/hybrid_a", "--max-body-bytes", "65536"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static std::string url(const std::string& p) { return server_->http_url(p); }
  static ServerProcess* server_;
};
ServerProcess* Rest::server_ = nullptr;

TEST_F(Rest, CompletionJson) {
  auto r = post_json(url("/v1/completions"),
                     R"({"model":"default","prompt":"And God said","max_tokens":12,"seed":7})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "default");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(j["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 12);
  // a seeded request is reproducible
  auto again = post_json(url("/v1/completions"),
                         R"({"model":"default","prompt":"And God said","max_tokens":12,"seed":7})");
  EXPECT_EQ(json::parse(again.body)["choices"][0]["text"], j["choices"][0]["text"]);
}

TEST_F(Rest, CompletionStreamsServerSentEvents) {
  auto r = post_json(
      url("/v1/completions"),
      R"({"prompt":"In the beginning","max_tokens":6,"stream":true,"seed":3,"stream_options":{"include_usage":true}})",
      {"-N"});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  std::vector<json> events;
  bool done = false;
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    if (line == "data: [DONE]") {
      done = true;
      continue;
    }
    events.push_back(json::parse(line.substr(6)));
  }
  EXPECT_TRUE(done) << "the stream ends with data: [DONE]";
  ASSERT_GE(events.size(), 2u);
  const json& last_choice = events[events.size() - 2]["choices"][0];
  EXPECT_EQ(last_choice["finish_reason"], "length");
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 6);
  // the streamed text equals the same seeded request's JSON text
  std::string streamed;
  for (const auto& e : events)
    if (!e["choices"].empty()) streamed += e["choices"][0]["text"].get<std::string>();
  auto whole =
      post_json(url("/v1/completions"), R"({"prompt":"In the beginning","max_tokens":6,"seed":3})");
  EXPECT_EQ(streamed, json::parse(whole.body)["choices"][0]["text"].get<std::string>());
}

TEST_F(Rest, TokenIdPromptsStopStringsAndLogprobs) {
  auto r = post_json(
      url("/v1/completions"),
      R"({"model":"hybrid_a","prompt":[5,6,7,8],"max_tokens":5,"seed":1,"logprobs":3,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"].size(), 5u);
  auto s = post_json(url("/v1/completions"),
                     R"({"prompt":"And God said","max_tokens":40,"seed":1,"stop":[","]})");
  ASSERT_EQ(s.status, 200);
  const json js = json::parse(s.body);
  EXPECT_EQ(js["choices"][0]["text"].get<std::string>().find(','), std::string::npos);
}

TEST_F(Rest, ModelsHealthReadyMetricsAndPlayground) {
  auto m = curl(url("/v1/models"));
  ASSERT_EQ(m.status, 200);
  const json j = json::parse(m.body);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["id"], "hybrid_a");
  EXPECT_EQ(j["data"][1]["mixers"], json::array({"she", "attention", "rwkv", "me"}));
  EXPECT_EQ(j["data"][1]["vocab_size"], 97);  // token-id prompts must stay below it
  EXPECT_EQ(j["data"][0]["vocab_size"], 5000);
  EXPECT_EQ(j["data"][0]["max_model_len"], 128);
  EXPECT_EQ(curl(url("/health")).status, 200);
  EXPECT_EQ(curl(url("/ready")).status, 200);
  auto metrics = curl(url("/metrics"));
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("mixserve_time_to_first_token_seconds_bucket"), std::string::npos);
  EXPECT_NE(
      metrics.body.find(
          "mixserve_mixer_ops_total{layer=\"0\",mixer=\"she\",model=\"hybrid_a\",op=\"mul\"}"),
      std::string::npos);
}

struct BadInput {
  const char* what;
  std::string body;
  int status;
  const char* param;  // expected error.param, "" when none
  std::vector<std::string> args = {};
};

TEST_F(Rest, BadInputsGetClearErrorsAndQueueNothing) {
  const std::string long_prompt(300, 'a');
  std::string big = R"({"prompt":")" + std::string(70000, 'x') + R"("})";
  const std::vector<BadInput> cases = {
      {"not JSON", "{nope", 400, ""},
      {"JSON but not an object", "[1,2]", 400, ""},
      {"no prompt", R"({"max_tokens":3})", 400, "prompt"},
      {"empty prompt", R"({"prompt":""})", 400, "prompt"},
      {"prompt of the wrong type", R"({"prompt":42})", 400, "prompt"},
      {"several prompts", R"({"prompt":["a","b"]})", 400, "prompt"},
      {"negative token id", R"({"prompt":[1,-2]})", 400, "prompt"},
      {"token id past the vocabulary", R"({"prompt":[1,999999]})", 400, ""},
      {"unknown model", R"({"model":"nope","prompt":"a"})", 404, "model"},
      {"max_tokens 0", R"({"prompt":"a","max_tokens":0})", 400, "max_tokens"},
      {"max_tokens not a number", R"({"prompt":"a","max_tokens":"ten"})", 400, "max_tokens"},
      {"prompt + max_tokens past the context", R"({"prompt":"a","max_tokens":128})", 400,
       "max_tokens"},
      {"prompt longer than the context", R"({"prompt":")" + long_prompt + R"("})", 400, "prompt"},
      {"temperature negative", R"({"prompt":"a","temperature":-1})", 400, "temperature"},
      {"top_p above 1", R"({"prompt":"a","top_p":1.5})", 400, "top_p"},
      {"top_p 0", R"({"prompt":"a","top_p":0})", 400, "top_p"},
      {"min_p above 1", R"({"prompt":"a","min_p":2})", 400, "min_p"},
      {"presence_penalty out of range", R"({"prompt":"a","presence_penalty":3})", 400,
       "presence_penalty"},
      {"repetition_penalty 0", R"({"prompt":"a","repetition_penalty":0})", 400,
       "repetition_penalty"},
      {"logprobs above 20", R"({"prompt":"a","logprobs":21})", 400, "logprobs"},
      {"n above 64", R"({"prompt":"a","n":65})", 400, "n"},
      {"stop of the wrong type", R"({"prompt":"a","stop":5})", 400, "stop"},
      {"empty stop string", R"({"prompt":"a","stop":[""]})", 400, "stop"},
      {"unknown field", R"({"prompt":"a","max_token":5})", 400, "max_token"},
      {"stream_options without stream", R"({"prompt":"a","stream_options":{"include_usage":true}})",
       400, "stream_options"},
      {"invalid UTF-8", std::string(R"({"prompt":"a)") + "\xff\xfe" + R"("})", 400, ""},
      {"body too large", big, 413, ""},
      {"timeout not positive", R"({"prompt":"a","timeout":0})", 400, "timeout"},
      {"seed negative", R"({"prompt":"a","seed":-1})", 400, "seed"},
  };
  const std::string before = curl(url("/metrics")).body;
  for (const auto& c : cases) {
    auto r = post_json(url("/v1/completions"), c.body, c.args);
    EXPECT_EQ(r.status, c.status) << c.what << ": " << r.body;
    json j;
    ASSERT_NO_THROW(j = json::parse(r.body)) << c.what << ": " << r.body;
    ASSERT_TRUE(j.contains("error")) << c.what;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << c.what;
    EXPECT_TRUE(j["error"].contains("type") && j["error"].contains("code")) << c.what;
    if (*c.param) {
      EXPECT_EQ(j["error"]["param"], c.param) << c.what << ": " << r.body;
    }
  }
  EXPECT_GE(cases.size(), 20u);
  // method and route errors too
  EXPECT_EQ(curl(url("/v1/completions")).status, 405);
  EXPECT_EQ(curl(url("/v1/nothing")).status, 404);
  // nothing was queued or run
  const std::string after = curl(url("/metrics")).body;
  for (const char* m : {"mixserve_requests_waiting{model=\"default\"}",
                        "mixserve_requests_running{model=\"default\"}"})
    EXPECT_EQ(metric(after, m), 0) << m;
  for (const char* m : {"mixserve_requests_total{finish_reason=\"length\",model=\"default\"}",
                        "mixserve_requests_total{finish_reason=\"stop\",model=\"default\"}",
                        "mixserve_requests_total{finish_reason=\"length\",model=\"hybrid_a\"}"})
    EXPECT_EQ(metric(before, m), metric(after, m)) << m;
}

}  // namespace
}  // namespace mixserve::testing
