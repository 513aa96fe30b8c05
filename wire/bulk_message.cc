#include "wire/bulk_message.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace embedps::wire {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr size_t kAlignment = 64;

}  // namespace

OwnedBytes::OwnedBytes(size_t size) : size_(size) {
  if (size == 0) return;
  const size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  data_ = static_cast<char*>(std::aligned_alloc(kAlignment, rounded));
  if (data_ == nullptr) throw std::bad_alloc();
}

OwnedBytes::OwnedBytes(OwnedBytes&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

OwnedBytes& OwnedBytes::operator=(OwnedBytes&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

OwnedBytes::~OwnedBytes() { std::free(data_); }

grpc::Slice OwnedBytes::ReleaseToSlice() && {
  if (data_ == nullptr) return grpc::Slice();
  grpc::Slice slice(std::exchange(data_, nullptr), std::exchange(size_, 0),
                    &std::free);
  return slice;
}

grpc::ByteBuffer SerializeBulkMessage(
    const google::protobuf::MessageLite& header,
    std::vector<BulkField> bulk_fields) {
  std::vector<grpc::Slice> slices;
  slices.reserve(1 + 2 * bulk_fields.size());
  // Header fields, then each field's tag and length in front of its slice.
  std::string prefix = header.SerializeAsString();
  for (BulkField& field : bulk_fields) {
    if (field.bytes.size() == 0) continue;  // proto3 omits empty fields
    uint8_t tag_and_length[16];
    uint8_t* end = google::protobuf::io::CodedOutputStream::WriteTagToArray(
        WireFormatLite::MakeTag(field.field_number,
                                WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
        tag_and_length);
    end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(
        field.bytes.size(), end);
    prefix.append(reinterpret_cast<const char*>(tag_and_length),
                  end - tag_and_length);
    slices.emplace_back(prefix.data(), prefix.size());  // copies the prefix
    prefix.clear();
    slices.push_back(std::move(field.bytes));
  }
  if (!prefix.empty() || slices.empty()) {
    slices.emplace_back(prefix.data(), prefix.size());
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::Status BulkUnaryCall(grpc::GenericStub& stub, const std::string& method,
                           grpc::ClientContext* context,
                           const grpc::ByteBuffer& request,
                           grpc::ByteBuffer* response) {
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(context, method, request, &queue);
  call->StartCall();
  grpc::Status status;
  call->Finish(response, &status, /*tag=*/&status);
  void* tag = nullptr;
  bool ok = false;
  // The call's only event: Finish always completes, with ok == true.
  queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return status;
}

void BulkBytes::CopyTo(size_t offset, size_t count, void* out) const {
  char* to = static_cast<char*>(out);
  // The chunk holding `offset`.
  size_t c =
      std::upper_bound(chunk_offsets_.begin(), chunk_offsets_.end(), offset) -
      chunk_offsets_.begin() - 1;
  size_t within = offset - chunk_offsets_[c];
  while (count > 0) {
    const absl::string_view chunk = chunks_[c];
    const size_t take = std::min(count, chunk.size() - within);
    std::memcpy(to, chunk.data() + within, take);
    to += take;
    count -= take;
    within = 0;
    ++c;
  }
}

// Appends chunks to a BulkBytes (ParseBulkMessage's only writer).
class BulkBytesBuilder {
 public:
  explicit BulkBytesBuilder(BulkBytes* bytes) : bytes_(*bytes) {
    bytes_ = BulkBytes();
  }
  void Add(const void* data, size_t size) {
    bytes_.chunk_offsets_.push_back(bytes_.size_);
    bytes_.chunks_.emplace_back(static_cast<const char*>(data), size);
    bytes_.size_ += size;
  }

 private:
  BulkBytes& bytes_;
};

absl::StatusOr<std::vector<BulkBytes>> ParseBulkMessage(
    const grpc::ByteBuffer& buffer, absl::Span<const int> bulk_field_numbers,
    google::protobuf::MessageLite* header) {
  const auto invalid = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot parse ", header->GetTypeName(), " (",
                     buffer.Length(), " bytes): ", what));
  };
  std::vector<BulkBytes> bulk(bulk_field_numbers.size());
  // The header fields, re-encoded as they were read.
  std::string header_bytes;
  // The reader only reads. It must read `buffer` itself, not a copy: a
  // copy would hold small (inlined) slices' bytes in its own memory.
  grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(&buffer));
  if (!reader.status().ok()) return invalid(reader.status().error_message());
  {
    google::protobuf::io::CodedInputStream input(&reader);
    input.SetTotalBytesLimit(INT_MAX);
    google::protobuf::io::StringOutputStream header_stream(&header_bytes);
    google::protobuf::io::CodedOutputStream header_out(&header_stream);
    while (const uint32_t tag = input.ReadTag()) {
      const int field = WireFormatLite::GetTagFieldNumber(tag);
      const auto bulk_index = std::find(bulk_field_numbers.begin(),
                                        bulk_field_numbers.end(), field) -
                              bulk_field_numbers.begin();
      if (bulk_index == static_cast<ptrdiff_t>(bulk_field_numbers.size()) ||
          WireFormatLite::GetTagWireType(tag) !=
              WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        if (!WireFormatLite::SkipField(&input, tag, &header_out)) {
          return invalid(absl::StrCat("field ", field, " is malformed"));
        }
        continue;
      }
      uint32_t length = 0;
      if (!input.ReadVarint32(&length)) {
        return invalid(absl::StrCat("field ", field, " has a bad length"));
      }
      BulkBytesBuilder builder(&bulk[bulk_index]);
      while (length > 0) {
        const void* data = nullptr;
        int size = 0;
        if (!input.GetDirectBufferPointer(&data, &size)) {
          return invalid(absl::StrCat("field ", field, " is truncated"));
        }
        const int take = static_cast<int>(
            std::min<uint32_t>(length, static_cast<uint32_t>(size)));
        builder.Add(data, take);
        input.Skip(take);
        length -= take;
      }
    }
    if (!input.ConsumedEntireMessage()) return invalid("a tag is malformed");
  }
  if (!header->ParseFromString(header_bytes)) {
    return invalid("its fields do not match the message");
  }
  return bulk;
}

}  // namespace embedps::wire
