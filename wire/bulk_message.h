// Protobuf messages on the gRPC wire whose large `bytes` fields ("bulk"
// fields: keys, values, gradients) travel as slices over their owners'
// buffers instead of being copied into and out of a serialized message.
//
// The bytes on the wire are an ordinary encoding of the message: the other
// ("header") fields serialized by protobuf, each bulk field after them as
// tag, length and its own slice. Any peer that speaks the .proto (grpcurl,
// another language) reads and writes these messages; ParseBulkMessage
// accepts every valid encoding, fields in any order.
//
// Sending: SerializeBulkMessage(header, {{field, slice}...}), the slices
// usually over OwnedBytes.
// Receiving: ParseBulkMessage(buffer, {fields...}, &header) returns the
// bulk fields as BulkBytes views into the received slices.
#ifndef EMBEDPS_WIRE_BULK_MESSAGE_H_
#define EMBEDPS_WIRE_BULK_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace embedps::wire {

// Heap bytes, 64-byte aligned (so any element type can be written in
// place), that can be handed to gRPC without a copy.
class OwnedBytes {
 public:
  OwnedBytes() = default;
  // Uninitialized bytes. Dies if the memory cannot be had, like new.
  explicit OwnedBytes(size_t size);
  OwnedBytes(OwnedBytes&& other) noexcept;
  OwnedBytes& operator=(OwnedBytes&& other) noexcept;
  ~OwnedBytes();

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }

  // A slice that owns the bytes (freed when gRPC drops its last
  // reference); *this becomes empty.
  grpc::Slice ReleaseToSlice() &&;

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

struct BulkField {
  int field_number;
  // Usually std::move(owned_bytes).ReleaseToSlice().
  grpc::Slice bytes;
};

// `header` with its bulk fields unset, followed by each bulk field.
grpc::ByteBuffer SerializeBulkMessage(
    const google::protobuf::MessageLite& header,
    std::vector<BulkField> bulk_fields);

// A blocking unary call of `method` ("/package.Service/Method") whose
// request and response are the bytes of messages (as built and read by the
// functions here). The call runs on the calling thread, as a generated
// stub's blocking call does.
grpc::Status BulkUnaryCall(grpc::GenericStub& stub, const std::string& method,
                           grpc::ClientContext* context,
                           const grpc::ByteBuffer& request,
                           grpc::ByteBuffer* response);

// A received bulk field: its bytes in one or more chunks of the received
// slices, valid while the ByteBuffer they were parsed from lives.
class BulkBytes {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Copies bytes [offset, offset + count) to `out`.
  // REQUIRES: offset + count <= size().
  void CopyTo(size_t offset, size_t count, void* out) const;
  void CopyTo(void* out) const { CopyTo(0, size_, out); }

  // The bytes in order, chunk by chunk.
  const std::vector<absl::string_view>& chunks() const { return chunks_; }

 private:
  friend class BulkBytesBuilder;
  std::vector<absl::string_view> chunks_;
  std::vector<size_t> chunk_offsets_;  // where each chunk starts
  size_t size_ = 0;
};

// Parses `buffer` as a message whose fields `bulk_field_numbers` (each a
// `bytes` field) are returned in that order as views, and whose other
// fields are parsed into `header`. A bulk field sent twice keeps its last
// value, as protobuf does.
// Errors: INVALID_ARGUMENT for bytes that are not a valid encoding.
absl::StatusOr<std::vector<BulkBytes>> ParseBulkMessage(
    const grpc::ByteBuffer& buffer, absl::Span<const int> bulk_field_numbers,
    google::protobuf::MessageLite* header);

}  // namespace embedps::wire

#endif  // EMBEDPS_WIRE_BULK_MESSAGE_H_
