#include "testing/server_process.h"

#include <signal.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace embedps::testing {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::vector<std::string>& args,
    absl::Duration start_timeout) {
  const std::string port_file = TestTempPath("port");
  std::vector<std::string> argv = {"--host=127.0.0.1", "--port=0",
                                   "--port_file=" + port_file,
                                   "--log_level=warn"};
  if (absl::EndsWith(binary, "ps_server")) {
    // The test's own directory, as a deployment names its checkpoint
    // volume; `args` may name another (the last flag wins).
    const char* tmp = std::getenv("TEST_TMPDIR");
    argv.push_back(
        absl::StrCat("--checkpoint_root=", tmp != nullptr ? tmp : "/tmp"));
  }
  argv.insert(argv.end(), args.begin(), args.end());
  // The server prints its port on stdout for people; we read the file.
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Spawn(binary, argv);
  if (!process.ok()) return process.status();
  const absl::Time give_up = absl::Now() + start_timeout;
  while (absl::Now() < give_up) {
    std::ifstream file(port_file);
    int port = 0;
    int metrics_port = -1;
    if (file >> port >> metrics_port && port > 0) {
      return std::unique_ptr<ServerProcess>(new ServerProcess(
          std::move(*process), absl::StrCat("127.0.0.1:", port), metrics_port));
    }
    int code = 0;
    if ((*process)->Poll(&code)) {
      return absl::InternalError(
          absl::StrCat(binary, " exited early with code ", code));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(binary, " did not start in 30 s"));
}

void ServerProcess::Signal(int signal) { process_->Signal(signal); }

int ServerProcess::Wait() { return process_->Wait(); }

int ServerProcess::Stop() {
  Signal(SIGTERM);
  return Wait();
}

}  // namespace embedps::testing
