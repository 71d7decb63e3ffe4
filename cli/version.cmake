# Writes OUT (a header defining MIXSERVE_VERSION) from `git describe` of SRC, run at every build
# (cli/CMakeLists.txt) so that a rebuild after a commit reports that commit, not the one the tree
# was configured at. The header is rewritten only when the line changes, so nothing recompiles
# otherwise. FALLBACK: the version when git cannot say (no git, not a checkout).
set(version "${FALLBACK}")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --tags --always --dirty
                  WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE describe
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE result)
  if(result EQUAL 0 AND describe)
    set(version "${describe}")
  endif()
endif()
if(NOT version)
  set(version "unknown")
endif()
set(content "#define MIXSERVE_VERSION \"${version}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
