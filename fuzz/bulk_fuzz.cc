// Fuzz target: the bulk messages of Pull and Push as a server and a client
// parse them (wire/bulk_codec.h, wire/bulk_message.h): requests, key
// counts, gradients in both value types, and Pull responses, from received
// bytes split into one to three slices as gRPC may deliver them.
//
// Input: byte 0 picks the slicing and the dimension, byte 1 the value type
// and the rows of a response; the rest is the message.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "wire/bulk_codec.h"
#include "wire/bulk_message.h"

namespace embedps::wire {
namespace {

grpc::ByteBuffer Received(const uint8_t* data, size_t size, uint8_t split) {
  std::vector<grpc::Slice> slices;
  const size_t cuts = split % 3;
  size_t begin = 0;
  for (size_t i = 0; i < cuts && size > 0; ++i) {
    const size_t end = begin + (size - begin) * (1 + (split >> 2) % 7) / 8;
    slices.emplace_back(data + begin, end - begin);
    begin = end;
  }
  slices.emplace_back(data + begin, size - begin);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

void DecodePushGradients(const PushRequestView& view, size_t dim) {
  const absl::StatusOr<size_t> keys = KeyCount(view.keys);
  if (!keys.ok() || !CheckValueType(view.header.value_type()).ok()) return;
  (void)CopyKeys(view.keys);
  const absl::StatusOr<wire::Gradients> gradients =
      DecodeGradients(view.gradients, view.header.value_type(), *keys * dim);
  if (gradients.ok()) {
    float sum = 0;
    for (const float g : gradients->floats()) sum += g;
    (void)sum;
  }
}

void Run(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const uint8_t split = data[0];
  const uint8_t shape = data[1];
  data += 2;
  size -= 2;
  const grpc::ByteBuffer buffer = Received(data, size, split);
  const size_t dim = 1 + split % 17;

  if (absl::StatusOr<PullRequestView> pull = ParsePullRequest(buffer);
      pull.ok()) {
    if (KeyCount(pull->keys).ok()) (void)CopyKeys(pull->keys);
  }
  if (absl::StatusOr<PushRequestView> push = ParsePushRequest(buffer);
      push.ok()) {
    DecodePushGradients(*push, dim);
  }

  const proto::ValueType type =
      (shape & 1) != 0 ? proto::FLOAT16 : proto::FLOAT32;
  const size_t rows = shape >> 1;
  std::vector<float> out(rows * dim);
  (void)DecodePullResponse(buffer, type, rows, dim,
                           [&](size_t row) { return out.data() + row * dim; });

  proto::PushRequest header;
  (void)ParseBulkMessage(buffer,
                         {proto::PushRequest::kKeysFieldNumber,
                          proto::PushRequest::kGradientsFieldNumber, 15},
                         &header);
}

}  // namespace
}  // namespace embedps::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  embedps::wire::Run(data, size);
  return 0;
}
