#include "server/cli_args.h"

#include <stdexcept>

namespace mixserve {

CliArgs::CliArgs(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void CliArgs::flag(const std::string& name, const std::string& value, const std::string& help,
                   bool repeatable) {
  order_.push_back(name);
  flags_[name] = {value, help, repeatable, false};
}

void CliArgs::toggle(const std::string& name, const std::string& help) {
  order_.push_back(name);
  flags_[name] = {"false", help, false, true};
}

bool CliArgs::parse(int argc, char** argv, std::string& error) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      error = "unexpected argument \"" + a + "\" (flags start with --)";
      return false;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) {
      error = "unknown flag --" + name + " (see " + command_ + " --help)";
      return false;
    }
    if (it->second.toggle) {
      value = inline_value ? value : "true";
    } else if (!inline_value) {
      if (i + 1 >= argc) {
        error = "flag --" + name + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    auto& v = values_[name];
    if (!it->second.repeatable) v.clear();
    v.push_back(value);
  }
  return true;
}

std::string CliArgs::help() const {
  std::string out = "usage: " + command_ + " [flags]\n" + summary_ + "\n\nflags:\n";
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    std::string line = "  --" + name + (f.toggle ? "" : " VALUE");
    if (line.size() < 30) line.append(30 - line.size(), ' ');
    else line += "\n" + std::string(30, ' ');
    out += line + f.help;
    if (!f.toggle && !f.def.empty()) out += " (default: " + f.def + ")";
    if (f.repeatable) out += " (repeatable)";
    out += "\n";
  }
  return out;
}

std::string CliArgs::str(const std::string& name) const {
  auto v = values_.find(name);
  if (v != values_.end() && !v->second.empty()) return v->second.back();
  return flags_.at(name).def;
}

std::vector<std::string> CliArgs::all(const std::string& name) const {
  auto v = values_.find(name);
  return v == values_.end() ? std::vector<std::string>{} : v->second;
}

long long CliArgs::integer(const std::string& name) const {
  const std::string s = str(name);
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (...) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw std::invalid_argument("--" + name + " must be an integer, got \"" + s + "\"");
  return v;
}

double CliArgs::number(const std::string& name) const {
  const std::string s = str(name);
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw std::invalid_argument("--" + name + " must be a number, got \"" + s + "\"");
  return v;
}

}  // namespace mixserve
