// A small command-line flag parser shared by mixserve-cli and mixserve-loadgen. Flags take
// `--name VALUE` or `--name=VALUE`; a flag may have aliases (e.g. vLLM's name beside ours), so
// `value("rate,request-rate", ...)` declares one flag reachable under both names.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mixserve::client {

class Flags {
 public:
  Flags(std::string program, std::string summary);

  // `names` is a comma-separated list; the first is the flag's name in help and lookups.
  void value(const std::string& names, const std::string& def, const std::string& help);
  void toggle(const std::string& names, const std::string& help);  // on when given
  void list(const std::string& names, const std::string& help);    // repeatable, no default
  void section(const std::string& title);                          // a heading in --help

  // False with `error` set on an unknown flag or a missing value. Non-flag words are positionals.
  bool parse(int argc, char** argv, std::string& error);
  bool help_requested() const { return help_; }
  std::string help() const;

  bool has(const std::string& name) const { return by_name_.count(name) > 0; }  // declared?
  bool given(const std::string& name) const;
  std::string str(const std::string& name) const;
  double number(const std::string& name) const;  // "inf" is allowed; throws naming the flag
  long long integer(const std::string& name) const;
  bool on(const std::string& name) const;
  const std::vector<std::string>& all(const std::string& name) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  struct Flag {
    std::vector<std::string> names;
    std::string def, help;
    enum Kind { kValue, kToggle, kList } kind = kValue;
    std::vector<std::string> values;
  };
  Flag& add(const std::string& names, Flag::Kind kind, const std::string& def, const std::string& help);
  const Flag& get(const std::string& name) const;

  std::string program_, summary_;
  std::vector<Flag> flags_;
  std::vector<std::pair<size_t, std::string>> sections_;  // heading before flag index
  std::map<std::string, size_t> by_name_;
  std::vector<std::string> positionals_;
  bool help_ = false;
};

// "1,2,3" -> {"1","2","3"}; empty parts are dropped.
std::vector<std::string> split(const std::string& s, char sep);
// "1,2,3" -> {1,2,3}; throws std::invalid_argument naming `what` on anything else.
std::vector<int32_t> parse_ids(const std::string& s, const std::string& what);

}  // namespace mixserve::client
