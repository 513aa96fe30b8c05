// A planted model over columns of every kind a feature schema takes, and
// samples drawn from it: click logs whose Bayes-optimal AUC is known, so
// that a job reading its own columns can be checked against the truth
// (tools/schema_datagen writes them; tools/datagen is the Criteo layout).
//
// Columns, in this order after the label (names in brackets):
//  - counts [i0..]: ⌊exp(N(j mod 4, 1.2²))⌋, weight w_j on log1p(x)
//    (what a log1p transform recovers);
//  - reals [r0..]: N(50, 10²) with 3 decimals, weight w on (x − 50) / 10
//    (what standardizing recovers);
//  - single-valued ids [s0..]: one token;
//  - lists [m0..]: 1 + Poisson(mean_length − 1) tokens (at most
//    max_length), pooled by their mean;
//  - weighted lists [w0..]: as lists, each token "token:weight" with
//    weights that sum to 1 in the list, pooled by the weighted sum.
// A token is 8 hex digits standing for value v of its column; values are
// Zipf-distributed over the column's vocabulary. Any feature is missing
// (an empty field) with probability `missing`. Each (column, value) has a
// hidden bias b ~ N(0, σ_b²) and vector h ~ N(0, σ_h²·I_k); a column's
// pooled bias and vector are its tokens' (mean, or weighted sum), and
//   logit = b0 + Σ_dense w·x̃ + Σ_c b_c + Σ_{c<d} <h_c, h_d>,
//   label ~ Bernoulli(sigmoid(logit))
// — DLRM's shape: first-order terms, pairwise dot products of pooled
// embeddings, a dense part.
//
// Deterministic: the same options give the same bytes.
// Thread safety: one thread at a time per PlantedSchema.
#ifndef EMBEDPS_TOOLS_PLANTED_SCHEMA_H_
#define EMBEDPS_TOOLS_PLANTED_SCHEMA_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/key_distributions.h"
#include "nlohmann/json.hpp"

namespace embedps::tools {

struct PlantedSchemaOptions {
  // Columns of each kind. Defaults: 4 counts, 1 real, 6 ids, 3 lists, 1
  // weighted list.
  int counts = 4;
  int reals = 1;
  int singles = 6;
  int lists = 3;
  int weighted_lists = 1;
  // Values per id column, cycled over the id, list and weighted-list
  // columns in that order. Default: 100, 1000, 10000.
  std::vector<int64_t> vocab = {100, 1000, 10000};
  double zipf = 1.05;
  // List lengths: 1 + Poisson(mean_length − 1), at most max_length.
  double mean_length = 4.0;
  int max_length = 32;
  double missing = 0.05;
  double bias_std = 0.35;
  // Standard deviation of the sum of the pairwise interactions (sets σ_h).
  double interaction_std = 0.4;
  int hidden_dim = 4;
  double dense_weight_std = 0.4;
  double base_logit = -1.3;
  // Between columns, and between a list's tokens. Defaults: tab and ','.
  char column_separator = '\t';
  char list_separator = ',';
  uint64_t seed = 1;
};

class PlantedSchema {
 public:
  // INVALID_ARGUMENT naming the option that cannot work.
  static absl::StatusOr<PlantedSchema> Create(PlantedSchemaOptions options);

  struct Sample {
    int label = 0;
    // The planted probability of a click.
    double probability = 0;
    // The line, with its newline.
    std::string line;
  };
  // The next sample.
  Sample Next();

  // The header line (column names), with its newline.
  std::string Header() const;

  // The planted probability of `line` (as Next wrote it, without the
  // header): INVALID_ARGUMENT for a line of another shape or a token no
  // column has.
  absl::StatusOr<double> Probability(absl::string_view line) const;

  // The columns for meta.json: name, kind, and for ids and lists their
  // vocabulary.
  nlohmann::ordered_json DescribeColumns() const;

  const PlantedSchemaOptions& options() const { return options_; }

 private:
  enum class Kind { kCount, kReal, kSingle, kList, kWeightedList };
  struct Column {
    std::string name;
    Kind kind;
    int64_t vocab = 0;     // ids and lists
    double weight = 0;     // counts and reals
    double mean = 0;       // counts: of log(x)
    int sparse_index = 0;  // ids and lists: which hidden table
  };
  explicit PlantedSchema(PlantedSchemaOptions options);

  double Bias(int sparse, int64_t value) const;
  double Hidden(int sparse, int64_t value, int i) const;
  std::string Token(int sparse, int64_t value) const;
  // The value a token of sparse column `sparse` stands for; -1 if none.
  int64_t Value(int sparse, absl::string_view token) const;

  PlantedSchemaOptions options_;
  std::vector<Column> columns_;
  std::vector<bench::ZipfRanks> zipf_;  // by sparse index
  double sigma_h_ = 0;
  double b0_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace embedps::tools

#endif  // EMBEDPS_TOOLS_PLANTED_SCHEMA_H_
