#include "dense/collective/file_store.h"

#include <thread>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

TEST(FileStoreTest, TwoStoresOverOneDirectoryMeet) {
  const std::string dir = ::testing::TempDir() + "/file_store_meet";
  ASSERT_OK_AND_ASSIGN(auto a, CreateFileStore(dir));
  ASSERT_OK_AND_ASSIGN(auto b, CreateFileStore(dir));
  EXPECT_THAT(b->Get("job/rank/0"), StatusIs(absl::StatusCode::kNotFound));
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_OK(a->Set("job/rank/0", std::string("addr\0ess", 8)));
  });
  ASSERT_OK(b->Wait({"job/rank/0"}, absl::Seconds(10)));
  writer.join();
  ASSERT_OK_AND_ASSIGN(std::string value, b->Get("job/rank/0"));
  EXPECT_EQ(value, std::string("addr\0ess", 8));
  // The key with '/' is one file in the directory, not a path under it.
  EXPECT_THAT(b->Get("job"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(FileStoreTest, WaitTimesOutNamingTheMissingKeys) {
  const std::string dir = ::testing::TempDir() + "/file_store_timeout";
  ASSERT_OK_AND_ASSIGN(auto store, CreateFileStore(dir));
  ASSERT_OK(store->Set("present", "1"));
  EXPECT_THAT(
      store->Wait({"present", "rank/2"}, absl::Milliseconds(300)),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank/2")));
}

TEST(FileStoreTest, UncreatableDirectoryIsUnavailable) {
  EXPECT_THAT(CreateFileStore("/proc/embedps-cannot-be-here"),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace embedps::dense
