#include "client/bulk_fan_out.h"

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/byte_buffers.h"

namespace embedps::client {
namespace {

using ::embedps::testing::ByteBufferContents;
using ::embedps::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

grpc::ByteBuffer BufferOf(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

// A real gRPC server whose every method answers a request with the request
// itself, except that a request "fail:CODE:N" is answered with status CODE
// its first N times and "slow" only after 200 ms. Counts the requests it
// saw.
class EchoServer {
 public:
  EchoServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterCallbackGenericService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~EchoServer() { server_->Shutdown(); }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int times_seen(const std::string& request) {
    MutexLock lock(&service_.mu);
    return service_.seen[request];
  }

 private:
  struct Service : grpc::CallbackGenericService {
    Mutex mu;
    std::map<std::string, int> seen;

    grpc::ServerGenericBidiReactor* CreateReactor(
        grpc::GenericCallbackServerContext*) override {
      return new Reactor(this);
    }
  };
  class Reactor : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(Service* service) : service_(service) {
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::INTERNAL, "no request"));
        return;
      }
      const std::string request = ByteBufferContents(request_);
      int seen = 0;
      {
        MutexLock lock(&service_->mu);
        seen = ++service_->seen[request];
      }
      int code = 0, failures = 0;
      if (sscanf(request.c_str(), "fail:%d:%d", &code, &failures) == 2 &&
          seen <= failures) {
        Finish(grpc::Status(static_cast<grpc::StatusCode>(code),
                            absl::StrCat("failing on purpose, time ", seen)));
        return;
      }
      if (request == "slow") absl::SleepFor(absl::Milliseconds(200));
      response_ = request_;
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    }
    void OnDone() override { delete this; }

   private:
    Service* const service_;
    grpc::ByteBuffer request_, response_;
  };

  Service service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

class BulkFanOutTest : public ::testing::Test {
 protected:
  BulkFanOutTest()
      : channel_(grpc::CreateChannel(server_.address(),
                                     grpc::InsecureChannelCredentials())),
        stub_(channel_) {
    policy_.rpc_timeout = absl::Seconds(10);
    policy_.retry_deadline = absl::Seconds(10);
    policy_.initial_backoff = absl::Milliseconds(1);
    policy_.max_backoff = absl::Milliseconds(4);
  }

  // Runs one fan-out of `requests` (call i to "shard" i) and returns its
  // status; `responses` gets what on_response saw, by call.
  absl::Status Run(const std::vector<std::string>& requests,
                   std::map<size_t, std::string>* responses) {
    // on_response runs on gRPC's threads, several at once.
    Mutex mu;
    std::shared_ptr<BulkFanOut> calls = BulkFanOut::Create(
        "/test.Echo/Echo", "Echo", policy_, absl::ZeroDuration(),
        [&](size_t call, const grpc::ByteBuffer& response) {
          MutexLock lock(&mu);
          EXPECT_EQ(responses->count(call), 0u) << "call " << call << " twice";
          (*responses)[call] = ByteBufferContents(response);
          return absl::OkStatus();
        });
    for (size_t i = 0; i < requests.size(); ++i) {
      calls->Start(&stub_, static_cast<int32_t>(i), server_.address(),
                   BufferOf(requests[i]));
    }
    EXPECT_EQ(calls->calls_started(), requests.size());
    return calls->Wait();
  }

  EchoServer server_;
  std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;
  RetryPolicy policy_;
};

TEST_F(BulkFanOutTest, EveryResponseReachesItsCallOnce) {
  std::map<size_t, std::string> responses;
  ASSERT_OK(Run({"a", "bb", "ccc", "slow"}, &responses));
  EXPECT_EQ(responses, (std::map<size_t, std::string>{
                           {0, "a"}, {1, "bb"}, {2, "ccc"}, {3, "slow"}}));
}

TEST_F(BulkFanOutTest, UnavailableIsRetriedUntilItSucceeds) {
  std::map<size_t, std::string> responses;
  ASSERT_OK(Run({"fail:14:3", "plain"}, &responses));
  EXPECT_EQ(responses[0], "fail:14:3");
  EXPECT_EQ(responses[1], "plain");
  EXPECT_EQ(server_.times_seen("fail:14:3"), 4);
  EXPECT_EQ(server_.times_seen("plain"), 1);
}

TEST_F(BulkFanOutTest, AnotherErrorIsNotRetriedAndNamesItsShard) {
  std::map<size_t, std::string> responses;
  const absl::Status status = Run({"ok", "fail:3:1", "slow"}, &responses);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("Echo on shard 1"),
                                     HasSubstr("after 1 attempt(s)"),
                                     HasSubstr("failing on purpose, time 1"))));
  EXPECT_EQ(server_.times_seen("fail:3:1"), 1);
  // The other calls finished, and their responses were handed over.
  EXPECT_EQ(responses, (std::map<size_t, std::string>{{0, "ok"}, {2, "slow"}}));
}

TEST_F(BulkFanOutTest, RetriesStopAtTheRetryDeadline) {
  policy_.retry_deadline = absl::Milliseconds(100);
  std::map<size_t, std::string> responses;
  const absl::Status status = Run({"fail:14:1000000"}, &responses);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("Echo on shard 0")));
  EXPECT_GT(server_.times_seen("fail:14:1000000"), 1);
  EXPECT_TRUE(responses.empty());
}

TEST_F(BulkFanOutTest, AnAttemptPastItsDeadlineIsRetried) {
  policy_.rpc_timeout = absl::Milliseconds(50);
  policy_.retry_deadline = absl::Milliseconds(400);
  std::map<size_t, std::string> responses;
  // "slow" takes 200 ms: every attempt times out, and each is retried
  // until the retry deadline.
  const absl::Status status = Run({"slow"}, &responses);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded,
                               HasSubstr("Echo on shard 0")));
  EXPECT_GT(server_.times_seen("slow"), 1);
}

TEST_F(BulkFanOutTest, AnErrorOfOnResponseIsReturned) {
  std::atomic<int> handed{0};
  std::shared_ptr<BulkFanOut> calls = BulkFanOut::Create(
      "/test.Echo/Echo", "Echo", policy_, absl::ZeroDuration(),
      [&](size_t call, const grpc::ByteBuffer&) {
        ++handed;
        return call == 1 ? absl::DataLossError("bad response")
                         : absl::OkStatus();
      });
  calls->Start(&stub_, 0, server_.address(), BufferOf("x"));
  calls->Start(&stub_, 1, server_.address(), BufferOf("y"));
  calls->Start(&stub_, 2, server_.address(), BufferOf("z"));
  EXPECT_THAT(calls->Wait(),
              StatusIs(absl::StatusCode::kDataLoss, "bad response"));
  EXPECT_EQ(handed.load(), 3);
}

// Seal's callback runs once, after the last call, even when the caller has
// let go of the fan-out: it keeps itself alive.
TEST_F(BulkFanOutTest, DoneRunsOnceAfterTheLastCallWithoutTheCaller) {
  std::promise<absl::Status> done;
  std::future<absl::Status> result = done.get_future();
  std::atomic<int> runs{0};
  {
    std::shared_ptr<BulkFanOut> calls = BulkFanOut::Create(
        "/test.Echo/Echo", "Echo", policy_, absl::ZeroDuration(),
        [](size_t, const grpc::ByteBuffer&) { return absl::OkStatus(); });
    calls->Start(&stub_, 0, server_.address(), BufferOf("slow"));
    calls->Start(&stub_, 1, server_.address(), BufferOf("fail:14:2"));
    calls->Seal([&](absl::Status status) {
      ++runs;
      done.set_value(std::move(status));
    });
  }
  EXPECT_OK(result.get());
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(server_.times_seen("slow"), 1);
  EXPECT_EQ(server_.times_seen("fail:14:2"), 3);
}

// By the time `done` runs, the fan-out holds no call context (each holds
// its channel): the caller may destroy its channels at once. Were a gRPC
// callback thread to release the last reference to a channel after `done`,
// gRPC 1.51 could shut down the queue that thread serves from within and
// abort the process later ("prior > 0").
TEST_F(BulkFanOutTest, DoneRunsWhenNoCallHoldsTheChannel) {
  const long baseline = channel_.use_count();  // the fixture's and stub's
  for (int round = 0; round < 20; ++round) {
    std::promise<long> done;
    std::future<long> held = done.get_future();
    {
      std::shared_ptr<BulkFanOut> calls = BulkFanOut::Create(
          "/test.Echo/Echo", "Echo", policy_, absl::ZeroDuration(),
          [](size_t, const grpc::ByteBuffer&) { return absl::OkStatus(); });
      calls->Start(&stub_, 0, server_.address(), BufferOf("a"));
      calls->Start(&stub_, 1, server_.address(), BufferOf("fail:14:1"));
      calls->Seal([&](absl::Status status) {
        EXPECT_OK(status);
        done.set_value(channel_.use_count());
      });
    }
    EXPECT_EQ(held.get(), baseline) << "round " << round;
  }
}

TEST_F(BulkFanOutTest, SealingWithNoCallsIsDoneAtOnce) {
  std::shared_ptr<BulkFanOut> calls = BulkFanOut::Create(
      "/test.Echo/Echo", "Echo", policy_, absl::ZeroDuration(),
      [](size_t, const grpc::ByteBuffer&) { return absl::OkStatus(); });
  EXPECT_OK(calls->Wait());
}

}  // namespace
}  // namespace embedps::client
