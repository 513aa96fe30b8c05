// Encode and decode of every bulk message of TrainingService: Pull and
// Push requests, Pull responses. The client encodes requests and decodes
// responses; the server decodes requests and encodes responses; both go
// through here, so the wire's layout (proto/training.proto: packed
// little-endian uint64 keys, float32 or float16 values, row-major) lives in
// one file. Messages travel as bulk messages (bulk_message.h): their large
// fields are slices of their own, never copied into a serialized string.
//
// Decoders check structure only (well-formed message, whole keys, sizes);
// what a server accepts beyond that (limits, shards, tables) is its policy.
//
// Thread safety: pure functions; PullResponseBuilder is a value.
#ifndef EMBEDPS_WIRE_BULK_CODEC_H_
#define EMBEDPS_WIRE_BULK_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/tables.pb.h"
#include "proto/training.pb.h"
#include "wire/bulk_message.h"

namespace embedps::wire {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire is little-endian and decoded by memcpy");

// Bytes of one value of `type` on the wire (2 for FLOAT16, else 4).
size_t ValueBytes(proto::ValueType type);
// "float16" or "float32".
const char* ValueTypeName(proto::ValueType type);
// INVALID_ARGUMENT naming the known types, unless `type` is one.
absl::Status CheckValueType(int type);

// ---- The client's side.

// A PullRequest `header` carrying keys[rows[i]] for every i.
grpc::ByteBuffer EncodePullRequest(const proto::PullRequest& header,
                                   absl::Span<const uint64_t> keys,
                                   absl::Span<const uint32_t> rows);

// A PushRequest `header` carrying keys[rows[i]] and, for each, the
// gradient row grads[rows[i] * dim, +dim), narrowed to float16 if
// header.value_type() says so.
grpc::ByteBuffer EncodePushRequest(const proto::PushRequest& header,
                                   absl::Span<const uint64_t> keys,
                                   absl::Span<const uint32_t> rows,
                                   const float* grads, size_t dim);

// Decodes a PullResponse of `rows` rows of `dim` values of `type`: row k is
// written to out_row(k) (dim floats), straight from the received slices.
// INVALID_ARGUMENT for a malformed message or a size other than
// rows × dim values.
absl::Status DecodePullResponse(const grpc::ByteBuffer& buffer,
                                proto::ValueType type, size_t rows, size_t dim,
                                absl::FunctionRef<float*(size_t)> out_row);

// ---- The server's side. Views are valid while the buffer lives.

struct PullRequestView {
  proto::PullRequest header;
  BulkBytes keys;
};
// INVALID_ARGUMENT if `buffer` is not a PullRequest.
absl::StatusOr<PullRequestView> ParsePullRequest(
    const grpc::ByteBuffer& buffer);

struct PushRequestView {
  proto::PushRequest header;
  BulkBytes keys;
  BulkBytes gradients;
};
// INVALID_ARGUMENT if `buffer` is not a PushRequest.
absl::StatusOr<PushRequestView> ParsePushRequest(
    const grpc::ByteBuffer& buffer);

// Keys in `bytes`; INVALID_ARGUMENT if they are not whole uint64s.
absl::StatusOr<size_t> KeyCount(const BulkBytes& bytes);
// The keys, copied out. REQUIRES: KeyCount(bytes) is ok.
std::vector<uint64_t> CopyKeys(const BulkBytes& bytes);

// Gradients as float32: a view of the received bytes where they arrived
// as float32 in one aligned piece, else a copy (widened from float16).
class Gradients {
 public:
  absl::Span<const float> floats() const { return floats_; }

 private:
  friend absl::StatusOr<Gradients> DecodeGradients(const BulkBytes&,
                                                   proto::ValueType, size_t);
  absl::Span<const float> floats_;
  std::unique_ptr<float[]> owned_;
};
// `floats` values of `type` from `bytes`; INVALID_ARGUMENT, naming both
// sizes, if `bytes` holds another number of them.
absl::StatusOr<Gradients> DecodeGradients(const BulkBytes& bytes,
                                          proto::ValueType type, size_t floats);

// A PullResponse whose values are written in place: float32 values go
// straight into the buffer that is sent; float16 ones into a scratch
// buffer that Finish narrows into it.
class PullResponseBuilder {
 public:
  PullResponseBuilder(proto::ValueType type, size_t floats);
  // Where the caller writes the floats (uninitialized: write them all).
  absl::Span<float> values() { return values_; }
  grpc::ByteBuffer Finish() &&;

 private:
  proto::ValueType type_;
  OwnedBytes bytes_;
  std::unique_ptr<float[]> scratch_;
  absl::Span<float> values_;
};

}  // namespace embedps::wire

#endif  // EMBEDPS_WIRE_BULK_CODEC_H_
