// Server-side optimizers, applied to one row at a time.
//
// Each matches its textbook update in float32 arithmetic (optimizer_test
// checks 200 random steps against a float64 reference):
//   SGD               w -= lr·g
//   Adagrad           a += g²;            w -= lr·g / (√a + ε)
//   row-wise Adagrad  a += mean(g²);      w -= lr·g / (√a + ε)   (one a per
//   row) Adam              t += 1; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
//                     w -= lr·(m / (1-β1ᵗ)) / (√(v / (1-β2ᵗ)) + ε)
//                     (t counts this row's updates: "lazy" Adam)
//   FTRL-Proximal     σ = (√(n+g²) - √n)/α; z += g - σ·w; n += g²;
//                     w = |z| ≤ λ1 ? 0 : -(z - sgn(z)·λ1) / ((β + √n)/α + λ2)
//                     (z starts at 0, n at initial_accumulator)
//
// Thread safety: a RowOptimizer is immutable; callers serialise updates of
// the same row.
#ifndef EMBEDPS_EMBEDDING_OPTIMIZER_H_
#define EMBEDPS_EMBEDDING_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "embedding/table_spec.h"

namespace embedps::embedding {

class RowOptimizer {
 public:
  // REQUIRES: ValidateTableSpec accepted a spec holding `spec` and `dim`.
  static std::unique_ptr<RowOptimizer> Create(const OptimizerSpec& spec,
                                              int32_t dim);
  virtual ~RowOptimizer() = default;

  // Floats of state per row (OptimizerStateFloats(spec, dim)).
  virtual int32_t state_floats() const = 0;

  // Writes the state of a new row into `state` (state_floats() floats).
  virtual void InitState(float* state) const = 0;

  // Applies one update with gradient `grad` to the row (`weights`: dim
  // floats, `state`: state_floats() floats). The three do not overlap.
  virtual void Apply(float* __restrict weights, float* __restrict state,
                     const float* __restrict grad) const = 0;
};

}  // namespace embedps::embedding

#endif  // EMBEDPS_EMBEDDING_OPTIMIZER_H_
