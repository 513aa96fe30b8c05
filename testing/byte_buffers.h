// Test helper: the bytes of a grpc::ByteBuffer, all its slices in order.
#ifndef EMBEDPS_TESTING_BYTE_BUFFERS_H_
#define EMBEDPS_TESTING_BYTE_BUFFERS_H_

#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"

namespace embedps::testing {

// The buffer's bytes (a copy). A buffer that cannot be read fails the test.
inline std::string ByteBufferContents(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

}  // namespace embedps::testing

#endif  // EMBEDPS_TESTING_BYTE_BUFFERS_H_
