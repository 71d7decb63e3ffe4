// mixserve: serve, generate. One binary, one subcommand each.
#include <cstring>
#include <iostream>

#include "app/commands.h"
#include "cli/flags.h"

namespace {
const char* kUsage =
    "usage: mixserve <command> [flags]\n"
    "commands:\n"
    "  serve      run the gRPC + REST server (mixserve serve --help)\n"
    "  generate   stream a completion from a local model to the terminal (mixserve generate "
    "--help)\n"
    "flags: --version, --help; every flag of a command is also read from MIXSERVE_<FLAG> "
    "(docs/cli.md)\n";
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << mixserve::cli::version_line() << "\n";
    return 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "generate") return mixserve::generate_command(argc - 2, argv + 2);
#ifdef MIXSERVE_HAVE_SERVER
  if (cmd == "serve") return mixserve::serve_command(argc - 2, argv + 2);
#else
  if (cmd == "serve") {
    std::cerr << "error: this build has no server (configured with MIXSERVE_SERVER=OFF)\n";
    return 2;
  }
#endif
  std::cerr << "error: unknown command \"" << cmd << "\"\n" << kUsage;
  return 2;
}
