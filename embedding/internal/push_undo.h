// Refusing a Push whose update would leave a row NaN or infinite.
//
// Gradients are checked for finiteness before a Push starts, but finite
// gradients can still overflow a row (a huge gradient drives an embedding
// to -inf, or an Adagrad accumulator to +inf). Every update's result is
// checked; the first that is not finite refuses the Push, the row is put
// back, and the rest of the batch is skipped.
//
// Rows updated earlier in the same Push are put back too when the Push is
// logged: each updated row's payload (embedding and optimizer state)
// before and after the update is kept, and RollBack restores every logged
// row whose payload is still the one the Push wrote, in memory or in the
// spill tier (a row that a concurrent Push updated in between keeps both
// updates and is counted). Rows the Push created (kAlways admission) are
// removed again. Logging costs a copy of every updated row, so a Push is
// logged only where an overflow is possible at all: when a gradient
// exceeds kLoggedGradient in magnitude, or once any row of the table has
// held a value beyond kLargeValue. Below both, one update moves a value by
// at most a small multiple of the learning rate (SGD, Adagrad) or of the
// gradient's bound over epsilon (Adam, FTRL), far from float's range.
//
// Thread safety: a log belongs to one Push on one thread.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_PUSH_UNDO_H_
#define EMBEDPS_EMBEDDING_INTERNAL_PUSH_UNDO_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace embedps::embedding_internal {

struct TableCore;

// A Push with a gradient beyond this magnitude (2^16) is logged.
constexpr uint32_t kLoggedGradientBits = 0x47800000u;
// Once a row holds a value beyond this magnitude (2^64), every later Push
// of the table is logged.
constexpr uint32_t kLargeValueBits = 0x5f800000u;

// True if some of the n floats is beyond `limit_bits` (the bits of a
// positive finite float) in magnitude, or NaN: |value| > limit iff adding
// 0x80000000 - limit - 1 to its magnitude bits carries into bit 31. SSE2
// where the target has it (GCC's -O2 does not vectorise the plain loop).
inline bool AnyBeyond(const float* values, size_t n, uint32_t limit_bits) {
  const uint32_t offset = 0x80000000u - limit_bits - 1;
  uint32_t any = 0;
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i magnitude = _mm_set1_epi32(0x7fffffff);
  const __m128i add = _mm_set1_epi32(static_cast<int>(offset));
  __m128i a = _mm_setzero_si128();
  __m128i b = _mm_setzero_si128();
  for (; i + 8 <= n; i += 8) {
    const __m128i x =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(values + i));
    const __m128i y =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(values + i + 4));
    a = _mm_or_si128(a, _mm_add_epi32(_mm_and_si128(x, magnitude), add));
    b = _mm_or_si128(b, _mm_add_epi32(_mm_and_si128(y, magnitude), add));
  }
  any = static_cast<uint32_t>(
            _mm_movemask_ps(_mm_castsi128_ps(_mm_or_si128(a, b))))
            ? 0x80000000u
            : 0;
#endif
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, sizeof(bits));
    any |= (bits & 0x7fffffffu) + offset;
  }
  return (any & 0x80000000u) != 0;
}

// True if none of the n floats is NaN or infinite.
inline bool AllFinite(const float* values, size_t n) {
  return !AnyBeyond(values, n, 0x7f7fffffu);  // FLT_MAX
}

class PushUndoLog {
 public:
  // Starts one Push of rows with `payload_floats` floats of embedding and
  // optimizer state; `logged`: keep every update for RollBack.
  void Reset(int32_t payload_floats, bool logged);

  // The Push created the row of `key`: a rollback removes it.
  void NoteCreated(uint64_t key) {
    if (logged_) created_.insert(key);
  }

  // Before an update of the row of `key` in stripe `stripe`: copies its
  // payload.
  void Before(uint32_t stripe, uint64_t key, const float* payload) {
    current_ = Entry{stripe, key};
    if (logged_) {
      before_.insert(before_.end(), payload, payload + payload_floats_);
    } else {
      std::memcpy(current_before_.data(), payload,
                  sizeof(float) * payload_floats_);
    }
  }

  // After that update: false, with the log refused and the row put back,
  // if the result is not finite.
  bool After(float* payload) {
    const size_t n = static_cast<size_t>(payload_floats_);
    const bool large = AnyBeyond(payload, n, kLargeValueBits);
    if (logged_) {
      entries_.push_back(current_);
      after_.insert(after_.end(), payload, payload + n);
    }
    if (large) {
      saw_large_value_ = true;
      if (!AllFinite(payload, n)) return Refuse(payload);
    }
    ++updates_;
    return true;
  }

  bool refused() const { return refused_; }
  bool logged() const { return logged_; }
  // Some result held a value beyond kLargeValueBits.
  bool saw_large_value() const { return saw_large_value_; }

  // Logged only: puts back every row updated before the refusal whose
  // payload is still the one the Push wrote, taking each stripe's lock;
  // returns the rows left as they are. Errors only from the spill tier.
  absl::StatusOr<uint64_t> RollBack(TableCore& core);

  // INVALID_ARGUMENT naming the key and table, and what stayed applied
  // (`not_restored` rows of a logged Push; every row before the refused one
  // of an unlogged Push). REQUIRES: refused().
  absl::Status RefusalStatus(const std::string& table,
                             uint64_t not_restored) const;

 private:
  bool Refuse(float* payload);

  struct Entry {
    uint32_t stripe;
    uint64_t key;
  };
  int32_t payload_floats_ = 0;
  bool logged_ = false;
  bool refused_ = false;
  bool saw_large_value_ = false;
  uint64_t updates_ = 0;  // finished updates before the refusal
  Entry current_{};
  std::vector<float> current_before_;
  std::vector<float> refused_result_;
  // Logged: every update, before and after.
  std::vector<Entry> entries_;
  std::vector<float> before_;
  std::vector<float> after_;
  absl::flat_hash_set<uint64_t> created_;
};

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_PUSH_UNDO_H_
