#include "server/auth.h"

namespace mixserve {

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Every byte of the longer string is visited whatever the contents; lengths are mixed in.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

bool ApiKeys::allows(const std::string& header) const {
  if (keys_.empty()) return true;
  const std::string prefix = "Bearer ";
  if (header.size() <= prefix.size() || header.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string key = header.substr(prefix.size());
  bool ok = false;
  for (const std::string& k : keys_) ok |= constant_time_equal(key, k);  // no early exit either
  return ok;
}

}  // namespace mixserve
