#include "server/write_order.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace embedps::server {
namespace {

class UnreplicatedWriteOrder final : public WriteOrder {
 public:
  explicit UnreplicatedWriteOrder(uint64_t incarnation)
      : incarnation_(absl::StrCat(absl::Hex(incarnation))) {}

  absl::Status CheckServes() override { return absl::OkStatus(); }
  absl::Status Write(absl::FunctionRef<proto::ReplicatedOp()>,
                     absl::FunctionRef<absl::Status()> apply,
                     uint64_t* epoch) override {
    if (epoch != nullptr) *epoch = 0;
    return apply();
  }
  absl::Status CheckLoad() override { return absl::OkStatus(); }
  std::string Incarnation() override { return incarnation_; }

 private:
  const std::string incarnation_;
};

}  // namespace

std::unique_ptr<WriteOrder> NewUnreplicatedWriteOrder(uint64_t incarnation) {
  if (incarnation == 0) {
    std::random_device random;
    incarnation = (uint64_t{random()} << 32 | random()) | 1;
  }
  return std::make_unique<UnreplicatedWriteOrder>(incarnation);
}

}  // namespace embedps::server
