// The sampling flags every client-facing command shares (generate, and the CLI clients).
#pragma once

#include "engine/request.h"
#include "server/cli_args.h"

namespace mixserve {

void add_sampling_flags(CliArgs& args);
// Throws std::invalid_argument naming the flag on a malformed value.
GenerateParams sampling_from_flags(const CliArgs& args);

}  // namespace mixserve
