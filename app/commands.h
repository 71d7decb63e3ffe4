// The subcommands of the mixserve binary. Each parses its flags (argv after the subcommand's
// name) with the shared flag layer, cli/flags.h: exit code 2 on a bad flag, before anything loads.
#pragma once

namespace mixserve {

int generate_command(int argc, char** argv);
int serve_command(int argc, char** argv);  // only in builds with MIXSERVE_SERVER

}  // namespace mixserve
