// Named sessions survive a restart (issue #22 item 9): a server with --session-dir runs several
// multi-turn sessions, some at once, and is sent SIGTERM while a turn of every session is in
// flight; the drain lets the turns finish and writes the sessions. A new server on the same
// directory restores them (skipping, with a log line, a damaged file and another model's), lists
// them at /v1/sessions, and the next turn of each prefills only its new tokens and gives exactly
// the tokens of the same conversation on a server that never restarted. DELETE drops one, whose
// next turn is then a miss.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Reply {
  std::vector<int32_t> tokens;
  int prompt_tokens = -1, cached_tokens = -1;
};

// One turn of every conversation at once, over curl (the harness's curl() is for one thread).
std::vector<Reply> turns(const ServerProcess& s, const std::string& model,
                         const std::vector<std::string>& ids,
                         const std::vector<std::vector<int32_t>>& prompts, int turn) {
  std::vector<std::string> files;
  for (size_t i = 0; i < ids.size(); ++i) {
    files.push_back(temp_dir() + "/body.json");
    std::ofstream(files.back()) << json{
        {"model", model},
        {"prompt", prompts[i]},
        {"max_tokens", 6},
        {"temperature", 0.9},
        {"seed", 1000 * turn + static_cast<int>(i)},
        {"session", ids[i]},
        {"logprobs", 0},
        {"return_tokens_as_token_ids",
         true}}.dump();
  }
  std::vector<std::string> out(ids.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ids.size(); ++i)
    threads.emplace_back([&, i] {
      out[i] = run("curl -sS --max-time 90 -H 'Content-Type: application/json' --data-binary @" +
                   files[i] + " " + s.http_url("/v1/completions"));
    });
  for (auto& t : threads) t.join();
  std::vector<Reply> replies;
  for (size_t i = 0; i < ids.size(); ++i) {
    Reply r;
    const json j = json::parse(out[i], nullptr, false);
    EXPECT_TRUE(j.contains("choices")) << ids[i] << " turn " << turn << ": " << out[i];
    if (!j.contains("choices")) {
      replies.push_back(r);
      continue;
    }
    for (const auto& t : j["choices"][0]["logprobs"]["tokens"])
      r.tokens.push_back(std::stoi(t.get<std::string>().substr(9)));  // "token_id:N"
    r.prompt_tokens = j["usage"]["prompt_tokens"];
    r.cached_tokens = j["usage"]["prompt_tokens_details"]["cached_tokens"];
    replies.push_back(r);
  }
  return replies;
}

// The transcript so far plus this turn's new tokens.
void extend(std::vector<int32_t>& transcript, const std::vector<int32_t>& reply, int turn, int i) {
  transcript.insert(transcript.end(), reply.begin(), reply.end());
  for (int k = 0; k < 3; ++k) transcript.push_back((7 * turn + 13 * i + 5 * k) % 97);
}

TEST(Sessions, SurviveARestartUnderLoad) {
  const std::string golden = source_dir() + "/tests/golden/";
  const std::string dir = temp_dir() + "/sessions";
  const std::string stall = temp_dir() + "/stall";
  const std::vector<std::string> ids = {"alice", "bob", "carol/2", "dave", "eve", "frank"};
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back({1 + i, 20 + i, 40 + i, 60 + i, 80 + i});

  ServerProcess reference({"--model", golden + "hybrid_a"});  // never restarted
  std::vector<Reply> expected;
  std::vector<std::vector<int32_t>> transcripts = prompts;
  {
    // The stall hook (docs/api.md "Liveness") holds every engine step while its file exists.
    setenv("MIXSERVE_TEST_STALL_FILE", stall.c_str(), 1);
    ServerProcess before({"--model", golden + "hybrid_a", "--model", golden + "hybrid_b",
                          "--session-dir", dir, "--drain-seconds", "60"});
    unsetenv("MIXSERVE_TEST_STALL_FILE");
    // Another model's session, for the foreign file below.
    turns(before, "hybrid_b", {"b0"}, {{9, 8, 7, 6}}, 1);
    for (int turn = 1; turn <= 3; ++turn) {
      std::vector<Reply> got;
      if (turn < 3) {
        got = turns(before, "hybrid_a", ids, transcripts, turn);
      } else {  // the last turn is in flight when SIGTERM comes, and finishes in the drain
        std::ofstream(stall) << "stall";
        std::thread load([&] { got = turns(before, "hybrid_a", ids, transcripts, turn); });
        // All six in the engine (held by the stall) before the signal: one that came after it
        // would be refused as the server drains. Not the harness's curl(): `load` uses it too.
        const std::string metrics = "curl -s " + before.http_url("/metrics");
        EXPECT_TRUE(wait_until(
            [&] {
              const std::string m = run(metrics);
              return metric(m, R"(mixserve_requests_waiting{model="hybrid_a"})") +
                         metric(m, R"(mixserve_requests_running{model="hybrid_a"})") ==
                     6;
            },
            std::chrono::seconds(30)));
        before.signal(SIGTERM);
        EXPECT_TRUE(
            wait_until([&] { return before.output().find("draining") != std::string::npos; },
                       std::chrono::seconds(10)));
        fs::remove(stall);
        load.join();
      }
      const std::vector<Reply> want = turns(reference, "hybrid_a", ids, transcripts, turn);
      for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << ids[i] << " turn " << turn;
        ASSERT_EQ(got[i].tokens.size(), 6u) << ids[i] << " turn " << turn;
        if (turn > 1) {
          EXPECT_GT(got[i].cached_tokens, 0) << ids[i] << " turn " << turn;
        }
      }
      expected = got;
      for (size_t i = 0; i < ids.size(); ++i) extend(transcripts[i], got[i].tokens, turn, i);
    }
    ASSERT_EQ(before.wait_exit(std::chrono::seconds(60)), 0) << before.output();
    EXPECT_NE(before.output().find("model hybrid_a: 6 sessions saved"), std::string::npos)
        << before.output();
  }
  // A damaged file and another model's file beside the six good ones.
  const std::string a_dir = dir + "/hybrid_a";
  ASSERT_TRUE(fs::exists(a_dir + "/carol%2F2.session"));
  fs::copy_file(dir + "/hybrid_b/b0.session", a_dir + "/foreign.session");
  {
    std::ifstream in(a_dir + "/alice.session", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    bytes[bytes.size() / 2] ^= 0x40;
    std::ofstream(a_dir + "/corrupt.session", std::ios::binary) << bytes;
  }

  ServerProcess after(
      {"--model", golden + "hybrid_a", "--model", golden + "hybrid_b", "--session-dir", dir});
  const std::string log = after.output();
  EXPECT_NE(log.find("session file " + a_dir + "/corrupt.session skipped: corrupt: checksum"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("session file " + a_dir +
                     "/foreign.session skipped: foreign: written for "
                     "another model"),
            std::string::npos)
      << log;
  EXPECT_TRUE(fs::exists(a_dir + "/corrupt.session")) << "skipped files are left in place";

  // Listed: every session with the tokens its state covers (all but the last one generated).
  auto listed = json::parse(curl(after.http_url("/v1/sessions")).body);
  EXPECT_EQ(listed["object"], "list");
  ASSERT_EQ(listed["data"].size(), 7u) << listed.dump();
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  std::map<std::string, json> by_id;
  for (const auto& s : listed["data"]) by_id[s["id"].get<std::string>()] = s;
  EXPECT_EQ(by_id["b0"]["model"], "hybrid_b");
  for (size_t i = 0; i < ids.size(); ++i) {
    const json& s = by_id[ids[i]];
    EXPECT_EQ(s["model"], "hybrid_a");
    EXPECT_EQ(s["tokens"], expected[i].prompt_tokens + 6 - 1) << ids[i];
    EXPECT_GT(s["bytes"].get<int64_t>(), 0);
    EXPECT_NEAR(s["last_used_at"].get<double>(), static_cast<double>(now), 120.0);
  }
  EXPECT_EQ(json::parse(curl(after.http_url("/v1/sessions?model=hybrid_b")).body)["data"].size(),
            1u);
  EXPECT_EQ(curl(after.http_url("/v1/sessions?model=nope")).status, 404);

  // DELETE drops one (its next turn is then a miss); a second DELETE finds nothing.
  auto del = curl(after.http_url("/v1/sessions/frank"), {"-X", "DELETE"});
  ASSERT_EQ(del.status, 200) << del.body;
  EXPECT_EQ(json::parse(del.body),
            json({{"id", "frank"}, {"object", "session"}, {"deleted", true}}));
  auto again = curl(after.http_url("/v1/sessions/frank"), {"-X", "DELETE"});
  EXPECT_EQ(again.status, 404);
  EXPECT_EQ(json::parse(again.body)["error"]["code"], "session_not_found");
  EXPECT_EQ(curl(after.http_url("/v1/sessions/carol%2F2"), {"-X", "GET"}).status, 405);
  EXPECT_EQ(json::parse(curl(after.http_url("/v1/sessions")).body)["data"].size(), 6u);

  // The next turn of every session, on the restarted server and on the one that never stopped.
  const std::vector<Reply> got = turns(after, "hybrid_a", ids, transcripts, 4);
  const std::vector<Reply> want = turns(reference, "hybrid_a", ids, transcripts, 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << ids[i];
    const int covered = expected[i].prompt_tokens + 6 - 1;
    EXPECT_EQ(got[i].prompt_tokens, covered + 1 + 3);  // the last reply token and 3 new ones
    EXPECT_EQ(want[i].cached_tokens, covered) << ids[i];
    EXPECT_EQ(got[i].cached_tokens, ids[i] == "frank" ? 0 : covered) << ids[i];
  }
}

}  // namespace
}  // namespace mixserve::testing
