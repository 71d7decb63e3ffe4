// A small command-line parser for the mixserve subcommands: --name value / --name=value flags,
// each declared with its help text, so --help documents every flag.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mixserve {

class CliArgs {
 public:
  CliArgs(std::string command, std::string summary);
  // Declares a flag; `value` is the default (empty for none). repeatable flags collect every use.
  void flag(const std::string& name, const std::string& value, const std::string& help,
            bool repeatable = false);
  void toggle(const std::string& name, const std::string& help);  // --name sets it to "true"
  // Parses argv (after the subcommand). Returns false and fills error on a bad flag.
  bool parse(int argc, char** argv, std::string& error);
  bool help_requested() const { return help_; }
  std::string help() const;

  std::string str(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
  bool on(const std::string& name) const { return str(name) == "true"; }
  bool given(const std::string& name) const { return values_.count(name) > 0; }
  // Numeric accessors: throw std::invalid_argument naming the flag when it is not a number.
  long long integer(const std::string& name) const;
  double number(const std::string& name) const;

 private:
  struct Flag {
    std::string def, help;
    bool repeatable = false, toggle = false;
  };
  std::string command_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Flag> flags_;
  std::map<std::string, std::vector<std::string>> values_;
  bool help_ = false;
};

}  // namespace mixserve
