// One streamed completion against a mixserve server, over gRPC or REST/SSE, seen the same way by
// mixserve-cli and mixserve-loadgen: the request, the events as they arrive (with arrival times),
// and the result with the server's usage.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mixserve::client {

using Clock = std::chrono::steady_clock;

// Where the server is and how to talk to it.
struct Endpoint {
  bool rest = false;  // REST/SSE instead of gRPC
  std::string host = "127.0.0.1";
  int port = 0;
  bool tls = false;
  std::string ca_cert_file;  // PEM roots for --tls; empty: the system's
  std::string api_key;       // sent as "authorization: Bearer <key>"
  double timeout_s = 0;      // per request; 0: none (REST passes it as the "timeout" field)
  // REST only: ask for logprobs (top 0) so each SSE chunk says how many tokens it carries. Without
  // it a chunk with text counts as one token, which undercounts when the server held text back
  // (a split UTF-8 character, a possible stop string); the usage tells when that happened.
  bool rest_token_events = false;
};

// Every sampling parameter of GenerateRequest / POST /v1/completions; unset means server default.
struct Sampling {
  std::optional<uint32_t> max_tokens, top_k;
  std::optional<float> temperature, top_p, min_p, repetition_penalty, presence_penalty,
      frequency_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  uint32_t logprobs = 0;
  int32_t priority = 0;
  std::string session;
};

struct CompletionRequest {
  std::string model;   // empty: the server's first model
  std::string prompt;  // used when prompt_ids is empty
  std::vector<int32_t> prompt_ids;
  Sampling sampling;
};

// One stream message: a gRPC response or an SSE chunk.
struct StreamEvent {
  Clock::time_point at;
  int tokens = 0;  // generated tokens this event carries
  std::string text;
  std::vector<std::pair<int32_t, float>> logprobs;  // (token id or -1 over REST, logprob)
};

struct CompletionResult {
  bool ok = false;
  std::string error;  // kind: "grpc:UNAVAILABLE", "http:429", "transport", ...
  std::string error_message;
  std::string finish_reason;  // "stop", "length", "cancelled", "deadline", "error"
  bool has_usage = false;     // the server's own counts, from its last message
  uint32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string text;
  Clock::time_point start, end;
  std::vector<std::pair<Clock::time_point, int>> token_events;  // arrival time, tokens carried
  int streamed_tokens = 0;                                      // sum of the events' token counts
  bool exact_token_events = true;  // false when a REST chunk's token count was a guess
  // Server-side timing (gRPC only; negative when absent).
  double server_queue_s = -1, server_ttft_s = -1, server_total_s = -1;

  double ttft_s() const;  // first token event - start; negative when no token arrived
  double e2e_s() const { return std::chrono::duration<double>(end - start).count(); }
};

struct ModelInfo {
  std::string id;
  std::vector<std::string> mixers;  // one per layer
  uint32_t context_length = 0;
  uint32_t vocab_size = 0;  // 0 when the server does not say
  std::string backend, format;
};

class CompletionClient {
 public:
  virtual ~CompletionClient() = default;
  // Streams one completion; `on_event` (may be empty) runs on the calling thread per message.
  // Never throws: failures come back in the result. Safe to call from many threads at once.
  virtual CompletionResult complete(const CompletionRequest& req,
                                    const std::function<void(const StreamEvent&)>& on_event) = 0;
  virtual std::vector<ModelInfo> models() = 0;  // throws std::runtime_error
  // Token ids of `text` (gRPC Tokenize); std::nullopt where the transport has no tokenizer (REST).
  virtual std::optional<std::vector<int32_t>> tokenize(const std::string& model,
                                                       const std::string& text) = 0;
};

std::unique_ptr<CompletionClient> make_grpc_client(const Endpoint& ep);
std::unique_ptr<CompletionClient> make_rest_client(const Endpoint& ep);
inline std::unique_ptr<CompletionClient> make_client(const Endpoint& ep) {
  return ep.rest ? make_rest_client(ep) : make_grpc_client(ep);
}

// Fills `r` from its events: text, token events, streamed token count.
void record_event(CompletionResult& r, const StreamEvent& e);

}  // namespace mixserve::client
