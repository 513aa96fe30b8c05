#include "server/path_confinement.h"

#include <filesystem>
#include <fstream>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

namespace fs = std::filesystem;
using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

class PathConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::path(::testing::TempDir()) / "confinement";
    fs::remove_all(base_);
    fs::create_directories(base_ / "root" / "ckpt");
    fs::create_directories(base_ / "rootx");
    fs::create_directories(base_ / "elsewhere");
    root_ = (base_ / "root").string();
  }
  fs::path base_;
  std::string root_;
};

TEST_F(PathConfinementTest, PathsInsideTheRootResolve) {
  const std::string canonical = fs::canonical(root_).string();
  ASSERT_OK_AND_ASSIGN(std::string p,
                       ResolveInside(root_, root_ + "/ckpt", "Save"));
  EXPECT_EQ(p, canonical + "/ckpt");
  ASSERT_OK_AND_ASSIGN(p, ResolveInside(root_, "ckpt/new.tmp", "Save"));
  EXPECT_EQ(p, canonical + "/ckpt/new.tmp");  // relative: below the root
  ASSERT_OK_AND_ASSIGN(p, ResolveInside(root_, root_, "Load"));
  EXPECT_EQ(p, canonical);
  ASSERT_OK_AND_ASSIGN(p, ResolveInside(root_, "ckpt/../ckpt/./a", "Save"));
  EXPECT_EQ(p, canonical + "/ckpt/a");
}

TEST_F(PathConfinementTest, PathsThatLeaveTheRootAreRefused) {
  for (const std::string& bad :
       {std::string("../elsewhere"), std::string("ckpt/../../elsewhere"),
        (base_ / "elsewhere").string(), std::string("/etc"),
        (base_ / "rootx").string(),  // a sibling sharing the root's prefix
        std::string("/")}) {
    EXPECT_THAT(ResolveInside(root_, bad, "Load").status(),
                StatusIs(absl::StatusCode::kPermissionDenied,
                         HasSubstr("outside the checkpoint root")))
        << bad;
  }
}

TEST_F(PathConfinementTest, LinksThatLeaveTheRootAreRefused) {
  fs::create_directory_symlink(base_ / "elsewhere", base_ / "root" / "out");
  EXPECT_THAT(ResolveInside(root_, "out", "Save").status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(ResolveInside(root_, "out/new", "Save").status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // A link that stays inside is followed.
  fs::create_directory_symlink(base_ / "root" / "ckpt",
                               base_ / "root" / "alias");
  ASSERT_OK_AND_ASSIGN(std::string p, ResolveInside(root_, "alias", "Load"));
  EXPECT_EQ(p, fs::canonical(root_).string() + "/ckpt");
  // A root reached through a link is the link's target.
  fs::create_directory_symlink(base_ / "root", base_ / "root_link");
  ASSERT_OK(
      ResolveInside((base_ / "root_link").string(), root_ + "/ckpt", "Load")
          .status());
}

TEST_F(PathConfinementTest, AMissingRootIsAnError) {
  EXPECT_THAT(ResolveInside((base_ / "none").string(), "x", "Save").status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace embedps::server
