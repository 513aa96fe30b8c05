#include "common/text_proto.h"

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace embedps {
namespace {

// Keeps the first few errors as "line L, column C: message" (1-based).
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (errors_.size() < kMaxErrors) {
      errors_.push_back(absl::StrCat("line ", line + 1, ", column ", column + 1,
                                     ": ", message));
    }
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber,
                  const std::string&) override {}
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  static constexpr size_t kMaxErrors = 5;
  std::vector<std::string> errors_;
};

}  // namespace

absl::Status ParseTextProto(absl::string_view text, absl::string_view what,
                            google::protobuf::Message* message) {
  Collector errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  message->Clear();
  if (!parser.ParseFromString(std::string(text), message)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a text-format ", message->GetTypeName(),
                     ": ", errors.Joined()));
  }
  return absl::OkStatus();
}

absl::Status ReadTextProtoFile(const std::string& path, absl::string_view what,
                               google::protobuf::Message* message) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("cannot read ", what, ": ", text.status().message()));
  }
  return ParseTextProto(*text, what, message);
}

}  // namespace embedps
