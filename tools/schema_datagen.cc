// schema_datagen: click logs with columns of every kind a feature schema
// takes (counts, reals, ids, lists, weighted lists), drawn from a planted
// model (tools/planted_schema.h), with the Bayes-optimal metrics of the
// test split.
//
//   schema_datagen --output_dir=DIR [--format=tsv|csv] [--lists=3 ...]
//
// Writes DIR/train.tsv and DIR/test.tsv (or .csv), each with a header row,
// and DIR/meta.json: the rows, the positive rate, bayes_test_auc,
// bayes_test_logloss, the separators and the columns.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "dense/eval_metrics.h"
#include "nlohmann/json.hpp"
#include "tools/planted_schema.h"

ABSL_FLAG(std::string, output_dir, "", "where the files go (created)");
ABSL_FLAG(int64_t, train_rows, 1000000, "training lines");
ABSL_FLAG(int64_t, test_rows, 100000, "test lines");
ABSL_FLAG(std::string, format, "tsv",
          "tsv (tab between columns, ',' in lists) or csv (',' between "
          "columns, '|' in lists)");
ABSL_FLAG(int32_t, counts, 4, "count columns (log-normal integers)");
ABSL_FLAG(int32_t, reals, 1, "real-valued columns (N(50, 10²))");
ABSL_FLAG(int32_t, ids, 6, "single-valued id columns");
ABSL_FLAG(int32_t, lists, 3, "multi-valued id columns (mean-pooled)");
ABSL_FLAG(int32_t, weighted_lists, 1,
          "multi-valued id columns with weights (token:weight)");
ABSL_FLAG(std::string, vocab, "100,1000,10000",
          "values per id column, cycled over ids, lists, weighted lists");
ABSL_FLAG(double, mean_length, 4.0, "mean list length (1 + Poisson)");
ABSL_FLAG(int32_t, max_length, 32, "longest list");
ABSL_FLAG(double, zipf, 1.05, "Zipf exponent of the value frequencies");
ABSL_FLAG(double, missing, 0.05, "probability that a feature is missing");
ABSL_FLAG(double, interaction_std, 0.4,
          "standard deviation of the sum of the pairwise interactions");
ABSL_FLAG(uint64_t, seed, 1, "seed of the planted model and the samples");

namespace embedps::tools {
namespace {

int Run() {
  const std::string dir = absl::GetFlag(FLAGS_output_dir);
  if (dir.empty()) {
    std::fprintf(stderr, "schema_datagen: --output_dir is required\n");
    return 2;
  }
  PlantedSchemaOptions options;
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format == "csv") {
    options.column_separator = ',';
    options.list_separator = '|';
  } else if (format != "tsv") {
    std::fprintf(stderr, "schema_datagen: --format must be tsv or csv\n");
    return 2;
  }
  options.counts = absl::GetFlag(FLAGS_counts);
  options.reals = absl::GetFlag(FLAGS_reals);
  options.singles = absl::GetFlag(FLAGS_ids);
  options.lists = absl::GetFlag(FLAGS_lists);
  options.weighted_lists = absl::GetFlag(FLAGS_weighted_lists);
  options.vocab.clear();
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_vocab), ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      std::fprintf(stderr, "schema_datagen: --vocab: '%s' is not a number\n",
                   std::string(part).c_str());
      return 2;
    }
    options.vocab.push_back(v);
  }
  options.mean_length = absl::GetFlag(FLAGS_mean_length);
  options.max_length = absl::GetFlag(FLAGS_max_length);
  options.zipf = absl::GetFlag(FLAGS_zipf);
  options.missing = absl::GetFlag(FLAGS_missing);
  options.interaction_std = absl::GetFlag(FLAGS_interaction_std);
  options.seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<PlantedSchema> schema = PlantedSchema::Create(options);
  if (!schema.ok()) {
    std::fprintf(stderr, "schema_datagen: %s\n",
                 std::string(schema.status().message()).c_str());
    return 2;
  }
  std::filesystem::create_directories(dir);
  const absl::Time start = absl::Now();
  int64_t positives = 0;
  std::vector<float> test_probability, test_label, test_logit;
  for (const auto& [stem, rows] :
       {std::pair<std::string, int64_t>{"train",
                                        absl::GetFlag(FLAGS_train_rows)},
        {"test", absl::GetFlag(FLAGS_test_rows)}}) {
    const std::string path = absl::StrCat(dir, "/", stem, ".", format);
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      std::perror(path.c_str());
      return 1;
    }
    const std::string header = schema->Header();
    std::fwrite(header.data(), 1, header.size(), file);
    for (int64_t r = 0; r < rows; ++r) {
      const PlantedSchema::Sample sample = schema->Next();
      positives += sample.label;
      std::fwrite(sample.line.data(), 1, sample.line.size(), file);
      if (stem == "test") {
        const double p = std::clamp(sample.probability, 1e-7, 1 - 1e-7);
        test_probability.push_back(static_cast<float>(p));
        test_label.push_back(static_cast<float>(sample.label));
        test_logit.push_back(static_cast<float>(std::log(p / (1 - p))));
      }
    }
    if (std::fclose(file) != 0) {
      std::perror(path.c_str());
      return 1;
    }
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
          {"seed", options.seed},
          {"header", true},
          {"column_separator", std::string(1, options.column_separator)},
          {"list_separator", std::string(1, options.list_separator)},
          {"weight_separator", ":"},
          {"columns", schema->DescribeColumns()},
      }
          .dump(1) +
      "\n";
  std::FILE* file = std::fopen(absl::StrCat(dir, "/meta.json").c_str(), "w");
  if (file == nullptr) return 1;
  std::fputs(meta.c_str(), file);
  std::fclose(file);
  std::printf("schema_datagen: %lld rows in %.1f s; bayes_test_auc %.5f\n",
              static_cast<long long>(total),
              absl::ToDoubleSeconds(absl::Now() - start),
              dense::RocAuc(test_probability, test_label));
  return 0;
}

}  // namespace
}  // namespace embedps::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "schema_datagen --output_dir=DIR: click logs with count, real, id, "
      "list and weighted-list columns from a planted model, with the "
      "Bayes-optimal test AUC and log loss");
  absl::ParseCommandLine(argc, argv);
  return embedps::tools::Run();
}
