#include "clients/common/flags.h"

#include <cmath>
#include <stdexcept>

namespace mixserve::client {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<int32_t> parse_ids(const std::string& s, const std::string& what) {
  std::vector<int32_t> ids;
  for (const auto& part : split(s, ',')) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
    }
    if (used != part.size() || v < INT32_MIN || v > INT32_MAX)
      throw std::invalid_argument(what + " must be comma-separated integers, got \"" + part + "\"");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

Flags::Flags(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

Flags::Flag& Flags::add(const std::string& names, Flag::Kind kind, const std::string& def, const std::string& help) {
  Flag f;
  f.names = split(names, ',');
  f.def = def;
  f.help = help;
  f.kind = kind;
  for (const auto& n : f.names) by_name_[n] = flags_.size();
  flags_.push_back(std::move(f));
  return flags_.back();
}

void Flags::value(const std::string& names, const std::string& def, const std::string& help) {
  add(names, Flag::kValue, def, help);
}
void Flags::toggle(const std::string& names, const std::string& help) { add(names, Flag::kToggle, "", help); }
void Flags::list(const std::string& names, const std::string& help) { add(names, Flag::kList, "", help); }
void Flags::section(const std::string& title) { sections_.emplace_back(flags_.size(), title); }

bool Flags::parse(int argc, char** argv, std::string& error) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a.size() < 3 || a.rfind("--", 0) != 0) {
      positionals_.push_back(a);  // "-" (stdin) lands here too
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      error = "unknown flag --" + name + " (see " + program_ + " --help)";
      return false;
    }
    Flag& f = flags_[it->second];
    if (f.kind == Flag::kToggle) {
      if (!inline_value) value = "true";
      if (value != "true" && value != "false") {
        error = "--" + name + " takes true or false";
        return false;
      }
    } else if (!inline_value) {
      if (i + 1 >= argc) {
        error = "flag --" + name + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    if (f.kind != Flag::kList) f.values.clear();
    f.values.push_back(value);
  }
  return true;
}

std::string Flags::help() const {
  std::string out = "usage: " + program_ + "\n" + summary_ + "\n";
  size_t next_section = 0;
  for (size_t i = 0; i < flags_.size(); ++i) {
    while (next_section < sections_.size() && sections_[next_section].first == i)
      out += "\n" + sections_[next_section++].second + ":\n";
    const Flag& f = flags_[i];
    std::string line = "  --" + f.names[0] + (f.kind == Flag::kToggle ? "" : " V");
    for (size_t k = 1; k < f.names.size(); ++k) line += ", --" + f.names[k];
    if (line.size() < 34) line.append(34 - line.size(), ' ');
    else line += "\n" + std::string(34, ' ');
    out += line + f.help;
    if (f.kind == Flag::kValue && !f.def.empty()) out += " [" + f.def + "]";
    if (f.kind == Flag::kList) out += " (repeatable)";
    out += "\n";
  }
  return out;
}

const Flags::Flag& Flags::get(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw std::logic_error("no flag --" + name);
  return flags_[it->second];
}

bool Flags::given(const std::string& name) const { return !get(name).values.empty(); }

std::string Flags::str(const std::string& name) const {
  const Flag& f = get(name);
  return f.values.empty() ? f.def : f.values.back();
}

double Flags::number(const std::string& name) const {
  const std::string s = str(name);
  if (s == "inf") return INFINITY;
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("--" + name + " must be a number, got \"" + s + "\"");
}

long long Flags::integer(const std::string& name) const {
  const std::string s = str(name);
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("--" + name + " must be an integer, got \"" + s + "\"");
}

bool Flags::on(const std::string& name) const { return str(name) == "true"; }

const std::vector<std::string>& Flags::all(const std::string& name) const { return get(name).values; }

}  // namespace mixserve::client
