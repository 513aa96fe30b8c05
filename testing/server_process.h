// Test helper: runs a real ps_server binary as a child process.
//
// The server listens on 127.0.0.1 with --port=0; Start waits until it has
// written its port file. Stop (and the destructor) sends SIGTERM and reaps
// it; a server that outlives its test is never left behind.
#ifndef EMBEDPS_TESTING_SERVER_PROCESS_H_
#define EMBEDPS_TESTING_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "testing/child_process.h"

namespace embedps::testing {

class ServerProcess {
 public:
  // Starts `binary` (a path relative to the test's runfiles, e.g.
  // "server/ps_server") with `args` plus --host, --port=0 and --port_file,
  // and for ps_server --checkpoint_root=$TEST_TMPDIR unless `args` name
  // one.
  // Waits up to `start_timeout` for the port file (a replica restoring a
  // large checkpoint takes a while).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& args,
      absl::Duration start_timeout = absl::Seconds(30));

  // "127.0.0.1:PORT".
  const std::string& address() const { return address_; }
  pid_t pid() const { return process_->pid(); }
  // The /metrics port when started with --metrics_port, else -1.
  int metrics_port() const { return metrics_port_; }

  // SIGTERM, then waits; returns the exit code (or 128 + signal).
  int Stop();

  // Sends `signal` without waiting.
  void Signal(int signal);
  // Waits for the process to exit; returns the exit code (or 128 + signal).
  int Wait();
  // True (and *code set) if the process has exited; does not wait.
  bool Poll(int* code) { return process_->Poll(code); }

 private:
  ServerProcess(std::unique_ptr<ChildProcess> process, std::string address,
                int metrics_port)
      : process_(std::move(process)),
        address_(std::move(address)),
        metrics_port_(metrics_port) {}
  std::unique_ptr<ChildProcess> process_;
  std::string address_;
  int metrics_port_;
};

}  // namespace embedps::testing

#endif  // EMBEDPS_TESTING_SERVER_PROCESS_H_
