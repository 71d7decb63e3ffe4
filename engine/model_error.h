// The one error type of model loading: a message that names the file and the offending key or
// tensor, meant to be shown to the user as it is.
#pragma once

#include <stdexcept>
#include <string>

namespace mixserve {

class ModelError : public std::runtime_error {
 public:
  explicit ModelError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace mixserve
