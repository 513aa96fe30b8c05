// The description of one embedding table: its shape, how rows start, how
// they learn, which keys get rows, and when rows leave. Plain structs with
// defaults in code; the server translates its proto into these.
//
// `ValidateTableSpec` is the single check of a spec: INVALID_ARGUMENT,
// naming the field, for anything a table cannot honour.
#ifndef EMBEDPS_EMBEDDING_TABLE_SPEC_H_
#define EMBEDPS_EMBEDDING_TABLE_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace embedps::embedding {

struct InitializerSpec {
  enum class Kind { kZeros, kConstant, kUniform, kNormal };
  // Default: kUniform over [-0.01, 0.01].
  Kind kind = Kind::kUniform;
  // kConstant: every element. Default: 0.
  float value = 0.0f;
  // kUniform: elements drawn from [low, high). Default: [-0.01, 0.01).
  float low = -0.01f;
  float high = 0.01f;
  // kNormal: N(mean, stddev²). Default: N(0, 0.01²).
  float mean = 0.0f;
  float stddev = 0.01f;
  // kNormal: redraw values farther than 2·stddev from the mean (the usual
  // truncated normal). Default: false.
  bool truncated = false;
};

struct OptimizerSpec {
  enum class Kind { kSgd, kAdagrad, kRowWiseAdagrad, kAdam, kFtrl };
  // Default: kAdagrad.
  Kind kind = Kind::kAdagrad;
  // Step size of SGD, Adagrad, row-wise Adagrad and Adam. Default: 0.01.
  float learning_rate = 0.01f;
  // Adagrad / row-wise Adagrad: starting value of the accumulator; FTRL:
  // starting value of n.
  // Default: 0.
  float initial_accumulator = 0.0f;
  // Adagrad, row-wise Adagrad, Adam: added to the denominator. Default: 1e-8.
  float epsilon = 1e-8f;
  // Adam moments' decay rates, each in [0, 1). Default: 0.9, 0.999.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  // FTRL-Proximal (McMahan et al. 2013): learning-rate α and β, and the L1
  // and L2 strengths λ1, λ2. Default: α=0.05, β=1, λ1=0, λ2=0.
  float ftrl_alpha = 0.05f;
  float ftrl_beta = 1.0f;
  float ftrl_l1 = 0.0f;
  float ftrl_l2 = 0.0f;
};

struct AdmissionSpec {
  enum class Kind {
    // Every key gets a row on its first Pull.
    kAlways,
    // A key gets a row on its `min_count`-th Pull, counted in a
    // count-min sketch of `sketch_counters` 8-bit counters.
    kCount,
    // Each Pull of an unadmitted key admits it with `probability`.
    kProbability,
  };
  // Default: kAlways.
  Kind kind = Kind::kAlways;
  // kCount: Pulls needed, in [1, 255]. Default: 2.
  uint32_t min_count = 2;
  // kCount: counters in the sketch (all stripes together; 1 byte each);
  // bounds the memory the filter takes. Default: 1 << 22 (4 MiB).
  uint64_t sketch_counters = uint64_t{1} << 22;
  // kProbability: in (0, 1]. Default: 0.1.
  double probability = 0.1;
};

struct EvictionSpec {
  enum class TtlUnit { kSteps, kSeconds };
  // Rows untouched (no Pull or Push) for longer than this are removed by
  // `Table::SweepExpired`. 0 turns TTL off. Default: 0.
  uint64_t ttl = 0;
  // What `ttl` counts: training steps (as passed with each Pull/Push) or
  // wall-clock seconds. Default: kSteps.
  TtlUnit ttl_unit = TtlUnit::kSteps;
  // At most this many rows (memory and spill tier together): a sweep
  // removes the least recently touched rows beyond it, by last touch in
  // `ttl_unit` (Table::SweepExpired). 0: no cap. Default: 0.
  uint64_t max_rows = 0;
};

struct TableSpec {
  // Non-empty; letters, digits, '_', '-', '.', '/'; at most 128 bytes.
  std::string name;
  // Floats per row, in [1, 4096].
  int32_t dim = 0;
  // Seed of the initializer: with the key it fixes every initial row.
  // Default: 0.
  uint64_t seed = 0;
  InitializerSpec initializer;
  OptimizerSpec optimizer;
  AdmissionSpec admission;
  EvictionSpec eviction;
  // Resident bytes the table should stay within; 0 means no budget.
  // Exceeding it is reported in TableStats (the spill tier acts on it).
  // Default: 0.
  uint64_t memory_budget_bytes = 0;
  // Lock stripes: a power of two in [1, 4096]. Default: 64.
  int32_t num_stripes = 64;
  // Rows the table expects to hold: a hint. Table::Create reserves and
  // commits memory for them at once (each stripe its share, with room for
  // the hash's imbalance), and sizes the stripes' indexes for them, so
  // that rows created later write into memory the kernel has already
  // zeroed (first touch of fresh pages costs the training path otherwise)
  // and no index grows mid-training. More rows still fit, as without it.
  // With memory_budget_bytes, at most what the budget holds is committed.
  // At most num_stripes × 2^24 (a table's most rows). Default: 0 (memory is
  // taken as rows come).
  uint64_t expected_rows = 0;
};

// OK, or INVALID_ARGUMENT naming the first field that is out of range.
absl::Status ValidateTableSpec(const TableSpec& spec);

// Floats of optimizer state per row for `spec` (0 for SGD; dim for
// Adagrad; 1 for row-wise Adagrad; 2·dim + 1 for Adam; 2·dim for FTRL).
int32_t OptimizerStateFloats(const OptimizerSpec& spec, int32_t dim);

const char* InitializerKindName(InitializerSpec::Kind kind);
const char* OptimizerKindName(OptimizerSpec::Kind kind);

// The byte layout of one row outside memory (the spill tier, checkpoints,
// a worker's hot-row tier), little-endian: last_touch (uint32), access
// count (uint32), the embedding (dim floats), the optimizer state (floats).
inline size_t RowRecordBytes(int32_t dim, int32_t state_floats) {
  return 8 + sizeof(float) * (static_cast<size_t>(dim) + state_floats);
}
// A record's access count saturates here (a row keeps two flag bits beside
// it in memory).
constexpr uint32_t kMaxRecordAccessCount = (uint32_t{1} << 30) - 1;

}  // namespace embedps::embedding

#endif  // EMBEDPS_EMBEDDING_TABLE_SPEC_H_
