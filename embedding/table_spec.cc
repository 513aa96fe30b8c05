#include "embedding/table_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace embedps::embedding {
namespace {

constexpr int32_t kMaxDim = 4096;
constexpr size_t kMaxNameBytes = 128;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' || c == '/';
}

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("table spec field '", field, "' ", why));
}

bool IsFinite(float x) { return std::isfinite(x); }

absl::Status ValidateInitializer(const InitializerSpec& init) {
  switch (init.kind) {
    case InitializerSpec::Kind::kZeros:
      return absl::OkStatus();
    case InitializerSpec::Kind::kConstant:
      if (!IsFinite(init.value)) {
        return Invalid("initializer.value", "must be finite");
      }
      return absl::OkStatus();
    case InitializerSpec::Kind::kUniform:
      if (!IsFinite(init.low) || !IsFinite(init.high) ||
          !(init.low < init.high)) {
        return Invalid("initializer.low/high",
                       absl::StrCat("must be finite with low < high, got [",
                                    init.low, ", ", init.high, ")"));
      }
      return absl::OkStatus();
    case InitializerSpec::Kind::kNormal:
      if (!IsFinite(init.mean)) {
        return Invalid("initializer.mean", "must be finite");
      }
      if (!IsFinite(init.stddev) || !(init.stddev > 0)) {
        return Invalid(
            "initializer.stddev",
            absl::StrCat("must be finite and > 0, got ", init.stddev));
      }
      return absl::OkStatus();
  }
  return Invalid("initializer.kind", "is not a known initializer");
}

absl::Status ValidateOptimizer(const OptimizerSpec& opt) {
  const auto positive = [](absl::string_view field, float v) {
    if (!IsFinite(v) || !(v > 0)) {
      return Invalid(field, absl::StrCat("must be finite and > 0, got ", v));
    }
    return absl::OkStatus();
  };
  const auto non_negative = [](absl::string_view field, float v) {
    if (!IsFinite(v) || v < 0) {
      return Invalid(field, absl::StrCat("must be finite and >= 0, got ", v));
    }
    return absl::OkStatus();
  };
  switch (opt.kind) {
    case OptimizerSpec::Kind::kSgd:
      return positive("optimizer.learning_rate", opt.learning_rate);
    case OptimizerSpec::Kind::kAdagrad:
    case OptimizerSpec::Kind::kRowWiseAdagrad: {
      RETURN_IF_ERROR(positive("optimizer.learning_rate", opt.learning_rate));
      RETURN_IF_ERROR(non_negative("optimizer.initial_accumulator",
                                   opt.initial_accumulator));
      RETURN_IF_ERROR(positive("optimizer.epsilon", opt.epsilon));
      return absl::OkStatus();
    }
    case OptimizerSpec::Kind::kAdam: {
      RETURN_IF_ERROR(positive("optimizer.learning_rate", opt.learning_rate));
      RETURN_IF_ERROR(positive("optimizer.epsilon", opt.epsilon));
      if (!IsFinite(opt.beta1) || opt.beta1 < 0 || opt.beta1 >= 1) {
        return Invalid("optimizer.beta1",
                       absl::StrCat("must be in [0, 1), got ", opt.beta1));
      }
      if (!IsFinite(opt.beta2) || opt.beta2 < 0 || opt.beta2 >= 1) {
        return Invalid("optimizer.beta2",
                       absl::StrCat("must be in [0, 1), got ", opt.beta2));
      }
      return absl::OkStatus();
    }
    case OptimizerSpec::Kind::kFtrl: {
      RETURN_IF_ERROR(positive("optimizer.ftrl_alpha", opt.ftrl_alpha));
      RETURN_IF_ERROR(non_negative("optimizer.ftrl_beta", opt.ftrl_beta));
      RETURN_IF_ERROR(non_negative("optimizer.ftrl_l1", opt.ftrl_l1));
      RETURN_IF_ERROR(non_negative("optimizer.ftrl_l2", opt.ftrl_l2));
      if (opt.ftrl_beta == 0 && opt.ftrl_l2 == 0) {
        return Invalid("optimizer.ftrl_beta",
                       "and ftrl_l2 cannot both be 0 (the first update would "
                       "divide by zero)");
      }
      return absl::OkStatus();
    }
  }
  return Invalid("optimizer.kind", "is not a known optimizer");
}

absl::Status ValidateAdmission(const AdmissionSpec& adm) {
  switch (adm.kind) {
    case AdmissionSpec::Kind::kAlways:
      return absl::OkStatus();
    case AdmissionSpec::Kind::kCount:
      if (adm.min_count < 1 || adm.min_count > 255) {
        return Invalid(
            "admission.min_count",
            absl::StrCat("must be in [1, 255], got ", adm.min_count));
      }
      if (adm.sketch_counters < 1024 ||
          adm.sketch_counters > (uint64_t{1} << 34)) {
        return Invalid(
            "admission.sketch_counters",
            absl::StrCat("must be in [1024, 2^34], got ", adm.sketch_counters));
      }
      return absl::OkStatus();
    case AdmissionSpec::Kind::kProbability:
      if (!std::isfinite(adm.probability) || !(adm.probability > 0) ||
          adm.probability > 1) {
        return Invalid(
            "admission.probability",
            absl::StrCat("must be in (0, 1], got ", adm.probability));
      }
      return absl::OkStatus();
  }
  return Invalid("admission.kind", "is not a known admission policy");
}

}  // namespace

absl::Status ValidateTableSpec(const TableSpec& spec) {
  if (spec.name.empty()) return Invalid("name", "must not be empty");
  if (spec.name.size() > kMaxNameBytes) {
    return Invalid("name", absl::StrCat("must be at most ", kMaxNameBytes,
                                        " bytes, got ", spec.name.size()));
  }
  for (char c : spec.name) {
    if (!IsNameChar(c)) {
      return Invalid("name",
                     absl::StrCat("may hold only letters, digits, '_', '-', "
                                  "'.', '/'; got '",
                                  spec.name, "'"));
    }
  }
  if (spec.dim < 1 || spec.dim > kMaxDim) {
    return Invalid(
        "dim", absl::StrCat("must be in [1, ", kMaxDim, "], got ", spec.dim));
  }
  if (spec.num_stripes < 1 || spec.num_stripes > 4096 ||
      (spec.num_stripes & (spec.num_stripes - 1)) != 0) {
    return Invalid("num_stripes",
                   absl::StrCat("must be a power of two in [1, 4096], got ",
                                spec.num_stripes));
  }
  // A stripe holds at most 2^24 rows (row_layout.h's kMaxRowsPerStripe).
  if (spec.expected_rows > (uint64_t{1} << 24) * spec.num_stripes) {
    return Invalid(
        "expected_rows",
        absl::StrCat("must be at most num_stripes × 2^24 = ",
                     (uint64_t{1} << 24) * spec.num_stripes,
                     " (a table's most rows), got ", spec.expected_rows));
  }
  RETURN_IF_ERROR(ValidateInitializer(spec.initializer));
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer));
  RETURN_IF_ERROR(ValidateAdmission(spec.admission));
  if (spec.eviction.ttl_unit != EvictionSpec::TtlUnit::kSteps &&
      spec.eviction.ttl_unit != EvictionSpec::TtlUnit::kSeconds) {
    return Invalid("eviction.ttl_unit", "is not a known unit");
  }
  if (spec.eviction.ttl > 0xFFFFFFF0u) {
    return Invalid("eviction.ttl", absl::StrCat("must be below 2^32 - 16, got ",
                                                spec.eviction.ttl));
  }
  return absl::OkStatus();
}

int32_t OptimizerStateFloats(const OptimizerSpec& spec, int32_t dim) {
  switch (spec.kind) {
    case OptimizerSpec::Kind::kSgd:
      return 0;
    case OptimizerSpec::Kind::kAdagrad:
      return dim;
    case OptimizerSpec::Kind::kRowWiseAdagrad:
      return 1;
    case OptimizerSpec::Kind::kAdam:
      return 2 * dim + 1;
    case OptimizerSpec::Kind::kFtrl:
      return 2 * dim;
  }
  return 0;
}

const char* InitializerKindName(InitializerSpec::Kind kind) {
  switch (kind) {
    case InitializerSpec::Kind::kZeros:
      return "zeros";
    case InitializerSpec::Kind::kConstant:
      return "constant";
    case InitializerSpec::Kind::kUniform:
      return "uniform";
    case InitializerSpec::Kind::kNormal:
      return "normal";
  }
  return "unknown";
}

const char* OptimizerKindName(OptimizerSpec::Kind kind) {
  switch (kind) {
    case OptimizerSpec::Kind::kSgd:
      return "sgd";
    case OptimizerSpec::Kind::kAdagrad:
      return "adagrad";
    case OptimizerSpec::Kind::kRowWiseAdagrad:
      return "rowwise_adagrad";
    case OptimizerSpec::Kind::kAdam:
      return "adam";
    case OptimizerSpec::Kind::kFtrl:
      return "ftrl";
  }
  return "unknown";
}

}  // namespace embedps::embedding
