// The benchmarks' flags: `--name value` / `--name=value`, each declared with its help text. Kept
// here, header-only and apart from the mixserve binary's CLI11 flag layer (cli/flags.h), because
// the GPU host builds bench/ (and kernels/' mixserve-cuda-bench) with MIXSERVE_SERVER=OFF and has
// no CLI11; these are developer tools with a handful of flags, not a user-facing command line.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixserve {

class BenchArgs {
 public:
  BenchArgs(std::string command, std::string summary)
      : command_(std::move(command)), summary_(std::move(summary)) {}
  // `value` is the default (empty for none); a repeatable flag collects every use.
  void flag(const std::string& name, const std::string& value, const std::string& help,
            bool repeatable = false) {
    order_.push_back(name);
    flags_[name] = {value, help, repeatable, false};
  }
  void toggle(const std::string& name, const std::string& help) {  // --name, or --name=true|false
    order_.push_back(name);
    flags_[name] = {"false", help, false, true};
  }
  // Parses argv after the program name; false with `error` set on a bad flag. A flag that takes a
  // value never takes the next --flag as it.
  bool parse(int argc, char** argv, std::string& error) {
    for (int i = 0; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "-h" || arg == "--help") {
        help_ = true;
        continue;
      }
      if (arg.rfind("--", 0) != 0)
        return fail(error, "unexpected argument \"" + arg + "\" (flags start with --)");
      std::string name = arg.substr(2), value;
      const size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
      }
      auto it = flags_.find(name);
      if (it == flags_.end())
        return fail(error, "unknown flag --" + name + " (see " + command_ + " --help)");
      if (it->second.toggle) {
        if (eq == std::string::npos) value = "true";
        if (value != "true" && value != "false")
          return fail(error, "--" + name + " takes true or false");
      } else if (eq == std::string::npos) {
        if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)
          return fail(error, "flag --" + name + " needs a value");
        value = argv[++i];
      }
      auto& v = values_[name];
      if (!it->second.repeatable) v.clear();
      v.push_back(value);
    }
    return true;
  }
  bool help_requested() const { return help_; }
  std::string help() const {
    std::string out = "usage: " + command_ + " [flags]\n" + summary_ + "\n\nflags:\n";
    for (const std::string& name : order_) {
      const Flag& f = flags_.at(name);
      std::string line = "  --" + name + (f.toggle ? "" : " VALUE");
      line += line.size() < 30 ? std::string(30 - line.size(), ' ') : "\n" + std::string(30, ' ');
      out += line + f.help;
      if (!f.toggle && !f.def.empty()) out += " (default: " + f.def + ")";
      if (f.repeatable) out += " (repeatable)";
      out += "\n";
    }
    return out;
  }

  std::string str(const std::string& name) const {
    auto v = values_.find(name);
    return v != values_.end() && !v->second.empty() ? v->second.back() : flags_.at(name).def;
  }
  std::vector<std::string> all(const std::string& name) const {
    auto v = values_.find(name);
    return v == values_.end() ? std::vector<std::string>{} : v->second;
  }
  bool on(const std::string& name) const { return str(name) == "true"; }
  bool given(const std::string& name) const { return values_.count(name) > 0; }
  // Throw std::invalid_argument naming the flag when the value is not a number.
  long long integer(const std::string& name) const {
    const std::string s = str(name);
    char* end = nullptr;
    const long long v = s.empty() ? 0 : std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || end != s.c_str() + s.size())
      throw std::invalid_argument("--" + name + " must be an integer, got \"" + s + "\"");
    return v;
  }
  // A comma-separated list of integers ("1,8,64"); throws like integer().
  std::vector<int> integers(const std::string& name) const {
    std::vector<int> out;
    const std::string s = str(name);
    for (size_t at = 0; at <= s.size();) {
      const size_t comma = std::min(s.find(',', at), s.size());
      const std::string item = s.substr(at, comma - at);
      char* end = nullptr;
      const long v = item.empty() ? 0 : std::strtol(item.c_str(), &end, 10);
      if (item.empty() || end != item.c_str() + item.size())
        throw std::invalid_argument("--" + name + " must be integers separated by commas, got \"" +
                                    s + "\"");
      out.push_back(static_cast<int>(v));
      at = comma + 1;
    }
    return out;
  }
  // A comma-separated list of words ("f16,int8"); empty items are left out.
  std::vector<std::string> strings(const std::string& name) const {
    std::vector<std::string> out;
    const std::string s = str(name);
    for (size_t at = 0; at <= s.size();) {
      const size_t comma = std::min(s.find(',', at), s.size());
      if (comma > at) out.push_back(s.substr(at, comma - at));
      at = comma + 1;
    }
    return out;
  }
  double number(const std::string& name) const {
    const std::string s = str(name);
    char* end = nullptr;
    const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size())
      throw std::invalid_argument("--" + name + " must be a number, got \"" + s + "\"");
    return v;
  }

 private:
  static bool fail(std::string& error, std::string message) {
    error = std::move(message);
    return false;
  }
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
