#include "testing/etcd_cluster.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "httplib.h"

namespace embedps::testing {
namespace {

// A port nothing listens on now (the kernel's choice for port 0).
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t size = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    close(fd);
    return absl::InternalError("bind to a free port failed");
  }
  close(fd);
  return static_cast<int>(ntohs(address.sin_port));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(
    int members, const std::string& tls_dir) {
  auto cluster = std::unique_ptr<EtcdCluster>(new EtcdCluster());
  cluster->tls_dir_ = tls_dir;
  for (const char* candidate : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (access(candidate, X_OK) == 0) {
      cluster->binary_ = candidate;
      break;
    }
  }
  if (cluster->binary_.empty()) {
    return absl::NotFoundError(
        "no etcd binary: install Debian's etcd-server (deploy/setup.sh)");
  }
  const std::string root = TestTempPath("etcd");
  std::vector<std::string> peers;
  for (int i = 0; i < members; ++i) {
    absl::StatusOr<int> client = FreePort();
    absl::StatusOr<int> peer = FreePort();
    if (!client.ok()) return client.status();
    if (!peer.ok()) return peer.status();
    Member member;
    member.name = absl::StrCat("member", i);
    member.client = absl::StrCat("127.0.0.1:", *client);
    member.peer = absl::StrCat("127.0.0.1:", *peer);
    member.data_dir = absl::StrCat(root, "/", member.name);
    member.log = absl::StrCat(root, "/", member.name, ".log");
    peers.push_back(absl::StrCat(member.name, "=http://", member.peer));
    cluster->members_.push_back(std::move(member));
  }
  std::filesystem::create_directories(root);
  cluster->initial_cluster_ = absl::StrJoin(peers, ",");
  for (int i = 0; i < members; ++i) {
    if (absl::Status s = cluster->Spawn(i, /*existing=*/false); !s.ok()) {
      return s;
    }
  }
  for (int i = 0; i < members; ++i) {
    if (absl::Status s = cluster->WaitHealthy(i, absl::Seconds(30)); !s.ok()) {
      return s;
    }
  }
  return cluster;
}

EtcdCluster::~EtcdCluster() {
  for (Member& member : members_) member.process.reset();
}

absl::Status EtcdCluster::Spawn(int i, bool existing) {
  Member& member = members_[i];
  const std::string scheme = tls_dir_.empty() ? "http://" : "https://";
  std::vector<std::string> args = {
      "--name=" + member.name,
      "--data-dir=" + member.data_dir,
      "--listen-client-urls=" + scheme + member.client,
      "--advertise-client-urls=" + scheme + member.client,
      "--listen-peer-urls=http://" + member.peer,
      "--initial-advertise-peer-urls=http://" + member.peer,
      "--initial-cluster=" + initial_cluster_,
      std::string("--initial-cluster-state=") + (existing ? "existing" : "new"),
      "--initial-cluster-token=embedps-test",
      // No metrics or pprof listeners beyond the two ports; small WAL.
      "--snapshot-count=10000",
      "--logger=zap",
      "--log-outputs=stderr",
  };
  if (!tls_dir_.empty()) {
    args.push_back("--cert-file=" + tls_dir_ + "/node.pem");
    args.push_back("--key-file=" + tls_dir_ + "/node.key");
    args.push_back("--trusted-ca-file=" + tls_dir_ + "/ca.pem");
    args.push_back("--client-cert-auth");
  }
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Spawn(binary_, args, member.log, member.log + ".err");
  if (!process.ok()) return process.status();
  member.process = *std::move(process);
  return absl::OkStatus();
}

absl::Status EtcdCluster::WaitHealthy(int i, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::unique_ptr<httplib::Client> client;
  if (tls_dir_.empty()) {
    client = std::make_unique<httplib::Client>(
        absl::StrCat("http://", members_[i].client));
  } else {
    client = std::make_unique<httplib::Client>(
        absl::StrCat("https://", members_[i].client), tls_dir_ + "/node.pem",
        tls_dir_ + "/node.key");
    client->set_ca_cert_path((tls_dir_ + "/ca.pem").c_str());
  }
  httplib::Client& http = *client;
  http.set_connection_timeout(1, 0);
  http.set_read_timeout(2, 0);
  while (absl::Now() < deadline) {
    int code = 0;
    if (members_[i].process == nullptr || members_[i].process->Poll(&code)) {
      return absl::InternalError(absl::StrCat("etcd ", members_[i].name,
                                              " exited (", code, "); see ",
                                              members_[i].log, ".err"));
    }
    httplib::Result result = http.Get("/health");
    if (result && result->status == 200 &&
        result->body.find("\"true\"") != std::string::npos) {
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("etcd ", members_[i].name, " at ", members_[i].client,
                   " not healthy within ", absl::FormatDuration(timeout)));
}

std::string EtcdCluster::endpoints() const {
  std::vector<std::string> clients;
  for (const Member& member : members_) clients.push_back(member.client);
  return absl::StrCat(tls_dir_.empty() ? "etcd://" : "etcds://",
                      absl::StrJoin(clients, ","));
}

const std::string& EtcdCluster::client_address(int i) const {
  return members_[i].client;
}

void EtcdCluster::Kill(int i) {
  Member& member = members_[i];
  if (member.process == nullptr) return;
  member.process->Signal(SIGKILL);
  member.process->Wait();
  member.process.reset();
}

absl::Status EtcdCluster::Restart(int i) {
  Kill(i);
  if (absl::Status s = Spawn(i, /*existing=*/true); !s.ok()) return s;
  return WaitHealthy(i, absl::Seconds(30));
}

absl::Status EtcdCluster::RestartAll() {
  const int n = static_cast<int>(members_.size());
  for (int i = 0; i < n; ++i) Kill(i);
  for (int i = 0; i < n; ++i) {
    if (absl::Status s = Spawn(i, /*existing=*/true); !s.ok()) return s;
  }
  for (int i = 0; i < n; ++i) {
    if (absl::Status s = WaitHealthy(i, absl::Seconds(30)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool EtcdCluster::running(int i) const {
  return members_[i].process != nullptr;
}

}  // namespace embedps::testing
