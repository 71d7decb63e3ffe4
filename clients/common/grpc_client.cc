// CompletionClient over gRPC: one channel (one HTTP/2 connection) shared by every request, as a
// real client would hold it; each completion is a server-streaming Generate call.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "clients/common/completion.h"
#include "mixserve/v1/generation.grpc.pb.h"

namespace mixserve::client {

namespace v1 = mixserve::v1;

double CompletionResult::ttft_s() const {
  if (token_events.empty()) return -1;
  return std::chrono::duration<double>(token_events.front().first - start).count();
}

void record_event(CompletionResult& r, const StreamEvent& e) {
  r.text += e.text;
  if (e.tokens > 0) {
    r.token_events.emplace_back(e.at, e.tokens);
    r.streamed_tokens += e.tokens;
  }
}

namespace {

const char* finish_name(v1::FinishReason f) {
  switch (f) {
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_DEADLINE:
      return "deadline";
    case v1::FINISH_REASON_ERROR:
      return "error";
    default:
      return "";
  }
}

std::string status_name(grpc::StatusCode c) {
  static const char* names[] = {"OK",
                                "CANCELLED",
                                "UNKNOWN",
                                "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED",
                                "NOT_FOUND",
                                "ALREADY_EXISTS",
                                "PERMISSION_DENIED",
                                "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION",
                                "ABORTED",
                                "OUT_OF_RANGE",
                                "UNIMPLEMENTED",
                                "INTERNAL",
                                "UNAVAILABLE",
                                "DATA_LOSS",
                                "UNAUTHENTICATED"};
  const int i = static_cast<int>(c);
  return i >= 0 && i <= 16 ? names[i] : std::to_string(i);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void fill(v1::GenerateRequest& g, const CompletionRequest& req) {
  g.set_model(req.model);
  if (!req.prompt_ids.empty()) {
    for (int32_t id : req.prompt_ids) g.mutable_prompt_ids()->add_ids(id);
  } else {
    g.set_prompt(req.prompt);
  }
  const Sampling& s = req.sampling;
  if (s.max_tokens) g.set_max_tokens(*s.max_tokens);
  if (s.temperature) g.set_temperature(*s.temperature);
  if (s.top_k) g.set_top_k(*s.top_k);
  if (s.top_p) g.set_top_p(*s.top_p);
  if (s.min_p) g.set_min_p(*s.min_p);
  if (s.repetition_penalty) g.set_repetition_penalty(*s.repetition_penalty);
  if (s.presence_penalty) g.set_presence_penalty(*s.presence_penalty);
  if (s.frequency_penalty) g.set_frequency_penalty(*s.frequency_penalty);
  if (s.seed) g.set_seed(*s.seed);
  for (const auto& stop : s.stop) g.add_stop(stop);
  for (int32_t id : s.stop_token_ids) g.add_stop_token_ids(id);
  g.set_ignore_eos(s.ignore_eos);
  g.set_logprobs(s.logprobs);
  g.set_priority(s.priority);
  g.set_session(s.session);
}

class GrpcClient : public CompletionClient {
 public:
  explicit GrpcClient(const Endpoint& ep) : ep_(ep) {
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
    if (ep.tls) {
      grpc::SslCredentialsOptions ssl;
      if (!ep.ca_cert_file.empty()) ssl.pem_root_certs = read_file(ep.ca_cert_file);
      creds = grpc::SslCredentials(ssl);
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    channel_ = grpc::CreateCustomChannel(ep.host + ":" + std::to_string(ep.port), creds, args);
    stub_ = v1::TextGeneration::NewStub(channel_);
  }

  CompletionResult complete(const CompletionRequest& req,
                            const std::function<void(const StreamEvent&)>& on_event) override {
    CompletionResult r;
    v1::GenerateRequest g;
    fill(g, req);
    grpc::ClientContext ctx;
    prepare(ctx);
    // The channel connects lazily; connect before the clock starts so that TTFT is the server's
    // answer time, not TCP + HTTP/2 (+ TLS) setup, as for any long-lived client.
    const double connect_s = ep_.timeout_s > 0 ? std::min(ep_.timeout_s, 5.0) : 5.0;
    if (!channel_->WaitForConnected(
            std::chrono::system_clock::now() +
            std::chrono::milliseconds(static_cast<int64_t>(connect_s * 1000)))) {
      r.start = r.end = Clock::now();
      r.error = "grpc:UNAVAILABLE";
      r.error_message = "cannot connect to " + ep_.host + ":" + std::to_string(ep_.port) +
                        " (is the server up, and are --tls/--ca-cert right?)";
      return r;
    }
    r.start = Clock::now();
    auto reader = stub_->Generate(&ctx, g);
    v1::GenerateResponse res;
    while (reader->Read(&res)) {
      StreamEvent e;
      e.at = Clock::now();
      e.tokens = res.token_ids_size();
      e.text = res.text();
      for (const auto& lp : res.logprobs()) e.logprobs.emplace_back(lp.token_id(), lp.logprob());
      record_event(r, e);
      if (on_event) on_event(e);
      if (res.finish_reason() != v1::FINISH_REASON_UNSPECIFIED)
        r.finish_reason = finish_name(res.finish_reason());
      if (res.has_usage()) {
        r.has_usage = true;
        r.prompt_tokens = res.usage().prompt_tokens();
        r.completion_tokens = res.usage().completion_tokens();
        r.cached_tokens = res.usage().cached_tokens();
      }
      if (res.has_timing()) {
        r.server_queue_s = res.timing().queue_seconds();
        r.server_ttft_s = res.timing().time_to_first_token_seconds();
        r.server_total_s = res.timing().total_seconds();
      }
    }
    const grpc::Status status = reader->Finish();
    r.end = Clock::now();
    if (!status.ok()) {
      r.error = "grpc:" + status_name(status.error_code());
      r.error_message = status.error_message();
      return r;
    }
    r.ok = true;
    return r;
  }

  std::vector<ModelInfo> models() override {
    grpc::ClientContext ctx;
    prepare(ctx, 10);
    v1::ListModelsResponse res;
    const grpc::Status s = stub_->ListModels(&ctx, v1::ListModelsRequest(), &res);
    if (!s.ok())
      throw std::runtime_error("ListModels: " + status_name(s.error_code()) + ": " +
                               s.error_message());
    std::vector<ModelInfo> out;
    for (const auto& m : res.models()) {
      ModelInfo info{m.id(),
                     {m.mixers().begin(), m.mixers().end()},
                     m.context_length(),
                     m.vocab_size(),
                     m.backend(),
                     m.format()};
      out.push_back(std::move(info));
    }
    return out;
  }

  std::optional<std::vector<int32_t>> tokenize(const std::string& model,
                                               const std::string& text) override {
    grpc::ClientContext ctx;
    prepare(ctx, 10);
    v1::TokenizeRequest req;
    req.set_model(model);
    req.set_text(text);
    v1::TokenizeResponse res;
    const grpc::Status s = stub_->Tokenize(&ctx, req, &res);
    if (!s.ok())
      throw std::runtime_error("Tokenize: " + status_name(s.error_code()) + ": " +
                               s.error_message());
    return std::vector<int32_t>(res.token_ids().begin(), res.token_ids().end());
  }

 private:
  void prepare(grpc::ClientContext& ctx, double default_timeout_s = 0) const {
    if (!ep_.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + ep_.api_key);
    const double t = ep_.timeout_s > 0 ? ep_.timeout_s : default_timeout_s;
    if (t > 0)
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::microseconds(static_cast<int64_t>(t * 1e6)));
  }

  Endpoint ep_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TextGeneration::Stub> stub_;
};

}  // namespace

std::unique_ptr<CompletionClient> make_grpc_client(const Endpoint& ep) {
  return std::make_unique<GrpcClient>(ep);
}

}  // namespace mixserve::client
