#include "testing/planted_data.h"

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "testing/child_process.h"

namespace embedps::testing {

absl::Status WritePlantedData(const std::string& dir, int train_rows,
                              int test_rows) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<ChildProcess> datagen,
      ChildProcess::Spawn(
          "tools/datagen",
          {"--output_dir=" + dir, absl::StrCat("--train_rows=", train_rows),
           absl::StrCat("--test_rows=", test_rows), "--vocab=5,10,20,50"}));
  ASSIGN_OR_RETURN(const int code, datagen->WaitFor(absl::Seconds(120)));
  if (code != 0) {
    return absl::InternalError(
        absl::StrCat("datagen into '", dir, "' exited ", code));
  }
  return absl::OkStatus();
}

}  // namespace embedps::testing
