// REST API keys against what a user might try to get past them: header spellings, a key hidden
// elsewhere, paths that are not quite /v1/completions, other methods. Everything but the
// exempted probes must answer 401 without a valid key, and a refused request must leave no trace
// in the engine (nothing queued, run or counted).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

const char* kBody = R"({"prompt":"And God said","max_tokens":2})";

class RestAuth : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--model", source_dir() + "/models/default", "--api-key",
                                 "k3y-alpha", "--api-key", "k3y-alpha-beta"});
  }
  static void TearDownTestSuite() { delete server_; }
  static std::string url(const std::string& path) { return server_->http_url(path); }
  static int post(const std::string& path, const std::vector<std::string>& args) {
    std::vector<std::string> a = {"--path-as-is"};
    a.insert(a.end(), args.begin(), args.end());
    return post_json(url(path), kBody, a).status;
  }
  static ServerProcess* server_;
};
ServerProcess* RestAuth::server_ = nullptr;

TEST_F(RestAuth, ValidKeysPass) {
  EXPECT_EQ(post("/v1/completions", {"-H", "Authorization: Bearer k3y-alpha"}), 200);
  EXPECT_EQ(post("/v1/completions", {"-H", "Authorization: Bearer k3y-alpha-beta"}), 200);
}

TEST_F(RestAuth, MalformedAuthorizationHeadersAreRefused) {
  // ("Authorization;" is curl's way to send the header with an empty value.)
  for (const char* h : {"Authorization;",
                        "Authorization: Bearer",
                        "Authorization: Bearer ",
                        "Authorization: bearer k3y-alpha",
                        "Authorization: BEARER k3y-alpha",
                        "Authorization: Bearer  k3y-alpha",
                        "Authorization: Bearer\tk3y-alpha",
                        "Authorization: Bearerk3y-alpha",
                        "Authorization: k3y-alpha",
                        "Authorization: Basic k3y-alpha",
                        "Authorization: Token k3y-alpha",
                        "Authorization: Bearer k3y-alph",         // a prefix of a key
                        "Authorization: Bearer 3y-alpha",         // a suffix of a key
                        "Authorization: Bearer k3y-alpha-bet",    // between the two keys
                        "Authorization: Bearer k3y-alpha-beta-",  // a key plus one byte
                        "Authorization: Bearer k3y-alphak3y-alpha-beta",
                        "Authorization: Bearer k3y-alpha,k3y-alpha-beta",
                        "Authorization: Bearer *",
                        "Authorization: Bearer %6B3y-alpha",
                        "X-Api-Key: k3y-alpha",
                        "Api-Key: k3y-alpha",
                        "Proxy-Authorization: Bearer k3y-alpha"})
    EXPECT_EQ(post("/v1/completions", {"-H", h}), 401) << h;
  EXPECT_EQ(post("/v1/completions", {}), 401) << "no header at all";
}

// Two Authorization headers are one field "a, b" (RFC 9110 §5.3): neither order may pass, so a
// proxy that appends its own header cannot be overridden by the client's, or the other way round.
TEST_F(RestAuth, DuplicateAuthorizationHeadersAreRefusedInEitherOrder) {
  EXPECT_EQ(post("/v1/completions",
                 {"-H", "Authorization: Bearer wrong", "-H", "Authorization: Bearer k3y-alpha"}),
            401);
  EXPECT_EQ(post("/v1/completions",
                 {"-H", "Authorization: Bearer k3y-alpha", "-H", "Authorization: Bearer wrong"}),
            401);
  EXPECT_EQ(post("/v1/completions", {"-H", "Authorization: Bearer k3y-alpha", "-H",
                                     "Authorization: Bearer k3y-alpha"}),
            401);
}

TEST_F(RestAuth, KeyInQueryStringOrBodyIsIgnored) {
  for (const char* q : {"?api_key=k3y-alpha", "?key=k3y-alpha", "?authorization=Bearer%20k3y-alpha",
                        "?access_token=k3y-alpha"})
    EXPECT_EQ(post(std::string("/v1/completions") + q, {}), 401) << q;
  auto r = post_json(url("/v1/completions"), R"({"prompt":"a","max_tokens":1,"user":"k3y-alpha"})");
  EXPECT_EQ(r.status, 401);
}

// Every spelling that is not exactly a route needs a key too (authentication runs before
// routing), and with a key none of them reaches a route it does not name.
TEST_F(RestAuth, PathTricksNeitherBypassNorReachCompletions) {
  const std::string long_path = "/v1/completions/" + std::string(8000, 'a');
  for (const std::string& p :
       {std::string("/v1/completions/"), std::string("//v1/completions"),
        std::string("/v1/../v1/completions"), std::string("/v1/./completions"),
        std::string("/v1/%63ompletions"), std::string("/v1%2Fcompletions"),
        std::string("/V1/COMPLETIONS"), std::string("/v1/completions%00"),
        std::string("/health/../v1/completions"), std::string("/metrics/../v1/completions"),
        std::string("/static/../v1/completions"), std::string("/v1/completions;/health"),
        long_path}) {
    const int denied = post(p, {});
    EXPECT_TRUE(denied == 401 || denied == 404) << p << " without a key: " << denied;
    if (p.rfind("/static/", 0) != 0) {
      EXPECT_EQ(denied, 401) << p;
    }
    const int keyed = post(p, {"-H", "Authorization: Bearer k3y-alpha"});
    EXPECT_NE(keyed, 200) << p << " reached a route it does not name";
  }
  // A path longer than the header limit is refused by the transport, and the server lives on.
  EXPECT_EQ(post("/v1/completions/" + std::string(20000, 'a'), {}), 431);
  EXPECT_EQ(curl(url("/health")).status, 200);
}

TEST_F(RestAuth, StaticFilesAreOpenButConfinedToTheirDirectory) {
  // The playground page is public (it holds no data and asks the user for a key).
  EXPECT_EQ(curl(url("/")).status, 200);
  for (const char* p : {"/static/../../../../etc/passwd", "/static/..%2F..%2F..%2Fetc%2Fpasswd",
                        "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/static//etc/passwd",
                        "/static/../server/auth.cc"}) {
    auto r = curl(url(p), {"--path-as-is"});
    EXPECT_NE(r.status, 200) << p;
    EXPECT_EQ(r.body.find("root:"), std::string::npos) << p;
  }
}

TEST_F(RestAuth, OtherMethodsNeedAKeyToo) {
  for (const char* m : {"PUT", "DELETE", "OPTIONS", "PATCH", "GET"}) {
    EXPECT_EQ(curl(url("/v1/completions"), {"-X", m}).status, 401) << m;
    EXPECT_EQ(
        curl(url("/v1/completions"), {"-X", m, "-H", "Authorization: Bearer k3y-alpha"}).status,
        405)
        << m;
  }
  EXPECT_EQ(curl(url("/v1/completions"), {"-I"}).status, 401) << "HEAD";
  EXPECT_EQ(curl(url("/v1/models"), {"-I"}).status, 401) << "HEAD";
  EXPECT_EQ(curl(url("/v1/models"), {"-X", "POST"}).status, 401);
}

TEST_F(RestAuth, ProbesAreExemptByDefault) {
  for (const char* p : {"/health", "/ready", "/metrics", "/health?x=1"})
    EXPECT_EQ(curl(url(p)).status, 200) << p;
  // The exemption is for the probes only, not for other methods on them or for their neighbours.
  EXPECT_EQ(curl(url("/health/")).status, 401);
  EXPECT_EQ(curl(url("/healthz")).status, 401);
  EXPECT_EQ(curl(url("/health"), {"-X", "POST"}).status, 405);
}

// Refused requests never reach the engine: nothing waits, runs, finishes or counts tokens.
TEST_F(RestAuth, RefusedRequestsLeaveNothingQueued) {
  auto counters = [&] {
    const std::string m = curl(url("/metrics")).body;
    double finished = 0;
    for (const char* r : {"length", "stop", "cancelled", "deadline", "error"})
      finished += std::max(0.0, metric(m, "mixserve_requests_total{finish_reason=\"" +
                                              std::string(r) + "\",model=\"default\"}"));
    return std::vector<double>{finished,
                               metric(m, "mixserve_prompt_tokens_total{model=\"default\"}"),
                               metric(m, "mixserve_requests_waiting{model=\"default\"}"),
                               metric(m, "mixserve_requests_running{model=\"default\"}")};
  };
  const auto before = counters();
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(
        post_json(url("/v1/completions"),
                  R"({"prompt":"And God said","max_tokens":100,"ignore_eos":true,"stream":true})",
                  {"-H", "Authorization: Bearer nope"})
            .status,
        401);
  const auto after = counters();
  EXPECT_EQ(before[0], after[0]) << "finished requests";
  EXPECT_EQ(before[1], after[1]) << "prompt tokens";
  EXPECT_EQ(after[2], 0) << "waiting";
  EXPECT_EQ(after[3], 0) << "running";
}

// The REST metrics label routes, not raw paths: an unauthenticated client sending made-up paths
// must not add a series per path (memory and scrape size without bound).
TEST_F(RestAuth, MadeUpPathsDoNotGrowTheMetrics) {
  for (int i = 0; i < 30; ++i) EXPECT_EQ(curl(url("/made-up-" + std::to_string(i))).status, 401);
  const std::string m = curl(url("/metrics")).body;
  EXPECT_EQ(m.find("made-up"), std::string::npos);
  EXPECT_GE(metric(m, "mixserve_http_responses_total{path=\"other\",status=\"401\"}"), 30);
}

TEST(RestAuthExemption, ClosedProbesNeedTheKey) {
  ServerProcess s({"--model", source_dir() + "/models/default", "--api-key", "k",
                   "--auth-exempt-health", "false"});
  for (const char* p : {"/health", "/ready", "/metrics"}) {
    EXPECT_EQ(curl(s.http_url(p)).status, 401) << p;
    EXPECT_EQ(curl(s.http_url(p), {"-H", "Authorization: Bearer k"}).status, 200) << p;
  }
}

}  // namespace
}  // namespace mixserve::testing
