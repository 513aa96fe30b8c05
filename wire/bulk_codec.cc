#include "wire/bulk_codec.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/float16.h"

namespace embedps::wire {

size_t ValueBytes(proto::ValueType type) {
  return type == proto::FLOAT16 ? sizeof(uint16_t) : sizeof(float);
}

const char* ValueTypeName(proto::ValueType type) {
  return type == proto::FLOAT16 ? "float16" : "float32";
}

absl::Status CheckValueType(int type) {
  if (proto::ValueType_IsValid(type)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown value_type ", type, " (FLOAT32 = 0, FLOAT16 = 1)"));
}

namespace {

// The keys of `rows`, packed for the wire.
grpc::Slice PackKeys(absl::Span<const uint64_t> keys,
                     absl::Span<const uint32_t> rows) {
  OwnedBytes bytes(rows.size() * sizeof(uint64_t));
  uint64_t* out = reinterpret_cast<uint64_t*>(bytes.data());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = keys[rows[i]];
  return std::move(bytes).ReleaseToSlice();
}

}  // namespace

grpc::ByteBuffer EncodePullRequest(const proto::PullRequest& header,
                                   absl::Span<const uint64_t> keys,
                                   absl::Span<const uint32_t> rows) {
  std::vector<BulkField> fields;
  fields.push_back(
      {proto::PullRequest::kKeysFieldNumber, PackKeys(keys, rows)});
  return SerializeBulkMessage(header, std::move(fields));
}

grpc::ByteBuffer EncodePushRequest(const proto::PushRequest& header,
                                   absl::Span<const uint64_t> keys,
                                   absl::Span<const uint32_t> rows,
                                   const float* grads, size_t dim) {
  const bool half = header.value_type() == proto::FLOAT16;
  const size_t value_bytes = ValueBytes(header.value_type());
  // The gradients, gathered (and narrowed) into the buffer that goes out.
  OwnedBytes gradients(rows.size() * dim * value_bytes);
  for (size_t k = 0; k < rows.size(); ++k) {
    const float* g = grads + static_cast<size_t>(rows[k]) * dim;
    char* out = gradients.data() + k * dim * value_bytes;
    if (half) {
      FloatsToHalves(absl::MakeConstSpan(g, dim),
                     reinterpret_cast<uint16_t*>(out));
    } else {
      std::memcpy(out, g, dim * sizeof(float));
    }
  }
  std::vector<BulkField> fields;
  fields.push_back(
      {proto::PushRequest::kKeysFieldNumber, PackKeys(keys, rows)});
  fields.push_back({proto::PushRequest::kGradientsFieldNumber,
                    std::move(gradients).ReleaseToSlice()});
  return SerializeBulkMessage(header, std::move(fields));
}

absl::Status DecodePullResponse(const grpc::ByteBuffer& buffer,
                                proto::ValueType type, size_t rows, size_t dim,
                                absl::FunctionRef<float*(size_t)> out_row) {
  proto::PullResponse header;
  absl::StatusOr<std::vector<BulkBytes>> bulk = ParseBulkMessage(
      buffer, {proto::PullResponse::kValuesFieldNumber}, &header);
  if (!bulk.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed PullResponse: ", bulk.status().message()));
  }
  const BulkBytes& values = (*bulk)[0];
  const size_t row_bytes = dim * ValueBytes(type);
  if (values.size() != rows * row_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("PullResponse of ", values.size(), " bytes for ", rows,
                     " rows of dim ", dim, " in ", ValueTypeName(type)));
  }
  std::vector<uint16_t> halves(type == proto::FLOAT16 ? dim : 0);
  for (size_t k = 0; k < rows; ++k) {
    float* out = out_row(k);
    if (type == proto::FLOAT16) {
      values.CopyTo(k * row_bytes, row_bytes, halves.data());
      HalvesToFloats(halves, out);
    } else {
      values.CopyTo(k * row_bytes, row_bytes, out);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PullRequestView> ParsePullRequest(
    const grpc::ByteBuffer& buffer) {
  PullRequestView view;
  absl::StatusOr<std::vector<BulkBytes>> bulk = ParseBulkMessage(
      buffer, {proto::PullRequest::kKeysFieldNumber}, &view.header);
  if (!bulk.ok()) return bulk.status();
  view.keys = std::move((*bulk)[0]);
  return view;
}

absl::StatusOr<PushRequestView> ParsePushRequest(
    const grpc::ByteBuffer& buffer) {
  PushRequestView view;
  absl::StatusOr<std::vector<BulkBytes>> bulk =
      ParseBulkMessage(buffer,
                       {proto::PushRequest::kKeysFieldNumber,
                        proto::PushRequest::kGradientsFieldNumber},
                       &view.header);
  if (!bulk.ok()) return bulk.status();
  view.keys = std::move((*bulk)[0]);
  view.gradients = std::move((*bulk)[1]);
  return view;
}

absl::StatusOr<size_t> KeyCount(const BulkBytes& bytes) {
  if (bytes.size() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keys must be packed little-endian uint64 (8 bytes each); got ",
        bytes.size(), " bytes, not a multiple of 8"));
  }
  return bytes.size() / sizeof(uint64_t);
}

std::vector<uint64_t> CopyKeys(const BulkBytes& bytes) {
  std::vector<uint64_t> keys(bytes.size() / sizeof(uint64_t));
  if (!keys.empty()) bytes.CopyTo(keys.data());
  return keys;
}

absl::StatusOr<Gradients> DecodeGradients(const BulkBytes& bytes,
                                          proto::ValueType type,
                                          size_t floats) {
  const size_t want = floats * ValueBytes(type);
  if (bytes.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("need ", want, " bytes of ", ValueTypeName(type),
                     " gradients, got ", bytes.size()));
  }
  Gradients out;
  // (Uninitialized copies: every float is written before it is read.)
  if (type == proto::FLOAT32 && bytes.chunks().size() == 1 &&
      reinterpret_cast<uintptr_t>(bytes.chunks()[0].data()) % alignof(float) ==
          0) {
    out.floats_ = absl::MakeConstSpan(
        reinterpret_cast<const float*>(bytes.chunks()[0].data()), floats);
  } else if (type == proto::FLOAT32) {
    out.owned_.reset(new float[floats]);
    if (floats > 0) bytes.CopyTo(out.owned_.get());
    out.floats_ = absl::MakeConstSpan(out.owned_.get(), floats);
  } else {
    const std::unique_ptr<uint16_t[]> halves(new uint16_t[floats]);
    if (floats > 0) bytes.CopyTo(halves.get());
    out.owned_.reset(new float[floats]);
    HalvesToFloats(absl::MakeConstSpan(halves.get(), floats), out.owned_.get());
    out.floats_ = absl::MakeConstSpan(out.owned_.get(), floats);
  }
  return out;
}

PullResponseBuilder::PullResponseBuilder(proto::ValueType type, size_t floats)
    : type_(type), bytes_(floats * ValueBytes(type)) {
  if (type == proto::FLOAT16) {
    // Uninitialized (the caller writes every value): zeroing tens of MB
    // first would be a pass for nothing.
    scratch_.reset(new float[floats]);
    values_ = absl::MakeSpan(scratch_.get(), floats);
  } else {
    values_ = absl::MakeSpan(reinterpret_cast<float*>(bytes_.data()), floats);
  }
}

grpc::ByteBuffer PullResponseBuilder::Finish() && {
  if (type_ == proto::FLOAT16) {
    FloatsToHalves(values_, reinterpret_cast<uint16_t*>(bytes_.data()));
  }
  std::vector<BulkField> fields;
  fields.push_back({proto::PullResponse::kValuesFieldNumber,
                    std::move(bytes_).ReleaseToSlice()});
  return SerializeBulkMessage(proto::PullResponse(), std::move(fields));
}

}  // namespace embedps::wire
