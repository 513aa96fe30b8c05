#include "testing/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace embedps::testing {
namespace {

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

}  // namespace

absl::StatusOr<std::string> LocateBinary(const std::string& given,
                                         const std::string& relative) {
  if (!given.empty()) return given;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::vector<std::string> candidates;
  if (n > 0) {
    self[n] = '\0';
    const std::string path(self);
    candidates.push_back(absl::StrCat(path, ".runfiles/embedps/", relative));
    // bazel-bin/tools/ps_bench: its siblings are under bazel-bin.
    if (const size_t slash = path.rfind('/'); slash != std::string::npos) {
      const std::string dir = path.substr(0, slash);
      if (const size_t up = dir.rfind('/'); up != std::string::npos) {
        candidates.push_back(absl::StrCat(dir.substr(0, up), "/", relative));
      }
    }
  }
  candidates.push_back(relative);
  candidates.push_back("bazel-bin/" + relative);
  for (const std::string& c : candidates) {
    if (access(c.c_str(), X_OK) == 0) return c;
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find ", relative, ": build it (bazel build //",
      relative.substr(0, relative.rfind('/')), ":",
      relative.substr(relative.rfind('/') + 1), ") or pass its path"));
}

std::string TestTempPath(const std::string& stem) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  static int counter = 0;
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", stem, "_", getpid(),
                      "_", ++counter);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::string& binary, const std::vector<std::string>& args,
    const std::string& stdout_path, const std::string& stderr_path) {
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = stdout_path.empty() ? "/dev/null" : stdout_path;
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // Ends with the thread that spawned it, even when the test or
    // benchmark dies without running destructors (a crash, std::exit).
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) {
      _exit(127);
    }
    const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, STDOUT_FILENO);
    if (!stderr_path.empty()) {
      const int err =
          open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) dup2(err, STDERR_FILENO);
    }
    std::vector<char*> c_argv;
    for (std::string& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    execv(binary.c_str(), c_argv.data());
    _exit(127);
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid));
}

void ChildProcess::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

bool ChildProcess::Poll(int* code) {
  if (pid_ <= 0) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  pid_ = -1;
  *code = ExitCode(status);
  return true;
}

int ChildProcess::Wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return ExitCode(status);
}

absl::StatusOr<int> ChildProcess::WaitFor(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  int code = 0;
  while (absl::Now() < give_up) {
    if (Poll(&code)) return code;
    absl::SleepFor(absl::Milliseconds(10));
  }
  Signal(SIGKILL);
  Wait();
  return absl::DeadlineExceededError(absl::StrCat(
      "child process did not exit within ", absl::FormatDuration(timeout)));
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0) return;
  Signal(SIGTERM);
  if (!WaitFor(absl::Seconds(10)).ok()) return;  // killed and reaped
}

}  // namespace embedps::testing
