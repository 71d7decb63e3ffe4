// Typed reads of a foreign config.json (torchscale's RetNetConfig arguments, fla's Hugging Face
// configs) with the framework's default for an absent or null key, and refusals that name the key.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/model_error.h"

namespace mixserve {

struct ImportArgs {
  const nlohmann::json& c;
  const std::string& src;

  bool present(const char* key) const { return c.contains(key) && !c[key].is_null(); }
  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw ModelError(src + ": \"" + key + "\" " + what);
  }
  int64_t integer(const char* key, int64_t fallback) const {
    if (!present(key)) return fallback;
    if (!c[key].is_number_integer()) fail(key, "must be an integer");
    return c[key].get<int64_t>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!present(key)) return fallback;
    if (!c[key].is_boolean()) fail(key, "must be true or false");
    return c[key].get<bool>();
  }
  double number(const char* key, double fallback) const {
    if (!present(key)) return fallback;
    if (!c[key].is_number()) fail(key, "must be a number");
    return c[key].get<double>();
  }
  // A positive float32 (an epsilon): positive as a double is not enough — 1e-66 rounds to 0.
  float positive_float(const char* key, double fallback) const {
    const double v = number(key, fallback);
    const float f = static_cast<float>(v);
    if (!(f > 0) || !std::isfinite(f))
      fail(key, "must be positive and within float32's range (1.2e-38 to 3.4e38), got " +
                    (present(key) ? c[key].dump() : std::to_string(v)));
    return f;
  }
  std::string string(const char* key, const char* fallback) const {
    if (!present(key)) return fallback;
    if (!c[key].is_string()) fail(key, "must be a string");
    return c[key].get<std::string>();
  }
  // A size: positive and below 2^31, so that products of a few sizes stay far from overflow.
  int64_t positive(const char* key, int64_t fallback) const {
    const int64_t v = integer(key, fallback);
    if (v <= 0 || v > INT32_MAX) fail(key, "must be a positive integer below 2^31");
    return v;
  }
  void refuse_if(bool cond, const char* key, const std::string& why) const {
    if (cond) fail(key, why + " is not supported");
  }
};

}  // namespace mixserve
