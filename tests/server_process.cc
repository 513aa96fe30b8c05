#include "tests/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace embedps::testing {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::vector<std::string>& args) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  static int counter = 0;
  const std::string port_file = absl::StrCat(
      tmp != nullptr ? tmp : "/tmp", "/port_", getpid(), "_", ++counter);
  std::vector<std::string> argv = {binary, "--host=127.0.0.1", "--port=0",
                                   "--port_file=" + port_file,
                                   "--log_level=warn"};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // The server prints its port on stdout for people; we read the file.
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    std::vector<char*> c_argv;
    for (std::string& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    execv(binary.c_str(), c_argv.data());
    _exit(127);
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (absl::Now() < give_up) {
    std::ifstream file(port_file);
    int port = 0;
    int metrics_port = -1;
    if (file >> port >> metrics_port && port > 0) {
      return std::unique_ptr<ServerProcess>(new ServerProcess(
          pid, absl::StrCat("127.0.0.1:", port), metrics_port));
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return absl::InternalError(
          absl::StrCat(binary, " exited early with status ", status));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return absl::DeadlineExceededError(
      absl::StrCat(binary, " did not start in 30 s"));
}

void ServerProcess::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

int ServerProcess::Wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

int ServerProcess::Stop() {
  Signal(SIGTERM);
  return Wait();
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) Stop();
}

}  // namespace embedps::testing
