// Test helper: a real binary run as a child process, never left behind.
//
// The destructor sends SIGTERM to a child that is still running and reaps
// it (SIGKILL after 10 s). A child also gets SIGTERM when the thread that
// spawned it ends (PR_SET_PDEATHSIG), so a crashed or exited parent leaves
// nothing behind: spawn long-lived children from a thread that outlives
// them (e.g. the main thread).
// Thread safety: one thread at a time per ChildProcess.
#ifndef EMBEDPS_TESTING_CHILD_PROCESS_H_
#define EMBEDPS_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace embedps::testing {

class ChildProcess {
 public:
  // Runs `binary` with `args` (argv[1...]). Its stdout goes to
  // `stdout_path` (empty: /dev/null); its stderr to `stderr_path` (empty:
  // the test's).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(
      const std::string& binary, const std::vector<std::string>& args,
      const std::string& stdout_path = "", const std::string& stderr_path = "");

  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  // Sends `signal` without waiting.
  void Signal(int signal);
  // Has it exited? If so, reaps it and returns its exit code (or 128 +
  // signal) in `code`.
  bool Poll(int* code);
  // Waits for the exit; returns the exit code (or 128 + signal).
  int Wait();
  // As Wait, but kills the child after `timeout` and returns
  // DEADLINE_EXCEEDED.
  absl::StatusOr<int> WaitFor(absl::Duration timeout);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
};

// A fresh path under the test's temporary directory: "<tmp>/<stem>_<n>".
std::string TestTempPath(const std::string& stem);

// A binary of this build, for tools that start their siblings: `given` if
// not empty; else `relative` (e.g. "server/ps_server") in this binary's
// Bazel runfiles, beside it under bazel-bin, or below the working
// directory. NOT_FOUND saying what to build.
absl::StatusOr<std::string> LocateBinary(const std::string& given,
                                         const std::string& relative);

}  // namespace embedps::testing

#endif  // EMBEDPS_TESTING_CHILD_PROCESS_H_
