// TLS and tokens end to end over a real gRPC port: certificates made by
// make_certs.sh (openssl) at test time, a server whose handlers answer OK,
// and clients that should and should not get through.
#include "security/credentials.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "proto/training.grpc.pb.h"
#include "security/health_check.h"
#include "security/token_auth.h"

namespace embedps::security {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

// Answers the calls the tests make; what matters is whether they arrive.
class AnsweringService : public proto::TrainingService::Service {
 public:
  grpc::Status ListTables(grpc::ServerContext*, const proto::ListTablesRequest*,
                          proto::ListTablesResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status CreateTable(grpc::ServerContext* context,
                           const proto::CreateTableRequest*,
                           proto::CreateTableResponse*) override {
    ++created;
    const auto access =
        context->auth_context()->FindPropertyValues(kAccessProperty);
    last_access =
        access.empty() ? "" : std::string(access[0].data(), access[0].size());
    return grpc::Status::OK;
  }
  int created = 0;
  std::string last_access;
};

class CredentialsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(std::getenv("TEST_TMPDIR"), "/certs"));
    const std::string command =
        absl::StrCat("security/make_certs.sh ", *dir_, " >/dev/null");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string File(const std::string& name) {
    return absl::StrCat(*dir_, "/", name);
  }

  // Starts the server with `security`; fails the test if it cannot.
  void Serve(const ServerSecurity& security) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        MakeServerCredentials(security);
    ASSERT_OK(credentials.status());
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", *credentials, &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    // By IP: the certificate names 127.0.0.1 too, and a name would go
    // through c-ares, whose resolver leaks under LeakSanitizer.
    address_ = absl::StrCat("127.0.0.1:", port);
  }

  ServerSecurity TlsServer() const {
    ServerSecurity security;
    security.cert_file = File("node.pem");
    security.key_file = File("node.key");
    return security;
  }
  ServerSecurity TokenServer() const {
    ServerSecurity security = TlsServer();
    security.train_token_file = File("train.token");
    security.read_token_file = File("read.token");
    return security;
  }
  ChannelSecurity TrustingClient() const {
    ChannelSecurity security;
    security.ca_file = File("ca.pem");
    return security;
  }

  std::unique_ptr<proto::TrainingService::Stub> Stub(
      const ChannelSecurity& security) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        MakeChannelCredentials(security);
    EXPECT_OK(credentials.status());
    return proto::TrainingService::NewStub(grpc::CreateCustomChannel(
        address_, *credentials, ChannelArgumentsFor(security)));
  }

  // A call a read-only token may make.
  static grpc::Status CallList(proto::TrainingService::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    proto::ListTablesResponse response;
    return stub.ListTables(&context, proto::ListTablesRequest(), &response);
  }
  static grpc::Status CallCreate(proto::TrainingService::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    proto::CreateTableResponse response;
    return stub.CreateTable(&context, proto::CreateTableRequest(), &response);
  }

  static std::string* dir_;
  AnsweringService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

std::string* CredentialsTest::dir_ = nullptr;

TEST_F(CredentialsTest, AClientThatTrustsTheCaGetsThrough) {
  Serve(TlsServer());
  auto stub = Stub(TrustingClient());
  EXPECT_TRUE(CallList(*stub).ok());
  EXPECT_TRUE(CallCreate(*stub).ok());
}

TEST_F(CredentialsTest, APlainTextClientIsRefused) {
  Serve(TlsServer());
  auto stub = Stub(ChannelSecurity());
  const grpc::Status status = CallList(*stub);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
}

TEST_F(CredentialsTest, AClientTrustingAnotherCaRefusesTheServer) {
  Serve(TlsServer());
  ChannelSecurity security;
  security.ca_file = File("other-ca.pem");
  auto stub = Stub(security);
  EXPECT_EQ(CallList(*stub).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(CredentialsTest, AServerNameTheCertificateLacksIsRefused) {
  Serve(TlsServer());
  ChannelSecurity security = TrustingClient();
  security.server_name = "elsewhere.example";
  auto stub = Stub(security);
  EXPECT_EQ(CallList(*stub).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(CredentialsTest, MutualTlsWantsACertificateFromTheClientCa) {
  ServerSecurity server = TlsServer();
  server.client_ca_file = File("ca.pem");
  Serve(server);
  // No client certificate.
  EXPECT_EQ(CallList(*Stub(TrustingClient())).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // One from a CA the server does not trust.
  ChannelSecurity stranger = TrustingClient();
  stranger.cert_file = File("other.pem");
  stranger.key_file = File("other.key");
  EXPECT_EQ(CallList(*Stub(stranger)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  ChannelSecurity member = TrustingClient();
  member.cert_file = File("node.pem");
  member.key_file = File("node.key");
  EXPECT_TRUE(CallList(*Stub(member)).ok());
  EXPECT_EQ(service_.created, 0);
}

TEST_F(CredentialsTest, TheTrainingTokenCallsEverything) {
  Serve(TokenServer());
  ChannelSecurity security = TrustingClient();
  security.token_file = File("train.token");
  auto stub = Stub(security);
  EXPECT_TRUE(CallList(*stub).ok());
  const grpc::Status created = CallCreate(*stub);
  EXPECT_TRUE(created.ok()) << created.error_message();
  EXPECT_EQ(service_.created, 1);
  EXPECT_EQ(service_.last_access, "train");
}

TEST_F(CredentialsTest, TheReadOnlyTokenReadsButChangesNothing) {
  Serve(TokenServer());
  ChannelSecurity security = TrustingClient();
  security.token_file = File("read.token");
  auto stub = Stub(security);
  EXPECT_TRUE(CallList(*stub).ok());
  const grpc::Status created = CallCreate(*stub);
  EXPECT_EQ(created.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(created.error_message(),
              HasSubstr("read-only token cannot call "
                        "/embedps.proto.TrainingService/CreateTable"));
  EXPECT_EQ(service_.created, 0);
}

TEST_F(CredentialsTest, AMissingOrWrongTokenIsRefused) {
  Serve(TokenServer());
  const grpc::Status none = CallCreate(*Stub(TrustingClient()));
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(none.error_message(), HasSubstr("no token"));
  EXPECT_EQ(CallList(*Stub(TrustingClient())).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  const std::string wrong = File("wrong.token");
  std::ofstream(wrong) << "not-the-token\n";
  ChannelSecurity security = TrustingClient();
  security.token_file = wrong;
  const grpc::Status refused = CallCreate(*Stub(security));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(refused.error_message(), HasSubstr("not one this server"));
  EXPECT_EQ(service_.created, 0);
}

TEST_F(CredentialsTest, HealthNeedsNoToken) {
  Serve(TokenServer());
  EXPECT_OK(CheckHealth(address_, TrustingClient(), absl::Seconds(5)));
}

TEST_F(CredentialsTest, CombinationsThatCannotWorkAreRefused) {
  ServerSecurity token_in_clear;
  token_in_clear.train_token_file = File("train.token");
  EXPECT_THAT(MakeServerCredentials(token_in_clear).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tokens need TLS")));
  ServerSecurity key_alone;
  key_alone.key_file = File("node.key");
  EXPECT_THAT(MakeServerCredentials(key_alone).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ServerSecurity same_tokens = TlsServer();
  same_tokens.train_token_file = File("train.token");
  same_tokens.read_token_file = File("train.token");
  EXPECT_THAT(
      MakeServerCredentials(same_tokens).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("differ")));
  ServerSecurity missing = TlsServer();
  missing.cert_file = File("absent.pem");
  EXPECT_THAT(MakeServerCredentials(missing).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("absent.pem")));
  ServerSecurity not_pem = TlsServer();
  not_pem.cert_file = File("train.token");
  EXPECT_THAT(
      MakeServerCredentials(not_pem).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no PEM block")));

  ChannelSecurity client_token_in_clear;
  client_token_in_clear.token_file = File("train.token");
  EXPECT_THAT(MakeChannelCredentials(client_token_in_clear).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token needs TLS")));
  ChannelSecurity empty_token = TrustingClient();
  empty_token.token_file = File("empty.token");
  std::ofstream(empty_token.token_file) << "\n";
  EXPECT_THAT(MakeChannelCredentials(empty_token).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("one non-empty line")));
}

TEST(ChannelArgumentsTest, ChannelsReconnectWithinASecondAndKeepTheServerName) {
  ChannelSecurity security;
  security.ca_file = "ca.pem";
  security.server_name = "shard.example";
  const grpc::ChannelArguments args = ChannelArgumentsFor(security);
  const grpc_channel_args c = args.c_channel_args();
  std::map<std::string, std::string> got;
  for (size_t i = 0; i < c.num_args; ++i) {
    got[c.args[i].key] = c.args[i].type == GRPC_ARG_INTEGER
                             ? std::to_string(c.args[i].value.integer)
                             : std::string(c.args[i].type == GRPC_ARG_STRING
                                               ? c.args[i].value.string
                                               : "");
  }
  EXPECT_EQ(got[GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS], "100");
  EXPECT_EQ(got[GRPC_ARG_MIN_RECONNECT_BACKOFF_MS], "100");
  EXPECT_EQ(got[GRPC_ARG_MAX_RECONNECT_BACKOFF_MS], "1000");
  EXPECT_EQ(got[GRPC_SSL_TARGET_NAME_OVERRIDE_ARG], "shard.example");
  const grpc::ChannelArguments plain_args =
      ChannelArgumentsFor(ChannelSecurity());
  const grpc_channel_args plain = plain_args.c_channel_args();
  for (size_t i = 0; i < plain.num_args; ++i) {
    EXPECT_STRNE(plain.args[i].key, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG)
        << "plain text: no server name override";
  }
}

TEST(AccessForTest, WritesNeedTheTrainingTokenAndUnknownMethodsToo) {
  EXPECT_EQ(AccessFor("/embedps.proto.TrainingService/Push"), Access::kTrain);
  EXPECT_EQ(AccessFor("/embedps.proto.TrainingService/Pull"), Access::kTrain);
  EXPECT_EQ(AccessFor("/embedps.proto.TrainingService/Save"), Access::kTrain);
  EXPECT_EQ(AccessFor("/embedps.proto.Coordination/Get"), Access::kTrain);
  EXPECT_EQ(AccessFor("/embedps.proto.Future/Anything"), Access::kTrain);
  EXPECT_EQ(AccessFor(""), Access::kTrain);
  EXPECT_EQ(AccessFor("/embedps.proto.ServingService/Lookup"), Access::kRead);
  EXPECT_EQ(AccessFor("/embedps.proto.Predictor/Predict"), Access::kRead);
  EXPECT_EQ(AccessFor("/grpc.health.v1.Health/Check"), Access::kOpen);
}

}  // namespace
}  // namespace embedps::security
