// IEEE 754 binary16 ("half") conversion for the wire's FLOAT16 encoding.
//
// Float to half rounds to nearest even; overflow gives ±inf; NaN stays NaN
// (quiet). Uses the F16C instructions where the build targets them
// (-march=x86-64-v3), and a bit-exact portable version otherwise; the two
// agree on every input (float16_test checks all 65536 halves and millions of
// floats). Thread safety: pure functions.
#ifndef EMBEDPS_WIRE_FLOAT16_H_
#define EMBEDPS_WIRE_FLOAT16_H_

#include <cstdint>

#include "absl/types/span.h"

namespace embedps::wire {

uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t half);

// Batch forms; `out` holds in.size() elements.
void FloatsToHalves(absl::Span<const float> in, uint16_t* out);
void HalvesToFloats(absl::Span<const uint16_t> in, float* out);

namespace float16_internal {
// The portable versions, exposed for the test that compares them with F16C.
uint16_t PortableFloatToHalf(float value);
float PortableHalfToFloat(uint16_t half);
}  // namespace float16_internal

}  // namespace embedps::wire

#endif  // EMBEDPS_WIRE_FLOAT16_H_
