// What an operator watches and a client correlates, tested as they meet it: X-Request-Id on every
// REST response and stream and as gRPC metadata, one log line per request and per error (JSON or
// text; no prompt unless --log-prompts), CORS headers and preflights (the browser's view is
// tests/clients/cors_test.js), and /health + gRPC health turning unhealthy while an engine step is
// stuck (MIXSERVE_TEST_STALL_FILE, the test-only stall of docs/api.md).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "mixserve/v1/generation.grpc.pb.h"
#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

using json = nlohmann::json;

const std::string kPrompt = "And God said";

// The server's log lines that parse as JSON objects with event "request".
std::vector<json> request_lines(const std::string& output) {
  std::vector<json> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.value("event", "") == "request") lines.push_back(j);
  }
  return lines;
}

// The request line with this id; waits for it (a line is written when the request ends).
json request_line(const ServerProcess& s, const std::string& id) {
  json found;
  wait_until(
      [&] {
        for (const json& j : request_lines(s.output()))
          if (j.value("request_id", "") == id) return found = j, true;
        return false;
      },
      std::chrono::seconds(5));
  return found;
}

// grpc.health.v1.Health/Check for the whole server: 1 SERVING, 2 NOT_SERVING, -1 on error.
int grpc_health(const std::string& target) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty(std::string{});
  grpc::ByteBuffer req(&empty, 1), res;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &req, &res,
                    [&](grpc::Status s) { done.set_value(s); });
  if (!done.get_future().get().ok()) return -1;
  std::vector<grpc::Slice> slices;
  std::string out;
  if (res.Dump(&slices).ok())
    for (auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out.size() == 2 && out[0] == '\x08' ? out[1] : -1;
}

TEST(Observability, RequestIdsOnEveryRestResponseAndInTheJsonLog) {
  ServerProcess s({"--model", source_dir() + "/models/default", "--log-format", "json"});
  // Given: the same id comes back in the header, in the completion's id and in the log line.
  const std::string body = R"({"prompt":")" + kPrompt + R"(","max_tokens":5,"seed":1})";
  auto r = post_json(s.http_url("/v1/completions"), body, {"-H", "X-Request-Id: job-42/a"});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["x-request-id"], "job-42/a");
  EXPECT_EQ(json::parse(r.body)["id"], "cmpl-job-42/a");
  const json line = request_line(s, "job-42/a");
  ASSERT_FALSE(line.is_null()) << s.output();
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["api"], "rest");
  EXPECT_EQ(line["route"], "/v1/completions");
  EXPECT_EQ(line["model"], "default");
  EXPECT_EQ(line["status"], 200);
  EXPECT_EQ(line["finish_reason"], "length");
  EXPECT_EQ(line["completion_tokens"], 5);
  EXPECT_GT(line["prompt_tokens"].get<int>(), 0);
  EXPECT_GT(line["ttft_ms"].get<double>(), 0);
  EXPECT_GE(line["e2e_ms"].get<double>(), line["ttft_ms"].get<double>());
  EXPECT_FALSE(line.contains("prompt")) << "prompts are not logged without --log-prompts";
  EXPECT_EQ(s.output().find(kPrompt), std::string::npos) << s.output();
  // Not given: a fresh 32-hex-digit id, on JSON, streamed and chat responses alike.
  const std::regex fresh("[0-9a-f]{32}");
  auto plain = post_json(s.http_url("/v1/completions"), body);
  EXPECT_TRUE(std::regex_match(plain.headers["x-request-id"], fresh))
      << plain.headers["x-request-id"];
  EXPECT_EQ(json::parse(plain.body)["id"], "cmpl-" + plain.headers["x-request-id"]);
  auto sse =
      post_json(s.http_url("/v1/completions"), R"({"prompt":"x","max_tokens":3,"stream":true})",
                {"-N", "-H", "X-Request-Id: s1"});
  EXPECT_EQ(sse.headers["content-type"], "text/event-stream");
  EXPECT_EQ(sse.headers["x-request-id"], "s1");
  EXPECT_NE(sse.body.find(R"("id":"cmpl-s1")"), std::string::npos) << sse.body;
  EXPECT_EQ(request_line(s, "s1")["status"], 200);
  // Errors carry it too, and each is one warn line with its status and message.
  auto bad = post_json(s.http_url("/v1/completions"), R"({"prompt":"x","max_tokens":-1})",
                       {"-H", "X-Request-Id: bad-1"});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.headers["x-request-id"], "bad-1");
  const json err = request_line(s, "bad-1");
  EXPECT_EQ(err["level"], "warn");
  EXPECT_EQ(err["status"], 400);
  EXPECT_NE(err["error"].get<std::string>().find("max_tokens"), std::string::npos) << err;
  for (const char* path : {"/health", "/v1/models", "/no/such/route"})
    EXPECT_TRUE(std::regex_match(curl(s.http_url(path)).headers["x-request-id"], fresh)) << path;
  EXPECT_EQ(request_lines(s.output()).size(), 5u)
      << "one line per generation or error (the 404 too):\n"
      << s.output();
  // An id no header or log line could carry as it is: refused.
  auto long_id = post_json(s.http_url("/v1/completions"), body,
                           {"-H", "X-Request-Id: " + std::string(200, 'a')});
  EXPECT_EQ(long_id.status, 400);
  EXPECT_EQ(json::parse(long_id.body)["error"]["param"], "X-Request-Id");
  EXPECT_EQ(curl(s.http_url("/health")).status, 200);
}

TEST(Observability, GrpcRequestIdInMetadataResponsesAndLog) {
  ServerProcess s(
      {"--model", source_dir() + "/models/default", "--log-format", "json", "--log-prompts"});
  auto stub = v1::TextGeneration::NewStub(
      grpc::CreateChannel(s.grpc_target(), grpc::InsecureChannelCredentials()));
  v1::GenerateRequest req;
  req.set_prompt(kPrompt);
  req.set_max_tokens(4);
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-request-id", "grpc-7");
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse res;
  int responses = 0;
  while (reader->Read(&res)) {
    ++responses;
    EXPECT_EQ(res.request_id(), "grpc-7");
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_GT(responses, 0);
  const auto md = ctx.GetServerInitialMetadata();
  ASSERT_EQ(md.count("x-request-id"), 1u);
  EXPECT_EQ(
      std::string(md.find("x-request-id")->second.data(), md.find("x-request-id")->second.size()),
      "grpc-7");
  const json line = request_line(s, "grpc-7");
  ASSERT_FALSE(line.is_null()) << s.output();
  EXPECT_EQ(line["api"], "grpc");
  EXPECT_EQ(line["route"], "Generate");
  EXPECT_EQ(line["completion_tokens"], 4);
  EXPECT_EQ(line["prompt"], kPrompt) << "--log-prompts puts the prompt in the line";
  EXPECT_TRUE(line.contains("completion"));
  // An error gets a fresh id in the metadata and its own line.
  v1::GenerateRequest none;
  grpc::ClientContext ctx2;
  auto r2 = stub->Generate(&ctx2, none);
  while (r2->Read(&res)) {
  }
  EXPECT_EQ(r2->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const auto md2 = ctx2.GetServerInitialMetadata();
  ASSERT_EQ(md2.count("x-request-id"), 1u);
  const std::string id2(md2.find("x-request-id")->second.data(),
                        md2.find("x-request-id")->second.size());
  EXPECT_EQ(request_line(s, id2)["status"], 400);
}

TEST(Observability, TextLogsAndLevels) {
  ServerProcess s({"--model", source_dir() + "/models/default", "--log-level", "warn"});
  auto ok = post_json(s.http_url("/v1/completions"), R"({"prompt":"x","max_tokens":2})",
                      {"-H", "X-Request-Id: quiet-1"});
  ASSERT_EQ(ok.status, 200);
  auto bad = post_json(s.http_url("/v1/completions"), R"({"prompt":"x","max_tokens":"two"})",
                       {"-H", "X-Request-Id: loud-1"});
  ASSERT_EQ(bad.status, 400);
  ASSERT_TRUE(wait_until([&] { return s.output().find("request_id=loud-1") != std::string::npos; },
                         std::chrono::seconds(5)))
      << s.output();
  const std::string out = s.output();
  EXPECT_EQ(out.find("quiet-1"), std::string::npos) << "a success is info, below --log-level warn";
  EXPECT_TRUE(std::regex_search(
      out,
      std::regex(
          R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z warn request request_id=loud-1 api=rest route=/v1/completions status=400 error=")")))
      << out;
}

TEST(Observability, CorsHeadersAndPreflights) {
  ServerProcess s({"--model", source_dir() + "/models/default", "--api-key", "k1",
                   "--allowed-origins", "http://app.example,http://other.example"});
  const std::string url = s.http_url("/v1/completions");
  auto preflight = curl(url, {"-X", "OPTIONS", "-H", "Origin: http://app.example", "-H",
                              "Access-Control-Request-Method: POST", "-H",
                              "Access-Control-Request-Headers: authorization,content-type"});
  EXPECT_EQ(preflight.status, 204) << "no API key needed for a preflight";
  EXPECT_EQ(preflight.headers["access-control-allow-origin"], "http://app.example");
  EXPECT_NE(preflight.headers["access-control-allow-methods"].find("POST"), std::string::npos);
  EXPECT_EQ(preflight.headers["access-control-allow-headers"], "authorization,content-type");
  EXPECT_EQ(curl(url, {"-X", "OPTIONS", "-H", "Origin: http://app.example"}).status, 401)
      << "an OPTIONS request that is no preflight needs the key like any other";
  auto foreign = curl(url, {"-X", "OPTIONS", "-H", "Origin: http://evil.example", "-H",
                            "Access-Control-Request-Method: POST"});
  EXPECT_EQ(foreign.status, 403);
  EXPECT_EQ(foreign.headers.count("access-control-allow-origin"), 0u);
  EXPECT_NE(
      json::parse(foreign.body)["error"]["message"].get<std::string>().find("--allowed-origins"),
      std::string::npos);
  auto call = post_json(url, R"({"prompt":"x","max_tokens":2})",
                        {"-H", "Origin: http://other.example", "-H", "Authorization: Bearer k1"});
  EXPECT_EQ(call.status, 200);
  EXPECT_EQ(call.headers["access-control-allow-origin"], "http://other.example");
  EXPECT_EQ(call.headers["access-control-expose-headers"], "X-Request-Id");
  EXPECT_EQ(call.headers["vary"], "Origin");
  auto unauth = post_json(url, R"({"prompt":"x"})", {"-H", "Origin: http://other.example"});
  EXPECT_EQ(unauth.status, 401);
  EXPECT_EQ(unauth.headers["access-control-allow-origin"], "http://other.example")
      << "a browser page must be able to read the 401";
  auto other = post_json(url, R"({"prompt":"x","max_tokens":2})",
                         {"-H", "Origin: http://evil.example", "-H", "Authorization: Bearer k1"});
  EXPECT_EQ(other.status, 200) << "CORS is the browser's check; the request itself is served";
  EXPECT_EQ(other.headers.count("access-control-allow-origin"), 0u);
}

TEST(Observability, NoCorsHeadersByDefault) {
  ServerProcess s({"--model", source_dir() + "/models/default"});
  auto r = curl(s.http_url("/v1/models"), {"-H", "Origin: http://app.example"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u);
  auto preflight =
      curl(s.http_url("/v1/models"), {"-X", "OPTIONS", "-H", "Origin: http://app.example", "-H",
                                      "Access-Control-Request-Method: GET"});
  EXPECT_EQ(preflight.status, 403);
}

TEST(Observability, HealthFailsWhileAnEngineStepIsStuck) {
  const std::string stall = temp_dir() + "/stall";
  setenv("MIXSERVE_TEST_STALL_FILE", stall.c_str(), 1);
  ServerProcess s({"--model", source_dir() + "/models/default", "--engine-stall-seconds", "0.5",
                   "--log-format", "json"});
  unsetenv("MIXSERVE_TEST_STALL_FILE");
  EXPECT_EQ(curl(s.http_url("/health")).status, 200);
  EXPECT_EQ(grpc_health(s.grpc_target()), 1);
  std::ofstream(stall) << "stuck";
  auto pending = std::async(std::launch::async, [&] {
    return post_json(s.http_url("/v1/completions"), R"({"prompt":"x","max_tokens":3})");
  });
  HttpResult health;
  ASSERT_TRUE(wait_until([&] { return (health = curl(s.http_url("/health"))).status == 503; },
                         std::chrono::seconds(10)))
      << s.output();
  const json h = json::parse(health.body);
  EXPECT_EQ(h["status"], "stalled");
  EXPECT_EQ(h["model"], "default");
  EXPECT_GT(h["step_seconds"].get<double>(), 0.5);
  EXPECT_TRUE(
      wait_until([&] { return grpc_health(s.grpc_target()) == 2; }, std::chrono::seconds(5)));
  EXPECT_NE(s.output().find(R"("event":"engine_stall")"), std::string::npos) << s.output();
  std::remove(stall.c_str());  // the step goes on
  EXPECT_EQ(pending.get().status, 200);
  EXPECT_TRUE(wait_until([&] { return curl(s.http_url("/health")).status == 200; },
                         std::chrono::seconds(5)));
  EXPECT_TRUE(
      wait_until([&] { return grpc_health(s.grpc_target()) == 1; }, std::chrono::seconds(5)));
}

TEST(Observability, AnIdleEngineIsHealthy) {
  // Waiting for work is no stall, however long: /health stays 200 past the limit.
  ServerProcess s({"--model", source_dir() + "/models/default", "--engine-stall-seconds", "0.2"});
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(curl(s.http_url("/health")).status, 200);
  EXPECT_EQ(post_json(s.http_url("/v1/completions"), R"({"prompt":"x","max_tokens":2})").status,
            200);
  EXPECT_EQ(curl(s.http_url("/health")).status, 200);
  EXPECT_EQ(grpc_health(s.grpc_target()), 1);
}

}  // namespace
}  // namespace mixserve::testing
