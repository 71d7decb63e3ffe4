// gRPC API keys (the `authorization` metadata) against what a user might try: no metadata, other
// spellings and keys, repeated metadata, every RPC; the standard health service stays open for
// probes; a key file written on Windows (CRLF) or with a blank line neither locks users out nor
// lets an empty key in.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "mixserve/v1/generation.grpc.pb.h"
#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

using Metadata = std::vector<std::pair<std::string, std::string>>;

grpc::StatusCode list_models(v1::TextGeneration::Stub& stub, const Metadata& md) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  for (const auto& [k, v] : md) ctx.AddMetadata(k, v);
  v1::ListModelsResponse r;
  return stub.ListModels(&ctx, v1::ListModelsRequest(), &r).error_code();
}

grpc::StatusCode generate(v1::TextGeneration::Stub& stub, const Metadata& md,
                          int* tokens = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  for (const auto& [k, v] : md) ctx.AddMetadata(k, v);
  v1::GenerateRequest req;
  req.set_prompt("And God said");
  req.set_max_tokens(3);
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse r;
  int n = 0;
  while (reader->Read(&r)) n += r.token_ids_size();
  if (tokens) *tokens = n;
  return reader->Finish().error_code();
}

grpc::StatusCode tokenize(v1::TextGeneration::Stub& stub, const Metadata& md) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  for (const auto& [k, v] : md) ctx.AddMetadata(k, v);
  v1::TokenizeRequest req;
  req.set_text("a");
  v1::TokenizeResponse r;
  return stub.Tokenize(&ctx, req, &r).error_code();
}

class GrpcAuth : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--model", source_dir() + "/models/default", "--api-key",
                                 "k3y-alpha", "--api-key", "k3y-alpha-beta"});
    stub_ = v1::TextGeneration::NewStub(
                grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials()))
                .release();
  }
  static void TearDownTestSuite() {
    delete stub_;
    delete server_;
  }
  static ServerProcess* server_;
  static v1::TextGeneration::Stub* stub_;
};
ServerProcess* GrpcAuth::server_ = nullptr;
v1::TextGeneration::Stub* GrpcAuth::stub_ = nullptr;

TEST_F(GrpcAuth, ValidKeyPassesOnEveryRpc) {
  const Metadata ok = {{"authorization", "Bearer k3y-alpha"}};
  EXPECT_EQ(list_models(*stub_, ok), grpc::StatusCode::OK);
  EXPECT_EQ(tokenize(*stub_, ok), grpc::StatusCode::OK);
  int tokens = 0;
  EXPECT_EQ(generate(*stub_, ok, &tokens), grpc::StatusCode::OK);
  EXPECT_EQ(tokens, 3);
}

TEST_F(GrpcAuth, MissingOrMalformedMetadataIsRefusedOnEveryRpc) {
  const std::vector<Metadata> bad = {
      {},
      {{"authorization", ""}},
      {{"authorization", "Bearer"}},
      {{"authorization", "Bearer "}},
      {{"authorization", "bearer k3y-alpha"}},
      {{"authorization", "Bearer  k3y-alpha"}},
      {{"authorization", "k3y-alpha"}},
      {{"authorization", "Basic k3y-alpha"}},
      {{"authorization", "Bearer k3y-alph"}},
      {{"authorization", "Bearer 3y-alpha"}},
      {{"authorization", "Bearer k3y-alpha-bet"}},
      {{"authorization", "Bearer k3y-alpha "}},
      {{"authorization", "Bearer k3y-alphak3y-alpha-beta"}},
      {{"x-api-key", "k3y-alpha"}},
      {{"api-key", "Bearer k3y-alpha"}},
      {{"authorization-bin", "Bearer k3y-alpha"}},
  };
  for (const Metadata& md : bad) {
    const std::string what = md.empty() ? "(none)" : md[0].first + ": \"" + md[0].second + "\"";
    EXPECT_EQ(list_models(*stub_, md), grpc::StatusCode::UNAUTHENTICATED) << what;
    EXPECT_EQ(tokenize(*stub_, md), grpc::StatusCode::UNAUTHENTICATED) << what;
    int tokens = -1;
    EXPECT_EQ(generate(*stub_, md, &tokens), grpc::StatusCode::UNAUTHENTICATED) << what;
    EXPECT_EQ(tokens, 0) << what;
  }
}

// The valid key in a second `authorization` entry must not count (the first is the one read);
// and a refused Generate leaves nothing behind in the engine.
TEST_F(GrpcAuth, RepeatedMetadataWithAWrongKeyFirstIsRefused) {
  EXPECT_EQ(list_models(*stub_,
                        {{"authorization", "Bearer wrong"}, {"authorization", "Bearer k3y-alpha"}}),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(
      generate(*stub_, {{"authorization", "Bearer wrong"}, {"authorization", "Bearer k3y-alpha"}}),
      grpc::StatusCode::UNAUTHENTICATED);
}

// Order does not matter either: a repeated `authorization` entry is refused whatever it holds.
TEST_F(GrpcAuth, RepeatedMetadataIsRefusedInEitherOrder) {
  EXPECT_EQ(list_models(*stub_,
                        {{"authorization", "Bearer k3y-alpha"}, {"authorization", "Bearer wrong"}}),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(GrpcAuth, RefusedGenerateLeavesNothingQueued) {
  auto finished = [&] {
    const std::string m = curl(server_->http_url("/metrics")).body;
    return std::max(
               0.0,
               metric(m, "mixserve_requests_total{finish_reason=\"length\",model=\"default\"}")) +
           std::max(0.0,
                    metric(m, "mixserve_requests_total{finish_reason=\"stop\",model=\"default\"}"));
  };
  const double before = finished();
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(generate(*stub_, {{"authorization", "Bearer nope"}}),
              grpc::StatusCode::UNAUTHENTICATED);
  const std::string m = curl(server_->http_url("/metrics")).body;
  EXPECT_EQ(metric(m, "mixserve_requests_waiting{model=\"default\"}"), 0);
  EXPECT_EQ(metric(m, "mixserve_requests_running{model=\"default\"}"), 0);
  EXPECT_EQ(finished(), before);
}

// grpc.health.v1.Health answers without a key: load balancers and kubelets probe it.
TEST_F(GrpcAuth, HealthServiceIsOpen) {
  auto channel = grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::ByteBuffer request, response;  // an empty HealthCheckRequest
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  grpc::Status status;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = s;
                      done = true;
                      cv.notify_one();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST(GrpcKeyFile, CrlfAndBlankLinesAreNotKeys) {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/keys", std::ios::binary) << "windows-key\r\n \n\t\nspaced-key  \n";
  ServerProcess s({"--model", source_dir() + "/models/default", "--api-key-file", dir + "/keys"});
  auto stub = v1::TextGeneration::NewStub(
      grpc::CreateChannel(s.grpc_target(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(list_models(*stub, {{"authorization", "Bearer windows-key"}}), grpc::StatusCode::OK);
  EXPECT_EQ(list_models(*stub, {{"authorization", "Bearer spaced-key"}}), grpc::StatusCode::OK);
  // (gRPC refuses control characters in metadata itself, so only spaces can be tried.)
  for (const char* v : {"Bearer  ", "Bearer   ", "Bearer windows-key ", "Bearer spaced-key  "})
    EXPECT_EQ(list_models(*stub, {{"authorization", v}}), grpc::StatusCode::UNAUTHENTICATED) << v;
  EXPECT_EQ(curl(s.http_url("/v1/models"), {"-H", "Authorization: Bearer windows-key"}).status,
            200);
}

}  // namespace
}  // namespace mixserve::testing
