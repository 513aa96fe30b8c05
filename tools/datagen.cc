// datagen: writes Criteo-format click logs drawn from a planted model, and
// the Bayes-optimal metrics of its test split.
//
// Format (the Criteo display-advertising text format): per line
//   label \t I1..I13 \t C1..C26
// with integer features I (empty when missing) and categorical features C
// as 8 hex digits (empty when missing).
//
// The planted model: categorical slot s draws value v from Zipf(zipf_s)
// over vocab_s values; each (s, v) has a hidden bias b[s,v] ~ N(0, σ_b²)
// and a hidden vector h[s,v] ~ N(0, σ_h²·I_k). Integer feature j is
// ⌊exp(N(μ_j, 1.2²))⌋ with weight w_j on log(1 + x). Then
//   logit = b0 + Σ_s b[s,v_s] + Σ_{s<t} <h[s,v_s], h[t,v_t]> + Σ_j
//   w_j·log1p(x_j) label ~ Bernoulli(sigmoid(logit))
// — first-order terms, pairwise dot-product interactions (what DLRM's
// interaction layer models) and a dense part. The true probabilities give
// the Bayes-optimal AUC and log loss of the test split, written to
// <output_dir>/meta.json, so that a training run knows its ceiling.
//
// Deterministic: the same flags give the same bytes.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/key_distributions.h"
#include "common/hash_random.h"
#include "common/key_hash.h"
#include "dense/eval_metrics.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, output_dir, "",
          "where train.txt, test.txt and "
          "meta.json go (created if needed)");
ABSL_FLAG(int64_t, train_rows, 1000000, "training lines");
ABSL_FLAG(int64_t, test_rows, 100000, "test lines");
ABSL_FLAG(std::string, vocab, "10,30,100,1000",
          "values per categorical slot, cycled over the 26 slots");
ABSL_FLAG(double, zipf, 1.05, "Zipf exponent of the value frequencies");
ABSL_FLAG(double, bias_std, 0.35, "σ_b of the per-value biases");
ABSL_FLAG(double, interaction_std, 0.3,
          "standard deviation of the sum of all pairwise interactions "
          "(sets σ_h)");
ABSL_FLAG(int32_t, hidden_dim, 4, "k, the dimension of the hidden vectors");
ABSL_FLAG(double, dense_weight_std, 0.4, "σ of the integer features' weights");
ABSL_FLAG(double, missing, 0.05, "probability that a feature is missing");
ABSL_FLAG(double, base_logit, -1.3, "b0");
ABSL_FLAG(uint64_t, seed, 1, "seed of the planted model and the samples");

namespace embedps::tools {
namespace {

constexpr int kDense = 13;
constexpr int kSlots = 26;

struct PlantedModel {
  std::vector<int64_t> vocab;          // per slot
  std::vector<bench::ZipfRanks> zipf;  // per slot
  std::vector<double> dense_weight, dense_mean;
  int k = 4;
  double sigma_b = 0, sigma_h = 0, b0 = 0;
  uint64_t seed = 0;

  double Bias(int slot, int64_t value) const {
    return sigma_b * HashNormal(MixPair(seed, 100 + slot), value);
  }
  double Hidden(int slot, int64_t value, int i) const {
    return sigma_h * HashNormal(MixPair(seed, 200 + slot), value * 64 + i);
  }
  // The 8 hex digits that stand for (slot, value) in the file.
  static std::string Token(uint64_t seed, int slot, int64_t value) {
    return absl::StrFormat(
        "%08x", static_cast<uint32_t>(
                    MixPair(seed ^ 0xc17e0, slot * 1000003ull + value)));
  }
};

struct Row {
  int label = 0;
  double probability = 0;
  std::string line;
};

class Generator {
 public:
  // `missing`: the probability that a feature is left empty.
  Generator(const PlantedModel& model, double missing)
      : model_(model), missing_(missing), rng_(MixPair(model.seed, 7)) {}

  Row Next() {
    const PlantedModel& m = model_;
    std::uniform_real_distribution<double> unit(0, 1);
    std::normal_distribution<double> normal(0, 1);
    double logit = m.b0;
    std::string line;
    std::string fields;
    for (int j = 0; j < kDense; ++j) {
      absl::StrAppend(&fields, "\t");
      if (unit(rng_) < missing_) continue;
      const int64_t x = static_cast<int64_t>(
          std::floor(std::exp(m.dense_mean[j] + 1.2 * normal(rng_))));
      absl::StrAppend(&fields, x);
      logit += m.dense_weight[j] * std::log1p(static_cast<double>(x));
    }
    // Values (−1: missing) and their hidden vectors.
    std::vector<double> hidden_sum(m.k, 0.0);
    double hidden_square_sum = 0;
    for (int s = 0; s < kSlots; ++s) {
      absl::StrAppend(&fields, "\t");
      if (unit(rng_) < missing_) continue;
      const int64_t v = static_cast<int64_t>(m.zipf[s](rng_));
      absl::StrAppend(&fields, PlantedModel::Token(m.seed, s, v));
      logit += m.Bias(s, v);
      for (int i = 0; i < m.k; ++i) {
        const double h = m.Hidden(s, v, i);
        hidden_sum[i] += h;
        hidden_square_sum += h * h;
      }
    }
    // Σ_{s<t} <h_s, h_t> = (|Σ h|² − Σ |h|²) / 2.
    double square_of_sum = 0;
    for (double x : hidden_sum) square_of_sum += x * x;
    logit += 0.5 * (square_of_sum - hidden_square_sum);
    Row row;
    row.probability = 1.0 / (1.0 + std::exp(-logit));
    row.label = unit(rng_) < row.probability ? 1 : 0;
    row.line = absl::StrCat(row.label, fields, "\n");
    return row;
  }

 private:
  const PlantedModel& model_;
  const double missing_;
  std::mt19937_64 rng_;
};

int Run() {
  const std::string dir = absl::GetFlag(FLAGS_output_dir);
  if (dir.empty()) {
    std::fprintf(stderr, "datagen: --output_dir is required\n");
    return 2;
  }
  std::vector<int64_t> vocab_cycle;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_vocab), ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      std::fprintf(stderr, "datagen: --vocab: '%s' is not a positive integer\n",
                   std::string(part).c_str());
      return 2;
    }
    vocab_cycle.push_back(v);
  }
  std::filesystem::create_directories(dir);

  PlantedModel m;
  m.seed = absl::GetFlag(FLAGS_seed);
  m.k = absl::GetFlag(FLAGS_hidden_dim);
  m.sigma_b = absl::GetFlag(FLAGS_bias_std);
  m.b0 = absl::GetFlag(FLAGS_base_logit);
  // Var(Σ_{s<t} <h_s,h_t>) = P·k·σ_h⁴ for P pairs (independent slots).
  const double pairs = kSlots * (kSlots - 1) / 2.0;
  m.sigma_h = std::pow(
      std::pow(absl::GetFlag(FLAGS_interaction_std), 2) / (pairs * m.k), 0.25);
  for (int s = 0; s < kSlots; ++s) {
    m.vocab.push_back(vocab_cycle[s % vocab_cycle.size()]);
    m.zipf.emplace_back(m.vocab.back(), absl::GetFlag(FLAGS_zipf));
  }
  for (int j = 0; j < kDense; ++j) {
    m.dense_mean.push_back(j % 4);
    m.dense_weight.push_back(absl::GetFlag(FLAGS_dense_weight_std) *
                             HashNormal(MixPair(m.seed, 300), j));
    // Center the dense part around the base logit.
    m.b0 -= m.dense_weight.back() * (m.dense_mean.back() + 0.2);
  }

  Generator generator(m, absl::GetFlag(FLAGS_missing));
  const absl::Time start = absl::Now();
  int64_t positives = 0;
  std::vector<float> test_probability, test_label;
  for (const auto& [name, rows] :
       {std::pair<std::string, int64_t>{"train.txt",
                                        absl::GetFlag(FLAGS_train_rows)},
        {"test.txt", absl::GetFlag(FLAGS_test_rows)}}) {
    const std::string path = absl::StrCat(dir, "/", name);
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      std::perror(path.c_str());
      return 1;
    }
    const bool test = name == "test.txt";
    for (int64_t r = 0; r < rows; ++r) {
      const Row row = generator.Next();
      positives += row.label;
      std::fwrite(row.line.data(), 1, row.line.size(), file);
      if (test) {
        test_probability.push_back(static_cast<float>(row.probability));
        test_label.push_back(static_cast<float>(row.label));
      }
    }
    if (std::fclose(file) != 0) {
      std::perror(path.c_str());
      return 1;
    }
  }
  std::vector<float> test_logit(test_probability.size());
  for (size_t i = 0; i < test_logit.size(); ++i) {
    const double p = std::clamp<double>(test_probability[i], 1e-7, 1 - 1e-7);
    test_logit[i] = static_cast<float>(std::log(p / (1 - p)));
  }
  const int64_t total =
      absl::GetFlag(FLAGS_train_rows) + absl::GetFlag(FLAGS_test_rows);
  const std::string meta =
      nlohmann::ordered_json{
          {"train_rows", absl::GetFlag(FLAGS_train_rows)},
          {"test_rows", absl::GetFlag(FLAGS_test_rows)},
          {"positive_rate",
           total > 0 ? static_cast<double>(positives) / total : 0.0},
          {"bayes_test_auc", dense::RocAuc(test_probability, test_label)},
          {"bayes_test_logloss", dense::MeanLogLoss(test_logit, test_label)},
          {"seed", m.seed},
      }
          .dump() +
      "\n";
  std::FILE* file = std::fopen(absl::StrCat(dir, "/meta.json").c_str(), "w");
  if (file == nullptr) return 1;
  std::fputs(meta.c_str(), file);
  std::fclose(file);
  std::printf("datagen: %d rows in %.1f s; %s", static_cast<int>(total),
              absl::ToDoubleSeconds(absl::Now() - start), meta.c_str());
  return 0;
}

}  // namespace
}  // namespace embedps::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "datagen --output_dir=DIR: Criteo-format train/test files from a "
      "planted model, with the Bayes-optimal test AUC and log loss");
  absl::ParseCommandLine(argc, argv);
  return embedps::tools::Run();
}
