// Text-format protocol buffers from files and strings (the table, worker
// and predictor configs), with the parser's errors in the returned status
// instead of the log.
//
// Thread safety: pure functions.
#ifndef EMBEDPS_COMMON_TEXT_PROTO_H_
#define EMBEDPS_COMMON_TEXT_PROTO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace embedps {

// Parses `text` into `message` (cleared first). INVALID_ARGUMENT naming
// `what` ("--tables file 'x'") and each error ("line L, column C: ...").
absl::Status ParseTextProto(absl::string_view text, absl::string_view what,
                            google::protobuf::Message* message);

// Reads `path` and parses it as ParseTextProto, naming `what`. NOT_FOUND
// naming the file if it cannot be read.
absl::Status ReadTextProtoFile(const std::string& path, absl::string_view what,
                               google::protobuf::Message* message);

}  // namespace embedps

#endif  // EMBEDPS_COMMON_TEXT_PROTO_H_
