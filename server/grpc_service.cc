#include "server/grpc_service.h"

#include "engine/tokenizer.h"

namespace mixserve {

grpc::StatusCode grpc_code(ApiCode code) {
  switch (code) {
    case ApiCode::kInvalidArgument:
    case ApiCode::kPayloadTooLarge: return grpc::StatusCode::INVALID_ARGUMENT;
    case ApiCode::kUnauthenticated: return grpc::StatusCode::UNAUTHENTICATED;
    case ApiCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case ApiCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case ApiCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case ApiCode::kDeadlineExceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
    default: return grpc::StatusCode::INTERNAL;
  }
}

grpc::Status TextGenerationService::authorize(grpc::ServerContext* ctx) const {
  if (!keys_.enabled()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  const std::string value = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
  if (!keys_.allows(value))
    return {grpc::StatusCode::UNAUTHENTICATED, "a valid API key is required (metadata authorization: Bearer <key>)"};
  return grpc::Status::OK;
}

namespace {
v1::FinishReason to_proto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kDeadline: return v1::FINISH_REASON_DEADLINE;
    case FinishReason::kError: return v1::FINISH_REASON_ERROR;
    default: return v1::FINISH_REASON_UNSPECIFIED;
  }
}
}  // namespace

grpc::Status TextGenerationService::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                             grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (auto s = authorize(ctx); !s.ok()) return s;
  ApiRequest api;
  api.model = req->model();
  if (req->has_prompt()) api.prompt_text = req->prompt();
  if (req->has_prompt_ids()) api.prompt_ids = std::vector<int32_t>(req->prompt_ids().ids().begin(), req->prompt_ids().ids().end());
  GenerateParams& p = api.params;
  p.max_tokens = req->has_max_tokens() ? static_cast<int32_t>(std::min<uint32_t>(req->max_tokens(), 1u << 30)) : 16;
  p.sampling.temperature = req->has_temperature() ? req->temperature() : 1.0f;
  p.sampling.top_k = req->has_top_k() ? static_cast<int>(std::min<uint32_t>(req->top_k(), 1u << 30)) : 0;
  p.sampling.top_p = req->has_top_p() ? req->top_p() : 1.0f;
  p.sampling.min_p = req->has_min_p() ? req->min_p() : 0.0f;
  p.sampling.repetition_penalty = req->has_repetition_penalty() ? req->repetition_penalty() : 1.0f;
  p.sampling.presence_penalty = req->has_presence_penalty() ? req->presence_penalty() : 0.0f;
  p.sampling.frequency_penalty = req->has_frequency_penalty() ? req->frequency_penalty() : 0.0f;
  if (req->has_seed()) p.seed = req->seed();
  for (const auto& s : req->stop()) p.stop.push_back(s);
  for (int32_t t : req->stop_token_ids()) p.stop_token_ids.push_back(t);
  p.ignore_eos = req->ignore_eos();
  p.sampling.logprobs = static_cast<int>(std::min<uint32_t>(req->logprobs(), 1000));
  p.return_logprob = req->logprobs() > 0;
  p.priority = req->priority();
  p.session = req->session();
  const auto deadline = ctx->deadline();
  if (deadline != std::chrono::system_clock::time_point::max())
    api.timeout_s = std::max(1e-3, std::chrono::duration<double>(deadline - std::chrono::system_clock::now()).count());
  Submission sub;
  if (auto e = hub_.submit(api, sub)) return {grpc_code(e->code), e->message};
  const Tokenizer* tok = sub.served->model.tokenizer.get();
  const std::string rid = std::to_string(sub.id);
  TokenOutput out;
  for (;;) {
    if (!sub.channel->pop(out, std::chrono::milliseconds(5))) {
      if (ctx->IsCancelled()) {  // the client left or its deadline passed
        sub.served->engine->cancel(sub.id);
        return {grpc::StatusCode::CANCELLED, "the client cancelled the request"};
      }
      continue;
    }
    v1::GenerateResponse res;
    res.set_request_id(rid);
    if (out.token >= 0) res.add_token_ids(out.token);
    res.set_text(out.text);
    for (const auto& s : out.logprobs) {
      auto* lp = res.add_logprobs();
      lp->set_token_id(s.token);
      lp->set_logprob(s.logprob);
      for (const auto& [id, v] : s.top) {
        auto* t = lp->add_top();
        t->set_token_id(id);
        t->set_logprob(v);
        if (tok) t->set_text(tok->decode(&id, 1));
      }
    }
    const bool last = out.finish != FinishReason::kNone;
    if (last) {
      res.set_finish_reason(to_proto(out.finish));
      res.mutable_usage()->set_prompt_tokens(out.usage.prompt_tokens);
      res.mutable_usage()->set_completion_tokens(out.usage.completion_tokens);
      res.mutable_usage()->set_cached_tokens(out.usage.cached_tokens);
      res.mutable_timing()->set_queue_seconds(out.timing.queue_s);
      res.mutable_timing()->set_time_to_first_token_seconds(out.timing.ttft_s);
      res.mutable_timing()->set_total_seconds(out.timing.e2e_s);
    }
    if (out.finish == FinishReason::kCancelled) return {grpc::StatusCode::CANCELLED, "the request was cancelled"};
    if (out.finish == FinishReason::kDeadline) {
      writer->Write(res);
      return {grpc::StatusCode::DEADLINE_EXCEEDED, "the deadline passed before the completion finished"};
    }
    if (out.finish == FinishReason::kError) return {grpc::StatusCode::INTERNAL, out.error};
    if (!writer->Write(res)) {  // the stream broke
      sub.served->engine->cancel(sub.id);
      return {grpc::StatusCode::CANCELLED, "the client went away"};
    }
    if (last) return grpc::Status::OK;
  }
}

grpc::Status TextGenerationService::Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                                             v1::TokenizeResponse* res) {
  if (auto s = authorize(ctx); !s.ok()) return s;
  ServedModel* m = hub_.find(req->model());
  if (!m) return {grpc::StatusCode::NOT_FOUND, "model \"" + req->model() + "\" does not exist"};
  if (!m->model.tokenizer) return {grpc::StatusCode::FAILED_PRECONDITION, "model \"" + m->model.id + "\" has no tokenizer"};
  if (!valid_utf8(req->text())) return {grpc::StatusCode::INVALID_ARGUMENT, "text is not valid UTF-8"};
  if (static_cast<int64_t>(req->text().size()) > hub_.limits.max_prompt_chars)
    return {grpc::StatusCode::INVALID_ARGUMENT, "text is longer than the prompt limit"};
  for (int32_t id : m->model.tokenizer->encode(req->text())) {
    res->add_token_ids(id);
    res->add_pieces(m->model.tokenizer->id_to_piece(id));
  }
  return grpc::Status::OK;
}

grpc::Status TextGenerationService::ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest*,
                                               v1::ListModelsResponse* res) {
  if (auto s = authorize(ctx); !s.ok()) return s;
  for (const auto& m : hub_.models()) {
    auto* info = res->add_models();
    info->set_id(m->model.id);
    for (const auto& mixer : m->mixers) info->add_mixers(mixer);
    info->set_context_length(static_cast<uint32_t>(m->model.config.max_seq_len));
    info->set_vocab_size(static_cast<uint32_t>(m->model.config.vocab_size));
    info->set_backend(m->backend);
    info->set_format(m->model.format);
  }
  return grpc::Status::OK;
}

}  // namespace mixserve
