// API keys: `Authorization: Bearer <key>` on REST, the `authorization` metadata on gRPC.
// Keys are compared in constant time (no early exit on the first differing byte).
#pragma once

#include <string>
#include <vector>

namespace mixserve {

class ApiKeys {
 public:
  ApiKeys() = default;
  explicit ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  bool enabled() const { return !keys_.empty(); }
  // True when auth is off or the header ("Bearer KEY") carries one of the keys.
  bool allows(const std::string& authorization_header) const;

 private:
  std::vector<std::string> keys_;
};

bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace mixserve
