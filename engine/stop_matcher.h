// Stop strings matched across token boundaries. Text is held back while it could still be the
// start of a stop string, so a client never receives text that a later token turns into a stop
// (the stop string itself is not returned, as in OpenAI's API).
#pragma once

#include <string>
#include <vector>

namespace mixserve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds decoded text; returns what may be sent now. After a match, stopped() is true and the
  // text from the stop string on is dropped.
  std::string feed(const std::string& delta);
  // At the end of generation: whatever was held back.
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace mixserve
