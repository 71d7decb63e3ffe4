#include "cli/flags.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>

#include "mixserve_version.h"  // MIXSERVE_VERSION, written at build time by cli/version.cmake

namespace mixserve::cli {

namespace {

// "--name TYPE range (default D) (repeatable) (env NAME)" in --help.
class Formatter : public CLI::Formatter {
 public:
  explicit Formatter(std::string usage) : usage_(std::move(usage)) {}
  std::string make_usage(const CLI::App* app, std::string name) const override {
    return usage_.empty() ? CLI::Formatter::make_usage(app, std::move(name))
                          : "usage: " + usage_ + "\n";
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string out;
    if (!opt->get_option_text().empty()) {
      out = " " + opt->get_option_text();
    } else if (opt->get_type_size() != 0) {
      std::string type =
          opt->get_type_name();  // "INT:>= 1": the type, then each check's description
      std::replace(type.begin(), type.end(), ':', ' ');
      out += " " + type;
      if (!opt->get_default_str().empty()) out += " (default " + opt->get_default_str() + ")";
    }
    if (opt->get_multi_option_policy() == CLI::MultiOptionPolicy::TakeAll) out += " (repeatable)";
    if (!opt->get_envname().empty()) out += " (env " + opt->get_envname() + ")";
    return out;
  }

 private:
  std::string usage_;
};

std::string in_quotes(const std::string& s) {
  return "\"" + s + "\"";
}

bool parse_integer(const std::string& s, long long& v) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data() + (!s.empty() && s[0] == '+'), end, v);
  return ec == std::errc() && p == end && !s.empty();
}

std::string range_text(long long lo, long long hi) {
  const bool no_lo = lo <= std::numeric_limits<int32_t>::min(),
             no_hi = hi >= kIntMax;  // as good as none
  if (no_lo && no_hi) return "";
  if (no_hi) return ">= " + std::to_string(lo);
  if (no_lo) return "<= " + std::to_string(hi);
  return "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

std::string number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  std::ostringstream o;
  o << v;
  return o.str();
}

// The flag names a value must not be (CLI11 takes the word after a one-value flag as its value
// even when it is the next flag).
bool is_flag_word(const CLI::App& app, const std::string& word) {
  if (word.size() < 3 || word.compare(0, 2, "--") != 0) return false;
  const std::string name = word.substr(0, word.find('='));
  return app.get_option_no_throw(name) != nullptr;
}

std::string& env_prefix_of(const CLI::App& app) {
  // One prefix per app, kept beside it (CLI::App has no user data slot).
  static std::map<const CLI::App*, std::string> prefixes;
  return prefixes[&app];
}

}  // namespace

std::string version_line() {
  return std::string("mixserve ") + MIXSERVE_VERSION;
}

void setup(CLI::App& app, std::string env_prefix, std::string usage) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->group("flags");
  app.set_version_flag("--version", version_line(), "print \"" + version_line() + "\" and exit");
  auto fmt = std::make_shared<Formatter>(std::move(usage));
  fmt->column_width(36);
  fmt->label("Usage", "usage");
  fmt->label("OPTIONS", "flags");
  app.formatter(fmt);
  app.get_help_ptr()->description("print this help and exit")->group("flags");
  env_prefix_of(app) = std::move(env_prefix);
}

CLI::Validator integer(long long lo, long long hi) {
  const std::string range = range_text(lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        long long v = 0;
        if (!parse_integer(s, v) || v < lo || v > hi)
          return "must be an integer" + (range.empty() ? "" : " " + range) + ", got " +
                 in_quotes(s);
        return "";
      },
      range);
}

CLI::Validator number(double lo, double hi, bool lo_open, bool allow_inf, bool hi_open) {
  std::string range = hi >= 1e12 ? std::string(lo_open ? "> " : ">= ") + number_text(lo)
                                 : std::string(lo_open ? "in (" : "in [") + number_text(lo) + ", " +
                                       number_text(hi) + (hi_open ? ")" : "]");
  if (allow_inf) range += " or inf";
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        if (allow_inf && s == "inf") return "";
        const char* b = s.c_str();
        char* e = nullptr;
        const double v = s.empty() ? NAN : std::strtod(b, &e);
        const bool ok = !s.empty() && e == b + s.size() && std::isfinite(v) &&
                        (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
        return ok ? "" : "must be a number " + range + ", got " + in_quotes(s);
      },
      range);
}

CLI::Validator real(bool allow_inf) {
  return CLI::Validator(
      [allow_inf](std::string& s) -> std::string {
        if (allow_inf && s == "inf") return "";
        const char* b = s.c_str();
        char* e = nullptr;
        const double v = s.empty() ? NAN : std::strtod(b, &e);
        return !s.empty() && e == b + s.size() && std::isfinite(v)
                   ? ""
                   : "must be a number, got " + in_quotes(s);
      },
      "");
}

bool parse_bool(const std::string& text) {
  std::string s = text;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "true" || s == "1" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return false;
  throw std::invalid_argument("must be true, false, 1, 0, yes or no, got " + in_quotes(text));
}

CLI::Option* add_bool(CLI::App& app, const std::string& names, bool& target,
                      const std::string& help, bool separate_value) {
  const bool def = target;
  CLI::Option* opt = nullptr;
  if (separate_value) {
    // A 0-or-1-value option: bare, it receives "" (true); CLI11 would hand it the default string
    // instead, so the default goes in option_text() for --help, not in default_str().
    opt = app.add_option(
        names,
        [&target](const CLI::results_t& r) {
          target = r.empty() || r.back().empty() || parse_bool(r.back());
          return true;
        },
        help);
    opt->expected(0, 1);
  } else {
    // A flag: CLI11 reads `--name=V` through its own true/false words; the check below narrows
    // them to ours and names the flag.
    opt = app.add_flag(names, target, help);
  }
  opt->check(CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty()) return "";
        try {
          s = parse_bool(s) ? "true" : "false";
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
        return "";
      },
      ""));
  opt->option_text(std::string(separate_value ? "[BOOL] " : "") +
                   (def ? "(default true)" : "(default false)"));
  return opt;
}

void finish(CLI::App& app) {
  const std::string& prefix = env_prefix_of(app);
  if (prefix.empty()) return;
  for (CLI::Option* opt : app.get_options()) {
    if (opt == app.get_help_ptr() || opt == app.get_version_ptr() || !opt->get_envname().empty())
      continue;
    const auto& names = opt->get_lnames();
    if (names.empty()) continue;
    std::string env = prefix + names.front();
    std::transform(env.begin(), env.end(), env.begin(), [](unsigned char c) {
      return c == '-' ? '_' : static_cast<char>(std::toupper(c));
    });
    opt->envname(env);
  }
}

int parse(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  try {
    // A flag that needs a value never takes the next flag as it (CLI11 would: `--api-key --model m`
    // made "--model" the key). `--api-key=--model` still says it is meant.
    for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
      if (args[i].size() < 3 || args[i].compare(0, 2, "--") != 0 ||
          args[i].find('=') != std::string::npos)
        continue;
      const CLI::Option* opt = app.get_option_no_throw(args[i]);
      if (!opt || opt->get_expected_min() < 1) continue;
      if (i + 1 == args.size() || is_flag_word(app, args[i + 1]))
        throw CLI::ArgumentMismatch(
            args[i] + " needs a value" +
            (i + 1 == args.size() ? std::string() : ", got the flag " + args[i + 1]));
    }
    std::vector<std::string> reversed(args.rbegin(),
                                      args.rend());  // CLI11 parses a vector from the back
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::cout << version_line() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    // Name a flag's aliases beside it, and say where a value from the environment came from.
    for (const CLI::Option* opt : app.get_options()) {
      const std::string name = opt->get_name();
      if (name.empty() || msg.compare(0, name.size() + 1, name + ":") != 0) continue;
      const auto& lnames = opt->get_lnames();
      std::string all = name;
      for (size_t k = 1; k < lnames.size(); ++k) all += "/--" + lnames[k];
      msg = all + msg.substr(name.size());
      const bool on_command_line = std::any_of(args.begin(), args.end(), [&](const std::string& a) {
        const std::string n = a.substr(0, a.find('='));
        return n.size() > 2 && n.compare(0, 2, "--") == 0 && opt->check_lname(n.substr(2));
      });
      if (!on_command_line && !opt->get_envname().empty() &&
          std::getenv(opt->get_envname().c_str()))
        msg += " (from $" + opt->get_envname() + ")";
      break;
    }
    if (msg.rfind("The following argument", 0) == 0) {  // "... was not expected: --x"
      const size_t colon = msg.find(": ");
      const std::string word = colon == std::string::npos ? msg : msg.substr(colon + 2);
      msg = (word.rfind("-", 0) == 0 ? "unknown flag " : "unexpected argument ") + word;
    }
    std::cerr << "error: " << msg << " (see " << app.get_name() << " --help)" << std::endl;
    return 2;
  }
  return -1;
}

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

}  // namespace mixserve::cli
