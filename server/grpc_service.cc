#include "server/grpc_service.h"

#include <memory>
#include <mutex>
#include <type_traits>

#include "engine/tokenize.h"
#include "server/grpc_request.h"
#include "server/request_log.h"

namespace mixserve {

grpc::StatusCode grpc_code(ApiCode code) {
  switch (code) {
    case ApiCode::kInvalidArgument:
    case ApiCode::kPayloadTooLarge:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case ApiCode::kUnauthenticated:
      return grpc::StatusCode::UNAUTHENTICATED;
    case ApiCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case ApiCode::kResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case ApiCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case ApiCode::kDeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

grpc::Status TextGenerationService::authorize(grpc::CallbackServerContext* ctx) const {
  if (!keys_.enabled()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  const std::string value = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
  // Exactly one key: with several, which one counts would depend on their order.
  if (md.count("authorization") != 1 || !keys_.allows(value))
    return {grpc::StatusCode::UNAUTHENTICATED,
            "a valid API key is required (metadata authorization: Bearer <key>)"};
  return grpc::Status::OK;
}

namespace {

// The HTTP status a gRPC status corresponds to, for log lines (one scale for both APIs; 499 is
// nginx's "client closed request").
int http_equivalent(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

// One Generate call. The engine thread calls pump() after each event it pushes; gRPC calls
// OnWriteDone/OnCancel/OnDone on its own threads. At most one write is in flight; the mutex
// orders pump against those reactions, and gRPC operations are started outside it. The stream
// owns itself (self_) until OnDone, and the engine's callback holds only a weak reference, so
// a late event after the call ended touches nothing.
class GenerateStream : public grpc::ServerWriteReactor<v1::GenerateResponse>,
                       public std::enable_shared_from_this<GenerateStream> {
 public:
  // Starts a Generate (GenerateRequest) or Chat (ChatRequest) call.
  template <typename Request>
  static void start(grpc::CallbackServerContext* ctx, const Request& req, const ModelHub& hub,
                    grpc::Status auth, grpc::ServerWriteReactor<v1::GenerateResponse>** reactor) {
    auto s = std::make_shared<GenerateStream>();
    s->self_ = s;
    *reactor = s.get();
    s->route_ = std::is_same_v<Request, v1::ChatRequest> ? "Chat" : "Generate";
    // The request id: the client's x-request-id metadata or a new one, sent back as initial
    // metadata (before any message or the status) and in every GenerateResponse.
    const auto& md = ctx->client_metadata();
    const auto given = md.find("x-request-id");
    bool id_ok = true;
    s->request_id_ = request_id_for(
        given == md.end()
            ? std::nullopt
            : std::optional<std::string>(std::string(given->second.data(), given->second.size())),
        id_ok);
    ctx->AddInitialMetadata("x-request-id", s->request_id_);
    if (!id_ok)
      return s->end({grpc::StatusCode::INVALID_ARGUMENT,
                     "x-request-id must be 1 to 128 visible ASCII characters"});
    if (!auth.ok()) return s->end(auth);
    std::optional<double> timeout;
    const auto deadline = ctx->deadline();
    if (deadline != std::chrono::system_clock::time_point::max())
      timeout = std::max(
          1e-3, std::chrono::duration<double>(deadline - std::chrono::system_clock::now()).count());
    ApiRequest api;
    if (auto e = to_api_request(req, timeout, api)) return s->end({grpc_code(e->code), e->message});
    if (logging_prompts())
      s->prompt_ = api.chat ? api.chat->messages.dump() : api.prompt_text.value_or("");
    std::weak_ptr<GenerateStream> weak = s;
    Submission sub;
    if (auto e = hub.submit(api, sub, [weak] {
          if (auto live = weak.lock()) live->pump();
        }))
      return s->end({grpc_code(e->code), e->message});
    {
      std::lock_guard<std::mutex> lock(s->mu_);
      s->sub_ = std::move(sub);
      s->model_ = s->sub_.served->model.id;
      s->submitted_ = true;
    }
    s->pump();  // events the engine pushed before sub_ was set
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) broken_ = true;  // the stream broke: the client is gone
    }
    if (!ok) cancel_request();
    pump();
  }
  void OnCancel() override { cancel_request(); }  // the client left or its deadline passed
  void OnDone() override {
    std::shared_ptr<GenerateStream> last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = std::move(self_);
    }
    // `last` is the final owner unless the engine thread is in pump(), which then finds
    // finished_ set and releases the stream when it returns.
  }

 private:
  // Starts the next write, or the finish, if the stream is idle and an event is waiting.
  void pump() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!submitted_ || writing_ || finished_) return;
    TokenOutput out;
    if (broken_) {  // nothing more can be written: wait for the engine's final event, then finish
      while (sub_.channel->try_pop(out))
        if (out.finish != FinishReason::kNone) {
          finished_ = true;
          lock.unlock();
          return end({grpc::StatusCode::CANCELLED, "the client went away"}, &out);
        }
      return;
    }
    if (!sub_.channel->try_pop(out)) return;
    const FinishReason finish = out.finish;
    if (finish == FinishReason::kCancelled || finish == FinishReason::kError) {
      finished_ = true;
      lock.unlock();
      return end(finish == FinishReason::kCancelled
                     ? grpc::Status(grpc::StatusCode::CANCELLED, "the request was cancelled")
                     : grpc::Status(grpc::StatusCode::INTERNAL, out.error),
                 &out);
    }
    to_response(out, request_id_, res_);
    if (logging_prompts()) completion_ += out.text;
    writing_ = true;
    finished_ = finish != FinishReason::kNone;
    lock.unlock();
    if (finish == FinishReason::kNone) return StartWrite(&res_);
    const grpc::Status status =
        finish == FinishReason::kDeadline
            ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                           "the deadline passed before the completion finished")
            : grpc::Status::OK;
    log(status, &out);
    StartWriteAndFinish(&res_, grpc::WriteOptions(), status);
  }
  // Finishes the call with `status` and logs it; `last` is the engine's final event, if any.
  void end(const grpc::Status& status, const TokenOutput* last = nullptr) {
    log(status, last);
    Finish(status);
  }
  void log(const grpc::Status& status, const TokenOutput* last) {
    RequestLogLine line;
    line.request_id = request_id_, line.api = "grpc", line.route = route_, line.model = model_;
    line.status = http_equivalent(status.error_code());
    line.error = status.error_message();
    if (last) {
      line.finish_reason = finish_reason_name(last->finish);
      line.prompt_tokens = last->usage.prompt_tokens;
      line.completion_tokens = last->usage.completion_tokens;
      line.cached_tokens = last->usage.cached_tokens;
      if (last->usage.completion_tokens > 0) line.ttft_s = last->timing.ttft_s;
      line.e2e_s = last->timing.e2e_s;
    }
    line.prompt = prompt_, line.completion = completion_;
    log_request(line);
  }
  void cancel_request() {
    std::lock_guard<std::mutex> lock(mu_);
    if (submitted_ && !finished_) sub_.served->engine->cancel(sub_.id);
  }

  std::mutex mu_;
  std::shared_ptr<GenerateStream> self_;
  Submission sub_;
  std::string request_id_, route_, model_;
  std::string prompt_, completion_;  // only with --log-prompts
  v1::GenerateResponse res_;         // the message being written; untouched while writing_
  bool submitted_ = false, writing_ = false, finished_ = false, broken_ = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* TextGenerationService::Generate(
    grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req) {
  grpc::ServerWriteReactor<v1::GenerateResponse>* reactor = nullptr;
  GenerateStream::start(ctx, *req, hub_, authorize(ctx), &reactor);
  return reactor;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* TextGenerationService::Chat(
    grpc::CallbackServerContext* ctx, const v1::ChatRequest* req) {
  grpc::ServerWriteReactor<v1::GenerateResponse>* reactor = nullptr;
  GenerateStream::start(ctx, *req, hub_, authorize(ctx), &reactor);
  return reactor;
}

grpc::Status TextGenerationService::tokenize(const v1::TokenizeRequest& req,
                                             v1::TokenizeResponse& res) const {
  ServedModel* m = hub_.find(req.model());
  if (!m) return {grpc::StatusCode::NOT_FOUND, "model \"" + req.model() + "\" does not exist"};
  if (!m->model.tokenizer)
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "model \"" + m->model.id + "\" has no tokenizer"};
  if (!valid_utf8(req.text()))
    return {grpc::StatusCode::INVALID_ARGUMENT, "text is not valid UTF-8"};
  if (static_cast<int64_t>(req.text().size()) > hub_.limits.max_prompt_chars)
    return {grpc::StatusCode::INVALID_ARGUMENT, "text is longer than the prompt limit"};
  const std::vector<int32_t> ids = encode(m->model, req.text(), /*add_special_tokens=*/true);
  for (int32_t id : ids) res.add_token_ids(id);
  for (std::string& piece : token_pieces(m->model, ids)) res.add_pieces(std::move(piece));
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* TextGenerationService::Tokenize(grpc::CallbackServerContext* ctx,
                                                          const v1::TokenizeRequest* req,
                                                          v1::TokenizeResponse* res) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  grpc::Status s = authorize(ctx);
  reactor->Finish(s.ok() ? tokenize(*req, *res) : s);
  return reactor;
}

grpc::ServerUnaryReactor* TextGenerationService::ListModels(grpc::CallbackServerContext* ctx,
                                                            const v1::ListModelsRequest*,
                                                            v1::ListModelsResponse* res) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (grpc::Status s = authorize(ctx); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  for (const auto& m : hub_.models()) {
    auto* info = res->add_models();
    info->set_id(m->model.id);
    for (const auto& mixer : m->mixers) info->add_mixers(mixer);
    info->set_context_length(static_cast<uint32_t>(m->model.config.max_seq_len));
    info->set_vocab_size(static_cast<uint32_t>(m->model.config.vocab_size));
    info->set_backend(m->backend);
    info->set_format(m->model.format);
    info->set_tokenizer(m->model.tokenizer_kind());
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace mixserve
