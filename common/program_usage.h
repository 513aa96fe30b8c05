// What a program's --help shows: its usage line and the flags defined in
// its own files (absl's default matches only a file named after the
// program, so flags defined in a shared file, or in a main.cc, would be
// left out and --help would print "No flags matched").
//
// Thread safety: call once, at the top of main, before parsing flags.
#ifndef EMBEDPS_COMMON_PROGRAM_USAGE_H_
#define EMBEDPS_COMMON_PROGRAM_USAGE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace embedps {

// `flag_files`: paths (as Bazel compiles them, e.g. "worker/job_flags.cc")
// whose flags --help and --helpshort list.
void SetProgramUsage(absl::string_view usage,
                     std::vector<std::string> flag_files);

}  // namespace embedps

#endif  // EMBEDPS_COMMON_PROGRAM_USAGE_H_
