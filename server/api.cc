#include "server/api.h"

#include <algorithm>
#include <random>

#include "server/metrics.h"

namespace mixserve {

ServedModel* ModelHub::find(const std::string& id) const {
  if (id.empty()) return models_.empty() ? nullptr : models_.front().get();
  for (const auto& m : models_)
    if (m->model.id == id) return m.get();
  return nullptr;
}

ApiError ModelHub::not_found(const std::string& id) const {
  std::string known;
  for (const auto& m : models_) known += (known.empty() ? "" : ", ") + m->model.id;
  return {ApiCode::kNotFound, "model \"" + id + "\" does not exist (served: " + known + ")",
          "model"};
}

std::optional<ModelHub::Stall> ModelHub::stalled(double limit_s) const {
  if (limit_s <= 0) return std::nullopt;
  for (const auto& m : models_)
    if (const double busy = m->engine->busy_seconds(); busy > limit_s)
      return Stall{m->model.id, busy};
  return std::nullopt;
}

std::string request_id_for(const std::optional<std::string>& given, bool& valid) {
  valid = !given || (!given->empty() && given->size() <= 128 &&
                     std::all_of(given->begin(), given->end(),
                                 [](unsigned char c) { return c >= 0x21 && c <= 0x7e; }));
  if (given && valid) return *given;
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

std::optional<ApiError> ModelHub::submit(const ApiRequest& req, Submission& sub,
                                         std::function<void()> notify) const {
  if (draining)
    return ApiError{ApiCode::kUnavailable,
                    "the server is shutting down and accepts no new requests", ""};
  ServedModel* served = find(req.model);
  if (!served) return not_found(req.model);
  GenerateParams p;
  if (auto err = validate_request(req, *served, limits, p)) return err;
  auto channel = std::make_shared<TokenChannel>();
  const Clock::time_point submitted = Clock::now();
  Metrics* m = metrics;
  const std::string model_id = served->model.id;
  auto last = std::make_shared<Clock::time_point>(submitted);
  SubmitResult r =
      served->engine->submit(p, [channel, m, model_id, submitted, last, notify](TokenOutput&& out) {
        if (m) {
          const auto now = Clock::now();
          if (out.token >= 0)
            m->observe_token(model_id, now - (*last == submitted ? submitted : *last),
                             *last == submitted);
          *last = now;
          if (out.finish != FinishReason::kNone) m->observe_finish(model_id, out);
        }
        channel->push(std::move(out));
        if (notify) notify();
      });
  switch (r.status) {
    case SubmitStatus::kOk:
      break;
    case SubmitStatus::kInvalid:
      return ApiError{ApiCode::kInvalidArgument, r.message, r.param};
    case SubmitStatus::kQueueFull:
      if (m) m->observe_rejected(model_id, "queue_full");
      return ApiError{ApiCode::kResourceExhausted, r.message, ""};
    case SubmitStatus::kShuttingDown:
      return ApiError{ApiCode::kUnavailable, r.message, ""};
  }
  sub = {served, r.id, channel, std::move(p), submitted};
  return std::nullopt;
}

}  // namespace mixserve
