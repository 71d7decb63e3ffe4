// The subcommands of the mixserve binary.
#pragma once

namespace mixserve {

int generate_command(int argc, char** argv);
int serve_command(int argc, char** argv);  // only in builds with MIXSERVE_SERVER

}  // namespace mixserve
