// The flag layer of every mixserve command line (mixserve serve|generate, mixserve-cli,
// mixserve-loadgen): CLI11 (Debian's libcli11-dev, header-only) set up one way for all of them,
// plus the few helpers CLI11 leaves to its users: range checks whose error names the flag and the
// range, booleans that take true/false/1/0/yes/no or nothing, repeatable one-value flags, the
// MIXSERVE_<FLAG> environment variables, --version, and one parse() that turns every mistake
// into one line on stderr and exit code 2. docs/cli.md lists the flags.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace mixserve::cli {

// "mixserve <version>": the version CMake found at configure time (git describe).
std::string version_line();

// Sets `app` up: the last value of a single-value flag wins, --version, the help layout (with
// `usage` as its usage line when given). With `env_prefix` (e.g. "MIXSERVE_"), finish() gives
// every flag an environment variable.
void setup(CLI::App& app, std::string env_prefix = "", std::string usage = "");

// Range checks for add_option(...)->check(...). Each parses the text itself, so a malformed
// number and an out-of-range one both read "--flag: must be an integer >= 1, got "x"".
constexpr long long kIntMax = std::numeric_limits<int32_t>::max();
CLI::Validator integer(long long lo = std::numeric_limits<long long>::min(),
                       long long hi = std::numeric_limits<long long>::max());
// A real number in [lo, hi] (lo excluded when lo_open, hi when hi_open; hi >= 1e12 reads as no
// upper bound in messages); "inf" only when allow_inf.
CLI::Validator number(double lo, double hi, bool lo_open = false, bool allow_inf = false,
                      bool hi_open = false);
CLI::Validator real(bool allow_inf = false);  // any finite number
inline CLI::Validator count() {
  return integer(1, kIntMax);
}  // 1, 2, ...
inline CLI::Validator non_negative() {
  return integer(0, kIntMax);
}  // 0, 1, ...
inline CLI::Validator fraction() {
  return number(0, 1);
}  // [0, 1]
inline CLI::Validator seconds() {
  return number(0, 86400, true);
}  // (0, 86400]
inline CLI::Validator port() {
  return integer(0, 65535);
}

// true/false/1/0/yes/no/on/off (any case); throws std::invalid_argument on anything else.
bool parse_bool(const std::string& text);
// A boolean flag: bare `--name` is true, `--name=V` sets V. With `separate_value`, `--name V` too
// (only where no positional argument could follow: the clients' prompts are positionals).
CLI::Option* add_bool(CLI::App& app, const std::string& names, bool& target,
                      const std::string& help, bool separate_value = true);
// A flag given once per value (`--stop a --stop b`), collecting all of them.
template <typename T>
CLI::Option* add_list(CLI::App& app, const std::string& names, std::vector<T>& target,
                      const std::string& help) {
  return app.add_option(names, target, help)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// Call once every flag is declared: gives each its environment variable (with the setup()
// prefix; the command line wins) unless it has one already.
void finish(CLI::App& app);

// Parses argv[0..argc) (the words after the program or subcommand name). Returns -1 to go on, or
// the exit code to return: 0 after --help or --version (printed on stdout), 2 after a bad flag
// (one line on stderr: "error: ... (see <name> --help)").
int parse(CLI::App& app, int argc, char** argv);

// "1,2,3" -> {"1","2","3"}; empty parts are dropped.
std::vector<std::string> split(const std::string& s, char sep);

}  // namespace mixserve::cli
