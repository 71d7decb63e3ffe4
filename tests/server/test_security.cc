// API keys (REST Bearer header, gRPC authorization metadata) including bypass attempts, and TLS
// on both ports with a self-signed certificate made by openssl.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>

#include "mixserve/v1/generation.grpc.pb.h"
#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

TEST(Security, ApiKeysOnRest) {
  ServerProcess s({"--model", source_dir() + "/models/default", "--api-key", "s3cret-key-1",
                   "--api-key", "other-key-2"});
  const std::string body = R"({"prompt":"a","max_tokens":1})";
  const std::string url = s.http_url("/v1/completions");
  EXPECT_EQ(post_json(url, body).status, 401);
  auto denied = post_json(url, body);
  EXPECT_NE(denied.body.find("\"authentication_error\""), std::string::npos) << denied.body;
  EXPECT_EQ(post_json(url, body, {"-H", "Authorization: Bearer s3cret-key-1"}).status, 200);
  EXPECT_EQ(post_json(url, body, {"-H", "Authorization: Bearer other-key-2"}).status, 200);
  // attempts to get past the check
  for (const char* h : {"Authorization: Bearer s3cret-key", "Authorization: Bearer s3cret-key-1x",
                        "Authorization: Bearer S3CRET-KEY-1", "Authorization: bearer s3cret-key-1",
                        "Authorization: Basic s3cret-key-1", "Authorization: Bearer ",
                        "Authorization: s3cret-key-1", "Authorization: Bearer  s3cret-key-1",
                        "X-Api-Key: s3cret-key-1", "Authorization: Bearer s3cret-key-1\tx"})
    EXPECT_EQ(post_json(url, body, {"-H", h}).status, 401) << h;
  EXPECT_EQ(curl(s.http_url("/v1/models")).status, 401);
  // health, readiness and metrics stay open for probes and Prometheus by default
  EXPECT_EQ(curl(s.http_url("/health")).status, 200);
  EXPECT_EQ(curl(s.http_url("/metrics")).status, 200);
  ServerProcess closed({"--model", source_dir() + "/models/default", "--api-key", "k",
                        "--auth-exempt-health", "false"});
  EXPECT_EQ(curl(closed.http_url("/metrics")).status, 401);
  EXPECT_EQ(curl(closed.http_url("/metrics"), {"-H", "Authorization: Bearer k"}).status, 200);
}

TEST(Security, ApiKeysOnGrpc) {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/keys") << "file-key\n";
  ServerProcess s({"--model", source_dir() + "/models/default", "--api-key-file", dir + "/keys"});
  auto stub = v1::TextGeneration::NewStub(
      grpc::CreateChannel(s.grpc_target(), grpc::InsecureChannelCredentials()));
  auto list = [&](const std::string& auth) {
    grpc::ClientContext ctx;
    if (!auth.empty()) ctx.AddMetadata("authorization", auth);
    v1::ListModelsResponse r;
    return stub->ListModels(&ctx, v1::ListModelsRequest(), &r).error_code();
  };
  EXPECT_EQ(list(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list("Bearer wrong"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list("file-key"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list("Bearer file-key"), grpc::StatusCode::OK);
  grpc::ClientContext ctx;
  v1::GenerateRequest req;
  req.set_prompt("a");
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(Security, TlsOnBothPorts) {
  const std::string dir = temp_dir();
  int code = 0;
  run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -addext "
      "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
          dir + "/key.pem -out " + dir + "/cert.pem 2>&1",
      &code);
  ASSERT_EQ(code, 0) << "openssl could not make a certificate";
  ServerProcess s({"--model", source_dir() + "/models/default", "--tls-cert", dir + "/cert.pem",
                   "--tls-key", dir + "/key.pem"});
  EXPECT_NE(s.output().find("(TLS)"), std::string::npos);
  const std::string https = "https://127.0.0.1:" + std::to_string(s.http_port());
  auto ok = curl(https + "/v1/completions", {"--cacert", dir + "/cert.pem"},
                 R"({"prompt":"a","max_tokens":2})", true);
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(curl(https + "/health").status, 0) << "curl refuses a certificate it cannot verify";
  EXPECT_EQ(curl(s.http_url("/health")).status, 0) << "plain HTTP is not served on the HTTPS port";
  std::ifstream cert_file(dir + "/cert.pem");
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(cert_file), {});
  auto secure = v1::TextGeneration::NewStub(
      grpc::CreateChannel("localhost:" + std::to_string(s.grpc_port()), grpc::SslCredentials(ssl)));
  grpc::ClientContext c1;
  c1.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ListModelsResponse lm;
  const grpc::Status st = secure->ListModels(&c1, v1::ListModelsRequest(), &lm);
  EXPECT_TRUE(st.ok()) << st.error_message();
  auto plain = v1::TextGeneration::NewStub(
      grpc::CreateChannel(s.grpc_target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext c2;
  c2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  EXPECT_FALSE(plain->ListModels(&c2, v1::ListModelsRequest(), &lm).ok());
}

}  // namespace
}  // namespace mixserve::testing
