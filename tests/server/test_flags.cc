// The mixserve command line, run as a user runs it: every bad flag value is refused with one
// line naming the flag and exit code 2 before anything loads or listens; MIXSERVE_<FLAG>
// environment variables, vLLM's aliases, --version and booleans; and the arithmetic of
// --gpu-memory-utilization (the CUDA side cannot run here).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "app/backend_select.h"
#include "tests/server/harness.h"

namespace mixserve::testing {
namespace {

struct Outcome {
  int code = -1;
  std::string output;  // stdout and stderr
};

// `env` goes before the binary (VAR=value ...); a 20 s timeout stops a server that wrongly starts.
Outcome mixserve(const std::string& args, const std::string& env = "") {
  Outcome o;
  o.output = run("cd '" + source_dir() + "' && " + env + " timeout -s KILL 20 " + MIXSERVE_BINARY +
                     " " + args + " 2>&1 </dev/null",
                 &o.code);
  return o;
}

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

// Refused: exit 2, one line on stderr naming `flag`, nothing loaded, nothing listening.
void expect_refused(const std::string& args, const std::string& flag, const std::string& env = "") {
  SCOPED_TRACE(env + " mixserve " + args);
  const Outcome o = mixserve(args, env);
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_EQ(lines(o.output), 1u) << o.output;
  EXPECT_NE(o.output.find("error: "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(flag), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("listening"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("layers, context"), std::string::npos)
      << o.output;  // no model was loaded
}

const std::string kModel = "--model models/default ";

TEST(Flags, CountsOfZeroAreRefused) {
  for (const char* flag : {"--prefill-chunk", "--max-batch", "--max-queue", "--step-token-budget",
                           "--http-threads", "--max-body-bytes", "--max-prompt-chars"})
    expect_refused("serve " + kModel + flag + " 0", flag);
  expect_refused("serve " + kModel + "--max-batch -3", "--max-batch");
  expect_refused("serve " + kModel + "--max-batch 4x", "--max-batch");
  expect_refused("serve " + kModel + "--prefill-chunk=0", "--prefill-chunk");
  expect_refused("generate " + kModel + "--prompt hi --max-tokens 0", "--max-tokens");
}

TEST(Flags, RangesAreChecked) {
  expect_refused("serve " + kModel + "--http-port 70000", "--http-port");
  expect_refused("serve " + kModel + "--grpc-port -1", "--grpc-port");
  expect_refused("serve " + kModel + "--gpu-memory-fraction 1.5", "--gpu-memory-fraction");
  expect_refused("serve " + kModel + "--gpu-memory-utilization 0", "--gpu-memory-utilization");
  expect_refused("serve " + kModel + "--header-timeout 0", "--header-timeout");
  expect_refused("serve " + kModel + "--idle-timeout -1", "--idle-timeout");
  expect_refused("serve " + kModel + "--session-ttl nan", "--session-ttl");
  expect_refused("serve " + kModel + "--threads -1", "--threads");
  expect_refused("serve " + kModel + "--backend tpu", "--backend");
  expect_refused("generate " + kModel + "--prompt hi --top-p 1.5", "--top-p");
  expect_refused("generate " + kModel + "--prompt hi --logprobs 21", "--logprobs");
  expect_refused("generate " + kModel + "--prompt hi --temperature -1", "--temperature");
}

TEST(Flags, ZeroStaysValidWhereItMeansSomething) {
  // --threads 0 (all cores) and --cache-entries 0 (off) pass the flags; the help says so.
  const Outcome o = mixserve("serve --threads 0 --cache-entries 0 --max-tokens-limit 0 --help");
  EXPECT_EQ(o.code, 0) << o.output;
}

TEST(Flags, AValueFlagNeverTakesTheNextFlag) {
  expect_refused("serve --api-key --model m", "--api-key");
  expect_refused("serve " + kModel + "--api-key", "--api-key");
  expect_refused("generate --prompt --model models/default", "--prompt");
  expect_refused("serve " + kModel + "--no-such-flag", "--no-such-flag");
}

TEST(Flags, MalformedValuesNameTheFlag) {
  expect_refused("generate " + kModel + "--prompt hi --stop-token-id x", "--stop-token-id");
  expect_refused("generate " + kModel + "--prompt hi --ignore-eos=maybe", "--ignore-eos");
  expect_refused("serve " + kModel + "--auth-exempt-health maybe", "--auth-exempt-health");
  expect_refused("generate " + kModel + "--seed -1 --prompt hi", "--seed");
}

TEST(Flags, FlagsThatMustAgree) {
  expect_refused("serve " + kModel + "--served-model-name a --served-model-name b",
                 "--served-model-name");
  expect_refused("serve " + kModel + "--gpu-memory-utilization 0.9 --gpu-memory-fraction 0.5",
                 "--gpu-memory");
  expect_refused("serve " + kModel + "--gpu-memory-utilization 0.9 --pool-bytes 100000",
                 "--pool-bytes");
  expect_refused("generate " + kModel, "--prompt");
}

TEST(Flags, VllmAliases) {
  const Outcome o = mixserve("serve " + kModel + "--max-num-seqs 0");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("--max-num-seqs"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("--max-batch"), std::string::npos) << o.output;
  expect_refused("serve " + kModel + "--max-num-batched-tokens 0", "--max-num-batched-tokens");
  expect_refused("serve " + kModel + "--port 65536", "--port");
  expect_refused("serve " + kModel + "--ssl-certfile", "--ssl-certfile");
  const Outcome help = mixserve("serve --help");
  for (const char* alias :
       {"--port", "--host", "--max-num-seqs", "--max-num-batched-tokens", "--ssl-certfile",
        "--ssl-keyfile", "--served-model-name", "--api-key", "--gpu-memory-utilization"})
    EXPECT_NE(help.output.find(alias), std::string::npos) << alias;
}

TEST(Flags, EnvironmentVariables) {
  expect_refused("serve " + kModel, "--max-batch", "MIXSERVE_MAX_BATCH=0");
  expect_refused("serve " + kModel, "MIXSERVE_PREFILL_CHUNK", "MIXSERVE_PREFILL_CHUNK=0");
  expect_refused("generate " + kModel + "--prompt hi", "--ignore-eos",
                 "MIXSERVE_IGNORE_EOS=perhaps");
  // The command line wins over the environment.
  const Outcome o = mixserve("serve " + kModel + "--max-batch 2 --help", "MIXSERVE_MAX_BATCH=0");
  EXPECT_EQ(o.code, 0) << o.output;
}

TEST(Flags, EnvironmentAndAliasesReachTheServer) {
  // ServerProcess passes --grpc-port 0 --http-port 0; the rest comes from here and the environment.
  setenv("MIXSERVE_MAX_BATCH", "3", 1);  // overridden by --max-num-seqs below
  setenv("MIXSERVE_MAX_QUEUE", "9", 1);  // taken
  setenv("MIXSERVE_SERVED_MODEL_NAME", "from-env", 1);
  setenv("MIXSERVE_AUTH_EXEMPT_HEALTH", "no", 1);  // /metrics then needs the key
  setenv("MIXSERVE_API_KEY", "env-key", 1);
  ServerProcess server({"--model", source_dir() + "/models/default", "--max-num-seqs", "5"});
  for (const char* v : {"MIXSERVE_MAX_BATCH", "MIXSERVE_MAX_QUEUE", "MIXSERVE_SERVED_MODEL_NAME",
                        "MIXSERVE_AUTH_EXEMPT_HEALTH", "MIXSERVE_API_KEY"})
    unsetenv(v);
  EXPECT_EQ(curl(server.http_url("/metrics")).status, 401);
  const HttpResult m = curl(server.http_url("/metrics"), {"-H", "Authorization: Bearer env-key"});
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_TRUE(
      std::regex_search(m.body, std::regex(R"(\nmixserve_requests_max_running\{[^}]*\} 5\n)")))
      << m.body;
  EXPECT_TRUE(
      std::regex_search(m.body, std::regex(R"(\nmixserve_requests_max_queue\{[^}]*\} 9\n)")))
      << m.body;
  const HttpResult models =
      curl(server.http_url("/v1/models"), {"-H", "Authorization: Bearer env-key"});
  EXPECT_NE(models.body.find("\"from-env\""), std::string::npos) << models.body;
}

TEST(Flags, Version) {
  const std::regex version(R"(^mixserve \S+\n$)");
  for (const char* args : {"--version", "serve --version", "generate --version"}) {
    const Outcome o = mixserve(args);
    EXPECT_EQ(o.code, 0) << args << ": " << o.output;
    EXPECT_TRUE(std::regex_match(o.output, version)) << args << ": " << o.output;
  }
}

TEST(Flags, HelpListsEveryFlagWithDefaultAndEnv) {
  const Outcome o = mixserve("serve --help");
  EXPECT_EQ(o.code, 0);
  for (const char* s :
       {"--max-batch,--max-num-seqs", "(default 256)", "(env MIXSERVE_MAX_BATCH)",
        "--chat-template", "--prefill-chunk", "(default 256)", "--drain-seconds", "--static-dir"})
    EXPECT_NE(o.output.find(s), std::string::npos) << s << "\n" << o.output;
  const Outcome g = mixserve("generate --help");
  for (const char* s :
       {"--ignore-eos", "--stop-token-id", "--temperature", "(default 64)", "(env MIXSERVE_SEED)"})
    EXPECT_NE(g.output.find(s), std::string::npos) << s << "\n" << g.output;
}

// The last line of `mixserve generate`: "[model] finish=... completion_tokens=N ...".
std::string finish_line(const std::string& out) {
  const size_t at = out.rfind("finish=");
  return at == std::string::npos ? out : out.substr(at, out.find('\n', at) - at);
}

TEST(Flags, IgnoreEosTakesEffect) {
  // models/default rarely ends a text, so a copy of it names as its end-of-sequence token one that
  // the greedy completion of "And God said" reaches at its 27th token (13, a line break): it stops
  // there, and with --ignore-eos=1 (and the other spellings) it runs to --max-tokens.
  const std::string dir = temp_dir() + "/eos13", src = source_dir() + "/models/default";
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink(src + "/model.safetensors", dir + "/model.safetensors");
  std::filesystem::create_symlink(src + "/tokenizer.model", dir + "/tokenizer.model");
  std::ifstream in(src + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["eos_id"] = 13;
  std::ofstream(dir + "/config.json") << config.dump();
  const std::string base = "generate --model " + dir +
                           " --threads 1 --prompt 'And God said' --max-tokens 96 --temperature 0 ";
  const Outcome plain = mixserve(base);
  ASSERT_EQ(plain.code, 0) << plain.output;
  ASSERT_NE(finish_line(plain.output).find("finish=stop"), std::string::npos) << plain.output;
  for (const char* flag :
       {"--ignore-eos=1", "--ignore-eos", "--ignore-eos=yes", "--ignore-eos true"}) {
    const Outcome o = mixserve(base + flag);
    ASSERT_EQ(o.code, 0) << flag << ": " << o.output;
    EXPECT_NE(finish_line(o.output).find("finish=length"), std::string::npos)
        << flag << ": " << o.output;
    EXPECT_NE(finish_line(o.output).find("completion_tokens=96"), std::string::npos)
        << flag << ": " << o.output;
  }
  const Outcome env = mixserve(base, "MIXSERVE_IGNORE_EOS=1");
  EXPECT_NE(finish_line(env.output).find("finish=length"), std::string::npos) << env.output;
  for (const char* flag : {"--ignore-eos=0", "--ignore-eos=false", "--ignore-eos no"}) {
    const Outcome off = mixserve(base + flag);
    EXPECT_NE(finish_line(off.output).find("finish=stop"), std::string::npos)
        << flag << ": " << off.output;
  }
}

// `mixserve generate` with `flags` on the default model writes 8 tokens.
void expect_generate_completes(const std::string& flags) {
  const Outcome o =
      mixserve("generate " + kModel +
               "--threads 1 --prompt 'And God said' --max-tokens 8 --temperature 0 " + flags);
  ASSERT_EQ(o.code, 0) << flags << ": " << o.output;
  EXPECT_NE(finish_line(o.output).find("completion_tokens=8"), std::string::npos)
      << flags << ": " << o.output;
}

// A server on the default model with `env_var` set to `value` says `startup` in its start-up
// output and completes a request over REST.
void expect_server_with_env_completes(const char* env_var, const char* value,
                                      const std::string& startup) {
  setenv(env_var, value, 1);
  ServerProcess server({"--model", source_dir() + "/models/default"});
  unsetenv(env_var);
  EXPECT_NE(server.output().find(startup), std::string::npos) << server.output();
  const HttpResult r = curl(server.http_url("/v1/completions"),
                            {"-H", "Content-Type: application/json", "-d",
                             R"({"prompt": "And God said", "max_tokens": 5, "temperature": 0})"});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["usage"]["completion_tokens"], 5) << r.body;
}

// --overlap-steps (MIXSERVE_OVERLAP_STEPS; docs/scheduler.md): each engine step queued before the
// previous one's tokens are read. The same seeded completions as without it over REST, streamed
// or not, ending on a stop string or at max_tokens; /metrics counts the steps it overlapped.
TEST(Flags, OverlapStepsGiveTheSameCompletions) {
  // A completion's text and finish reason, from its JSON or its stream's events.
  auto text_of = [](const std::string& body, bool stream) {
    std::string text, finish;
    auto take = [&](const nlohmann::json& j) {
      if (j["choices"].empty()) return;
      text += j["choices"][0]["text"].get<std::string>();
      if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
    };
    if (!stream) {
      take(nlohmann::json::parse(body));
    } else {
      std::istringstream in(body);
      for (std::string line; std::getline(in, line);)
        if (line.rfind("data: {", 0) == 0) take(nlohmann::json::parse(line.substr(6)));
    }
    return text + " | " + finish;
  };
  auto completions = [&](ServerProcess& server) {
    std::vector<std::string> texts;
    for (int seed = 1; seed <= 3; ++seed)
      for (const char* extra : {"", R"(, "stop": [","])", R"(, "stream": true)"}) {
        const std::string body = R"({"prompt": "And God said", "max_tokens": 24, )"
                                 R"("temperature": 0.8, "seed": )" +
                                 std::to_string(seed) + extra + "}";
        const HttpResult r = curl(server.http_url("/v1/completions"),
                                  {"-H", "Content-Type: application/json", "-d", body});
        EXPECT_EQ(r.status, 200) << r.body;
        texts.push_back(text_of(r.body, std::string(extra).find("stream") != std::string::npos));
      }
    return texts;
  };
  ServerProcess plain({"--model", source_dir() + "/models/default", "--threads", "1"});
  const std::vector<std::string> want = completions(plain);
  setenv("MIXSERVE_OVERLAP_STEPS", "1", 1);
  ServerProcess overlapped_server({"--model", source_dir() + "/models/default", "--threads", "1"});
  unsetenv("MIXSERVE_OVERLAP_STEPS");
  const std::vector<std::string> got = completions(overlapped_server);
  ASSERT_EQ(got.size(), want.size());
  size_t chars = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << i;
    chars += got[i].size();
  }
  EXPECT_GT(chars, 200u) << "the completions have text";
  // mixserve_overlapped_steps_total counts the steps queued behind one in flight.
  const std::regex overlapped(R"(\nmixserve_overlapped_steps_total\{[^}]*\} (\d+))");
  std::smatch match;
  const std::string on = curl(overlapped_server.http_url("/metrics")).body,
                    off = curl(plain.http_url("/metrics")).body;
  ASSERT_TRUE(std::regex_search(on, match, overlapped)) << on;
  EXPECT_GT(std::stoi(match[1]), 50);
  ASSERT_TRUE(std::regex_search(off, match, overlapped)) << off;
  EXPECT_EQ(match[1], "0");
  // And `mixserve generate --overlap-steps`: the same seeded text as without.
  const std::string base =
      "generate " + kModel + "--threads 1 --prompt 'And God said' --max-tokens 24 --seed 3 ";
  const Outcome one = mixserve(base), two = mixserve(base + "--overlap-steps");
  ASSERT_EQ(one.code, 0) << one.output;
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_EQ(two.output.substr(0, two.output.find("[")), one.output.substr(0, one.output.find("[")));
  EXPECT_NE(finish_line(two.output).find("completion_tokens=24"), std::string::npos) << two.output;
}

// --weights picks how the CPU backend stores the projections (docs/weight-formats.md): a bad
// value is refused, generate runs in each format, and the server says at start-up which format it
// took (here from MIXSERVE_WEIGHTS) and completes with it over REST.
TEST(Flags, WeightFormats) {
  expect_refused("serve " + kModel + "--weights int9", "--weights");
  expect_refused("generate " + kModel + "--prompt hi --weights fp8", "--weights");
  for (const char* weights : {"f32", "f16", "int8", "int4"})
    expect_generate_completes(std::string("--weights ") + weights);
  expect_server_with_env_completes("MIXSERVE_WEIGHTS", "int4", "weights int4");
}

// --kv-cache f16 keeps attention's K/V in float16 on the CPU backend (docs/cpu.md): a bad value is
// refused, generate runs with it, and the server says at start-up which it took (here from
// MIXSERVE_KV_CACHE) and completes with it over REST. (The default model has no attention layer:
// the float16 arithmetic itself is KvCacheF16Cpu's.)
TEST(Flags, KvCacheType) {
  expect_refused("serve " + kModel + "--kv-cache f8", "--kv-cache");
  expect_refused("generate " + kModel + "--prompt hi --kv-cache bf16", "--kv-cache");
  expect_generate_completes("--kv-cache f16");
  expect_server_with_env_completes("MIXSERVE_KV_CACHE", "f16", "kv cache f16");
}

TEST(Flags, GpuMemoryUtilizationArithmetic) {
  constexpr int64_t GiB = int64_t{1} << 30;
  // 80 GiB device, 0.9 of it for the server: 72 GiB; 10 GiB in use once the weights are loaded
  // (70 free): the pool gets 62 GiB.
  EXPECT_EQ(gpu_pool_bytes_for_utilization(0.9, 80 * GiB, 70 * GiB), 62 * GiB);
  // Everything free after loading: utilization x total.
  EXPECT_EQ(gpu_pool_bytes_for_utilization(0.5, 80 * GiB, 80 * GiB), 40 * GiB);
  // Two models still to load share what is left.
  EXPECT_EQ(gpu_pool_bytes_for_utilization(0.9, 80 * GiB, 70 * GiB, 2), 31 * GiB);
  // Nothing left (in use already beyond the budget, or exactly at it): refused, naming the flag.
  for (int64_t free_after : {40 * GiB, 8 * GiB}) {
    try {
      gpu_pool_bytes_for_utilization(0.5, 80 * GiB, free_after);
      ADD_FAILURE() << "no error for free " << free_after;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--gpu-memory-utilization"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace mixserve::testing
