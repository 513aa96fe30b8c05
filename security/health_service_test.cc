#include "security/health_service.h"

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"

namespace embedps::security {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void Start(size_t max_watches,
             size_t per_peer = HealthService::kDefaultMaxWatchesPerPeer) {
    service_ = std::make_unique<HealthService>(max_watches, per_peer);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = Health::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_ != nullptr) {
      service_->Shutdown();
      server_->Shutdown();
    }
  }

  grpc::Status Check(const std::string& service,
                     HealthCheckResponse* response) {
    grpc::ClientContext context;
    HealthCheckRequest request;
    request.set_service(service);
    return stub_->Check(&context, request, response);
  }

  // A Watch stream and its first answer.
  struct Watching {
    std::unique_ptr<grpc::ClientContext> context =
        std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader;
    HealthCheckResponse first;
    bool answered = false;
  };
  Watching Watch(const std::string& service) {
    Watching w;
    HealthCheckRequest request;
    request.set_service(service);
    w.reader = stub_->Watch(w.context.get(), request);
    w.answered = w.reader->Read(&w.first);
    return w;
  }

  std::unique_ptr<HealthService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, CheckAnswersForTheServerAsAWhole) {
  Start(4);
  HealthCheckResponse response;
  ASSERT_TRUE(Check("", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check("embedps.proto.TrainingService", &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  service_->Shutdown();
  ASSERT_TRUE(Check("", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchStreamsAreBoundedAndEndAtShutdown) {
  Start(3);
  std::vector<Watching> open;
  for (int i = 0; i < 3; ++i) {
    open.push_back(Watch(i == 2 ? "unknown" : ""));
    ASSERT_TRUE(open.back().answered);
  }
  EXPECT_EQ(open[0].first.status(), HealthCheckResponse::SERVING);
  EXPECT_EQ(open[2].first.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  EXPECT_EQ(service_->watches(), 3u);
  // A fourth is refused at once, naming the limit; Check still answers.
  Watching refused = Watch("");
  EXPECT_FALSE(refused.answered);
  const grpc::Status status = refused.reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("3 health Watch"), std::string::npos)
      << status.error_message();
  HealthCheckResponse response;
  EXPECT_TRUE(Check("", &response).ok());
  // A watcher that leaves frees its place.
  open[1].context->TryCancel();
  open[1].reader->Finish();
  for (int i = 0; i < 100 && service_->watches() != 2; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(service_->watches(), 2u);
  Watching again = Watch("");
  EXPECT_TRUE(again.answered);
  // Shutdown: every watcher is told NOT_SERVING and its stream ends OK.
  service_->Shutdown();
  for (Watching* w : {&open[0], &again}) {
    HealthCheckResponse last;
    ASSERT_TRUE(w->reader->Read(&last));
    EXPECT_EQ(last.status(), HealthCheckResponse::NOT_SERVING);
    EXPECT_FALSE(w->reader->Read(&last));
    EXPECT_TRUE(w->reader->Finish().ok());
  }
  HealthCheckResponse last;
  while (open[2].reader->Read(&last)) {
  }
  EXPECT_TRUE(open[2].reader->Finish().ok());
  for (int i = 0; i < 100 && service_->watches() != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(service_->watches(), 0u);
}

// One host may not take every place: past its share its Watches are
// refused while other hosts' would not be (all of this test's come from
// 127.0.0.1), and a stream that ends frees its host's place.
TEST_F(HealthServiceTest, WatchStreamsAreBoundedPerHost) {
  Start(64, 2);
  std::vector<Watching> open;
  for (int i = 0; i < 2; ++i) {
    open.push_back(Watch(""));
    ASSERT_TRUE(open.back().answered);
  }
  Watching refused = Watch("");
  EXPECT_FALSE(refused.answered);
  const grpc::Status status = refused.reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find(
                "2 health Watch streams of ipv4:127.0.0.1 are open already "
                "(at most 2 a host)"),
            std::string::npos)
      << status.error_message();
  open[0].context->TryCancel();
  open[0].reader->Finish();
  for (int i = 0; i < 100 && service_->watches() != 1; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  Watching again = Watch("");
  EXPECT_TRUE(again.answered);
  service_->Shutdown();
  for (Watching* w : {&open[1], &again}) {
    HealthCheckResponse last;
    while (w->reader->Read(&last)) {
    }
    EXPECT_TRUE(w->reader->Finish().ok());
  }
}

}  // namespace
}  // namespace embedps::security
