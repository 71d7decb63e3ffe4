// The gRPC API with real gRPC clients: streaming Generate, Tokenize, ListModels, the standard
// health service and server reflection (spoken through generic stubs, as grpcurl would), errors.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>

#include "mixserve/v1/generation.grpc.pb.h"
#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

class Grpc : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--model", source_dir() + "/models/default", "--model",
                                 source_dir() + "/tests/golden/rwkv"});
    channel_ = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials()));
  }
  static void TearDownTestSuite() {
    delete channel_;
    delete server_;
  }
  static std::unique_ptr<v1::TextGeneration::Stub> stub() {
    return v1::TextGeneration::NewStub(*channel_);
  }
  static ServerProcess* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
};
ServerProcess* Grpc::server_ = nullptr;
std::shared_ptr<grpc::Channel>* Grpc::channel_ = nullptr;

std::vector<v1::GenerateResponse> generate(
    v1::TextGeneration::Stub& s, const v1::GenerateRequest& req, grpc::Status* status,
    std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  auto reader = s.Generate(&ctx, req);
  std::vector<v1::GenerateResponse> out;
  v1::GenerateResponse r;
  while (reader->Read(&r)) out.push_back(r);
  *status = reader->Finish();
  return out;
}

TEST_F(Grpc, GenerateStreamsTokensThenUsage) {
  v1::GenerateRequest req;
  req.set_model("default");
  req.set_prompt("And God said");
  req.set_max_tokens(10);
  req.set_seed(4);
  req.set_logprobs(2);
  grpc::Status st;
  auto out = generate(*stub(), req, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(out.size(), 10u);
  std::string text;
  for (const auto& r : out) {
    EXPECT_EQ(r.token_ids_size(), 1);
    EXPECT_EQ(r.logprobs_size(), 1);
    EXPECT_EQ(r.logprobs(0).top_size(), 2);
    text += r.text();
  }
  EXPECT_EQ(out.back().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(out.back().usage().completion_tokens(), 10u);
  EXPECT_GT(out.back().timing().total_seconds(), 0);
  EXPECT_FALSE(text.empty());
  // the same seeded request over REST gives the same text
  auto rest = post_json(server_->http_url("/v1/completions"),
                        R"({"model":"default","prompt":"And God said","max_tokens":10,"seed":4})");
  EXPECT_EQ(nlohmann::json::parse(rest.body)["choices"][0]["text"], text);
}

TEST_F(Grpc, TokenIdsTokenizeAndListModels) {
  v1::GenerateRequest req;
  req.set_model("rwkv");
  req.mutable_prompt_ids()->add_ids(3);
  req.mutable_prompt_ids()->add_ids(9);
  req.set_max_tokens(4);
  req.set_ignore_eos(true);
  grpc::Status st;
  auto out = generate(*stub(), req, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(out.back().usage().prompt_tokens(), 2u);
  grpc::ClientContext c1;
  v1::TokenizeRequest tr;
  tr.set_text("In the beginning");
  v1::TokenizeResponse tres;
  ASSERT_TRUE(stub()->Tokenize(&c1, tr, &tres).ok());
  EXPECT_GT(tres.token_ids_size(), 0);
  EXPECT_EQ(tres.pieces_size(), tres.token_ids_size());
  grpc::ClientContext c2;
  v1::ListModelsResponse lm;
  ASSERT_TRUE(stub()->ListModels(&c2, v1::ListModelsRequest(), &lm).ok());
  ASSERT_EQ(lm.models_size(), 2);
  EXPECT_EQ(lm.models(1).id(), "rwkv");
  EXPECT_EQ(lm.models(1).mixers(0), "rwkv");
  EXPECT_EQ(lm.models(0).backend(), "cpu");
}

TEST_F(Grpc, ErrorsCarryTheRightStatus) {
  grpc::Status st;
  v1::GenerateRequest unknown;
  unknown.set_model("nope");
  unknown.set_prompt("a");
  generate(*stub(), unknown, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  v1::GenerateRequest empty;
  empty.set_prompt("");
  generate(*stub(), empty, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest none;
  generate(*stub(), none, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest hot;
  hot.set_prompt("a");
  hot.set_temperature(-2);
  generate(*stub(), hot, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("temperature"), std::string::npos);
  // The ranges REST's JSON allows, so that both front ends refuse the same values.
  v1::GenerateRequest huge_seed;
  huge_seed.set_prompt("a");
  huge_seed.set_seed(uint64_t{1} << 63);
  generate(*stub(), huge_seed, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("seed"), std::string::npos);
  v1::GenerateRequest urgent;
  urgent.set_prompt("a");
  urgent.set_priority(-2000000);
  generate(*stub(), urgent, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("priority"), std::string::npos);
  v1::GenerateRequest largest_seed;
  largest_seed.set_prompt("a");
  largest_seed.set_max_tokens(2);
  largest_seed.set_seed(INT64_MAX);
  generate(*stub(), largest_seed, &st);
  EXPECT_TRUE(st.ok()) << st.error_message();
  v1::GenerateRequest badutf;
  badutf.set_prompt(std::string("a\xff"));
  generate(*stub(), badutf, &st);
  // gRPC fails to parse the request before the service sees it (the callback API answers
  // UNIMPLEMENTED, the synchronous one INTERNAL): an error either way, and nothing is queued.
  EXPECT_FALSE(st.ok());
}

// Calls a unary method with a raw serialized request (generic stub) and returns the raw response.
std::string raw_unary(grpc::Channel& ch, const std::string& method, const std::string& request,
                      grpc::Status* st) {
  grpc::GenericStub generic(std::shared_ptr<grpc::Channel>(&ch, [](grpc::Channel*) {}));
  grpc::ClientContext ctx;
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), res;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &res, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    *st = s;
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  std::vector<grpc::Slice> slices;
  std::string out;
  if (res.Dump(&slices).ok())
    for (auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST_F(Grpc, HealthServiceAndReflection) {
  grpc::Status st;
  // grpc.health.v1.HealthCheckRequest{service: ""} is empty; SERVING is status = 1 ("\x08\x01").
  const std::string health = raw_unary(**channel_, "/grpc.health.v1.Health/Check", "", &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(health, std::string("\x08\x01", 2));
  // grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo is a bidi stream; ask
  // list_services (field 7, an empty string) and look for our service in the answer.
  grpc::GenericStub generic(*channel_);
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  auto call = generic.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  ASSERT_TRUE(ok);
  grpc::Slice slice(std::string("\x3a\x00", 2));
  grpc::ByteBuffer req(&slice, 1), res;
  call->Write(req, reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  ASSERT_TRUE(ok);
  call->Read(&res, reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  ASSERT_TRUE(ok);
  std::vector<grpc::Slice> slices;
  std::string answer;
  ASSERT_TRUE(res.Dump(&slices).ok());
  for (auto& s : slices) answer.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(answer.find("mixserve.v1.TextGeneration"), std::string::npos);
  EXPECT_NE(answer.find("grpc.health.v1.Health"), std::string::npos);
  ctx.TryCancel();
  call->Finish(&st, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace mixserve::testing
