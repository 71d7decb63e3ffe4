// Chat completions as an OpenAI or vLLM client uses them, against a real server: the messages
// rendered with the model's own chat template (tokenizer_config.json, or --chat-template FILE),
// over REST (JSON and SSE) and gRPC Chat; /tokenize and /detokenize in vLLM's shapes; vLLM's
// extra request fields; and every bad input answered with a 400 that queues nothing.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "mixserve/v1/generation.grpc.pb.h"
#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// ChatML with the model's BOS first; raise_exception as Llama-2-style templates use it.
const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif "
    "%}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

const json kMessages = json::array({{{"role", "system"}, {"content", "You are terse."}},
                                    {{"role", "user"}, {"content", "In the beginning "}}});
// kTemplate's rendering of kMessages with the generation prompt.
const std::string kRendered =
    "<s><|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nIn the "
    "beginning<|im_end|>\n<|im_start|>assistant\n";

class Chat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A copy of the default model whose tokenizer_config.json carries the template.
    dir_ = new std::string(temp_dir() + "/chat-model");
    fs::create_directories(*dir_);
    for (const auto& e : fs::directory_iterator(source_dir() + "/models/default"))
      fs::create_symlink(fs::canonical(e.path()), *dir_ + "/" + e.path().filename().string());
    std::ofstream(*dir_ + "/tokenizer_config.json") << json{{"chat_template", kTemplate}}.dump();
    server_ = new ServerProcess({"--model", *dir_, "--served-model-name", "chat", "--model",
                                 source_dir() + "/models/default", "--served-model-name", "plain"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static HttpResult post(const std::string& path, const json& body) {
    return post_json(server_->http_url(path), body.dump());
  }
  static json chat_body(int max_tokens = 8) {
    return {
        {"model", "chat"}, {"messages", kMessages}, {"max_tokens", max_tokens}, {"temperature", 0}};
  }
  static std::vector<int32_t> tokens(const json& body) {
    HttpResult r = post("/tokenize", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body).at("tokens").get<std::vector<int32_t>>();
  }
  // The data lines of an SSE body, parsed, without [DONE].
  static std::vector<json> events(const std::string& sse) {
    std::vector<json> out;
    for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos;) {
      const size_t end = sse.find("\n\n", at);
      const std::string data = sse.substr(at + 6, end - at - 6);
      if (data != "[DONE]") out.push_back(json::parse(data));
      at = end;
    }
    return out;
  }
  static std::string* dir_;
  static ServerProcess* server_;
};
std::string* Chat::dir_ = nullptr;
ServerProcess* Chat::server_ = nullptr;

TEST_F(Chat, MessagesAreRenderedWithTheModelsTemplate) {
  const std::vector<int32_t> chat_ids = tokens({{"model", "chat"}, {"messages", kMessages}});
  // The rendered text, encoded as the template wrote it: "<s>" is the BOS token (id 1), not
  // text, and no second BOS is added (add_special_tokens is false for chat, as in vLLM).
  EXPECT_EQ(chat_ids,
            tokens({{"model", "chat"}, {"prompt", kRendered}, {"add_special_tokens", false}}));
  ASSERT_FALSE(chat_ids.empty());
  EXPECT_EQ(chat_ids[0], 1);
  EXPECT_NE(chat_ids[1], 1);
  // Without the generation prompt the text ends after the last message.
  const std::vector<int32_t> no_prompt =
      tokens({{"model", "chat"}, {"messages", kMessages}, {"add_generation_prompt", false}});
  EXPECT_LT(no_prompt.size(), chat_ids.size());
  // The same tokens a completion of the rendered prompt's ids gives.
  HttpResult r = post("/v1/chat/completions", chat_body());
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = json::parse(r.body);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(c["model"], "chat");
  EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(c["usage"]["prompt_tokens"], chat_ids.size());
  HttpResult plain =
      post("/v1/completions",
           {{"model", "chat"}, {"prompt", chat_ids}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(c["choices"][0]["message"]["content"], json::parse(plain.body)["choices"][0]["text"]);
  EXPECT_EQ(c["choices"][0]["finish_reason"],
            json::parse(plain.body)["choices"][0]["finish_reason"]);
  EXPECT_EQ(c["usage"]["completion_tokens"], json::parse(plain.body)["usage"]["completion_tokens"]);
}

TEST_F(Chat, StreamsDeltasThatAddUpToTheWholeReply) {
  HttpResult whole = post("/v1/chat/completions", chat_body(12));
  ASSERT_EQ(whole.status, 200) << whole.body;
  json body = chat_body(12);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}, {"continuous_usage_stats", true}};
  HttpResult r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<json> ev = events(r.body);
  ASSERT_GE(ev.size(), 3u) << r.body;
  EXPECT_EQ(ev.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(ev.front()["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  json finish;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    const json& choice = ev[i]["choices"][0];
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    EXPECT_TRUE(ev[i].contains("usage")) << ev[i].dump();  // continuous_usage_stats
  }
  const json w = json::parse(whole.body);
  EXPECT_EQ(text, w["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, w["choices"][0]["finish_reason"]);
  EXPECT_TRUE(ev.back()["choices"].empty());  // include_usage: the last chunk is the usage
  json usage = ev.back()["usage"], whole_usage = w["usage"];
  usage.erase("prompt_tokens_details");  // the second run finds the prompt in the prefix cache
  whole_usage.erase("prompt_tokens_details");
  EXPECT_EQ(usage, whole_usage);
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
}

TEST_F(Chat, LogprobsInTheChatShape) {
  json body = chat_body(4);
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  HttpResult r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json content = json::parse(r.body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u) << r.body;
  for (const json& t : content) {
    EXPECT_TRUE(t["token"].is_string());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_EQ(t["bytes"].size(), t["token"].get<std::string>().size());
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);  // greedy: the best is the one taken
  }
}

TEST_F(Chat, GrpcChatGivesTheRestTokens) {
  HttpResult rest = post("/v1/chat/completions", chat_body(6));
  ASSERT_EQ(rest.status, 200) << rest.body;
  auto stub = v1::TextGeneration::NewStub(
      grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials()));
  v1::ChatRequest req;
  for (const json& m : kMessages) {
    auto* msg = req.add_messages();
    msg->set_role(m["role"].get<std::string>());
    msg->set_content(m["content"].get<std::string>());
  }
  req.mutable_generate()->set_model("chat");
  req.mutable_generate()->set_max_tokens(6);
  req.mutable_generate()->set_temperature(0);
  grpc::ClientContext ctx;
  auto reader = stub->Chat(&ctx, req);
  v1::GenerateResponse res;
  std::string text;
  uint32_t prompt_tokens = 0;
  while (reader->Read(&res)) {
    text += res.text();
    if (res.has_usage()) prompt_tokens = res.usage().prompt_tokens();
  }
  ASSERT_TRUE(reader->Finish().ok());
  const json w = json::parse(rest.body);
  EXPECT_EQ(text, w["choices"][0]["message"]["content"]);
  EXPECT_EQ(prompt_tokens, w["usage"]["prompt_tokens"]);

  // A model without a template, and a prompt set beside the messages: INVALID_ARGUMENT.
  for (int i = 0; i < 2; ++i) {
    v1::ChatRequest bad = req;
    if (i == 0) bad.mutable_generate()->set_model("plain");
    if (i == 1) bad.mutable_generate()->set_prompt("hi");
    grpc::ClientContext c2;
    auto r2 = stub->Chat(&c2, bad);
    while (r2->Read(&res)) {
    }
    const grpc::Status s = r2->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
}

TEST_F(Chat, SeveralChoicesShareOnePrefill) {
  // A prompt no other test sends, long enough for the prefix cache (16 tokens and more).
  const std::string prompt =
      "And the LORD spake unto Moses in the wilderness of Sinai, in the tabernacle of the "
      "congregation, on the first day of the second month";
  auto hit_tokens = [] {
    return metric(curl(server_->http_url("/metrics")).body,
                  "mixserve_prefix_cache_hit_tokens_total{model=\"plain\"}");
  };
  const double hits_before = hit_tokens();
  json body = {{"model", "plain"},   {"prompt", prompt}, {"max_tokens", 8},
               {"temperature", 1.0}, {"seed", 7},        {"n", 3}};
  HttpResult r = post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = json::parse(r.body);
  ASSERT_EQ(c["choices"].size(), 3u);
  int completion_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c["choices"][i]["index"], i);
    // Choice i is the request with n = 1 and seed 7 + i.
    json one = body;
    one["n"] = 1;
    one["seed"] = 7 + i;
    HttpResult alone = post("/v1/completions", one);
    ASSERT_EQ(alone.status, 200) << alone.body;
    const json a = json::parse(alone.body);
    EXPECT_EQ(c["choices"][i]["text"], a["choices"][0]["text"]) << i;
    completion_tokens += a["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_EQ(c["usage"]["completion_tokens"], completion_tokens);
  const int prompt_tokens = c["usage"]["prompt_tokens"];
  EXPECT_GE(prompt_tokens, 16);
  // Choices 1 and 2 started from choice 0's prompt state: the prompt was prefilled once. (The
  // three n = 1 requests hit the cache too.)
  EXPECT_EQ(hit_tokens() - hits_before, 5.0 * prompt_tokens);

  // Streamed: every choice's deltas under its index, then one usage chunk.
  json chat = chat_body(6);
  chat["n"] = 2;
  chat["stream"] = true;
  chat["stream_options"] = {{"include_usage", true}};
  HttpResult s = post("/v1/chat/completions", chat);
  ASSERT_EQ(s.status, 200) << s.body;
  std::map<int, int> finishes, roles;
  for (const json& ev : events(s.body)) {
    if (ev["choices"].empty()) continue;
    const int index = ev["choices"][0]["index"];
    if (ev["choices"][0]["delta"].contains("role")) ++roles[index];
    if (!ev["choices"][0]["finish_reason"].is_null()) ++finishes[index];
  }
  EXPECT_EQ(roles, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}}));
  // n with a session, or best_of other than n: 400.
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"n", 2}, {"session", "s"}}).status, 400);
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"n", 2}, {"best_of", 3}}).status, 400);
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"n", 65}}).status, 400);
}

TEST_F(Chat, TokenizeAndDetokenizeInVllmsShapes) {
  HttpResult r =
      post("/tokenize",
           {{"model", "plain"}, {"prompt", "In the beginning"}, {"return_token_strs", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json t = json::parse(r.body);
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_GT(t["max_model_len"].get<int>(), 0);
  EXPECT_EQ(t["token_strs"].size(), t["tokens"].size());
  // add_special_tokens (default true) puts the model's prompt prefix first, if it has one.
  const std::vector<int32_t> with = t["tokens"].get<std::vector<int32_t>>(),
                             bare = tokens({{"model", "plain"},
                                            {"prompt", "In the beginning"},
                                            {"add_special_tokens", false}});
  ASSERT_GE(with.size(), bare.size());
  EXPECT_TRUE(std::equal(bare.begin(), bare.end(), with.end() - bare.size()));
  HttpResult d = post("/detokenize", {{"model", "plain"}, {"tokens", t["tokens"]}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(json::parse(d.body)["prompt"], "In the beginning");
  EXPECT_EQ(post("/detokenize", {{"tokens", {999999}}}).status, 400);
  EXPECT_EQ(post("/detokenize", {{"model", "nope"}, {"tokens", {1}}}).status, 404);
  EXPECT_EQ(post("/tokenize", {{"prompt", "x"}, {"messages", kMessages}}).status, 400);
}

TEST_F(Chat, VllmsExtraFieldsAreServed) {
  // include_stop_str_in_output: the stop string ends the text instead of being cut.
  HttpResult free_run = post(
      "/v1/completions",
      {{"model", "plain"}, {"prompt", "In the beginning"}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(free_run.status, 200);
  const std::string text = json::parse(free_run.body)["choices"][0]["text"];
  ASSERT_GE(text.size(), 4u);
  const std::string stop = text.substr(2, 2);
  for (bool include : {false, true}) {
    HttpResult r = post("/v1/completions", {{"model", "plain"},
                                            {"prompt", "In the beginning"},
                                            {"max_tokens", 12},
                                            {"temperature", 0},
                                            {"stop", stop},
                                            {"include_stop_str_in_output", include},
                                            {"user", "u1"},
                                            {"skip_special_tokens", true},
                                            {"min_tokens", 0},
                                            {"spaces_between_special_tokens", true},
                                            {"truncate_prompt_tokens", 64}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], text.substr(0, include ? 4 : 2));
  }
  // min_tokens: a stop token cannot come before it. The first token of the free run, made a
  // stop token, ends the request at once without min_tokens; with it, not before 3 tokens.
  HttpResult first = post("/v1/completions", {{"model", "plain"},
                                              {"prompt", "In the beginning"},
                                              {"max_tokens", 1},
                                              {"temperature", 0},
                                              {"logprobs", 0},
                                              {"return_tokens_as_token_ids", true}});
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string label = json::parse(first.body)["choices"][0]["logprobs"]["tokens"][0];
  ASSERT_EQ(label.rfind("token_id:", 0), 0u) << label;
  const int first_id = std::stoi(label.substr(9));
  for (int min_tokens : {0, 3}) {
    HttpResult r = post("/v1/completions", {{"model", "plain"},
                                            {"prompt", "In the beginning"},
                                            {"max_tokens", 12},
                                            {"temperature", 0},
                                            {"stop_token_ids", {first_id}},
                                            {"min_tokens", min_tokens}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = json::parse(r.body);
    if (min_tokens == 0) {
      EXPECT_EQ(c["usage"]["completion_tokens"], 1);
      EXPECT_EQ(c["choices"][0]["text"], "");
    } else {
      EXPECT_GE(c["usage"]["completion_tokens"].get<int>(), 3);
      EXPECT_NE(c["choices"][0]["text"], "");
    }
  }
  // truncate_prompt_tokens keeps the prompt's last tokens.
  HttpResult cut = post("/v1/completions", {{"model", "plain"},
                                            {"prompt", "In the beginning God"},
                                            {"max_tokens", 1},
                                            {"truncate_prompt_tokens", 2}});
  ASSERT_EQ(cut.status, 200) << cut.body;
  EXPECT_EQ(json::parse(cut.body)["usage"]["prompt_tokens"], 2);
  // max_completion_tokens is chat's max_tokens.
  json body = chat_body();
  body.erase("max_tokens");
  body["max_completion_tokens"] = 3;
  HttpResult r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(json::parse(r.body)["usage"]["completion_tokens"].get<int>(), 3);
}

TEST_F(Chat, BadRequestsGetA400AndQueueNothing) {
  auto finished = [](const std::string& metrics) {
    double n = 0;
    for (const char* reason : {"length", "stop"})
      for (const char* model : {"chat", "plain"})
        n += metric(metrics, std::string("mixserve_requests_total{finish_reason=\"") + reason +
                                 "\",model=\"" + model + "\"}");
    return n;
  };
  const double before = finished(curl(server_->http_url("/metrics")).body);
  auto expect_400 = [](const json& body, const std::string& says) {
    HttpResult r = post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    const json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.contains("error")) << r.body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(says), std::string::npos)
        << "wanted \"" << says << "\" in " << r.body;
  };
  json b = chat_body();
  b["model"] = "plain";
  expect_400(b, "--chat-template");
  b = chat_body();
  b["messages"].push_back({{"role", "tool"}, {"content", "42"}});
  expect_400(b, "tool messages are not supported");  // the template's raise_exception
  b = chat_body();
  b.erase("messages");
  expect_400(b, "'messages' is required");
  b["messages"] = json::array();
  expect_400(b, "non-empty list");
  b["messages"] = {{{"content", "no role"}}};
  expect_400(b, "needs a role");
  b["messages"] = {{{"role", "user"}, {"content", 5}}};
  expect_400(b, "content must be");
  b = chat_body();
  b["prompt"] = "a chat has no prompt";
  expect_400(b, "unknown field 'prompt'");
  b = chat_body();
  b["min_tokens"] = 9;  // more than max_tokens
  expect_400(b, "min_tokens must be between 0 and max_tokens");
  b = chat_body();
  b["top_logprobs"] = 2;
  expect_400(b, "needs logprobs");
  b = chat_body();
  b["chat_template"] = "{{ messages }}";
  expect_400(b, "not supported");
  b = chat_body();
  b["max_completion_tokens"] = 2;
  expect_400(b, "max_tokens are both given");
  // Nothing was queued or run, and the server is well.
  EXPECT_EQ(finished(curl(server_->http_url("/metrics")).body), before);
  EXPECT_EQ(curl(server_->http_url("/health")).status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat_body(1)).status, 200);
}

TEST(ChatTemplateFlag, ReplacesTheDirectorysTemplate) {
  const std::string file = temp_dir() + "/plain.jinja";
  std::ofstream(file) << "{% for m in messages %}{{ m.content }}\n{% endfor %}";
  ServerProcess server({"--model", source_dir() + "/models/default", "--chat-template", file});
  HttpResult r =
      post_json(server.http_url("/tokenize"),
                json{{"messages", {{{"role", "user"}, {"content", "In the beginning"}}}}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  HttpResult want =
      post_json(server.http_url("/tokenize"),
                json{{"prompt", "In the beginning\n"}, {"add_special_tokens", false}}.dump());
  EXPECT_EQ(json::parse(r.body)["tokens"], json::parse(want.body)["tokens"]);
  // A template that does not parse stops the server at start-up, naming the file.
  const std::string broken = temp_dir() + "/broken.jinja";
  std::ofstream(broken) << "{% for m in messages %}{{ m.content }";
  int rc = -1;
  const std::string out =
      run(std::string(MIXSERVE_BINARY) + " serve --model " + source_dir() +
              "/models/default --chat-template " + broken + " --grpc-port 0 --http-port 0 2>&1",
          &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find(broken), std::string::npos) << out;
}

}  // namespace
}  // namespace mixserve::testing
