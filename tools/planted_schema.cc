#include "tools/planted_schema.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/hash_random.h"
#include "common/key_hash.h"

namespace embedps::tools {
namespace {

// What the columns of one sample add up to.
struct Logit {
  double value = 0;
  std::vector<double> hidden_sum;
  double hidden_square_sum = 0;

  explicit Logit(double b0, int k) : value(b0), hidden_sum(k, 0.0) {}

  // Σ_{c<d} <h_c, h_d> = (|Σ h|² − Σ |h|²) / 2, added at the end.
  double Final() const {
    double square_of_sum = 0;
    for (double x : hidden_sum) square_of_sum += x * x;
    return value + 0.5 * (square_of_sum - hidden_square_sum);
  }
};

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// A list's items and their weights (1/L each for a plain list).
struct Items {
  std::vector<int64_t> values;
  std::vector<double> weights;
};

}  // namespace

absl::StatusOr<PlantedSchema> PlantedSchema::Create(
    PlantedSchemaOptions options) {
  const PlantedSchemaOptions& o = options;
  if (o.counts < 0 || o.reals < 0 || o.singles < 0 || o.lists < 0 ||
      o.weighted_lists < 0) {
    return absl::InvalidArgumentError("column counts must be >= 0");
  }
  if (o.singles + o.lists + o.weighted_lists < 2) {
    return absl::InvalidArgumentError(
        "at least 2 id or list columns (the interactions are between them)");
  }
  if (o.vocab.empty() ||
      std::any_of(o.vocab.begin(), o.vocab.end(),
                  [](int64_t v) { return v < 1 || v > (int64_t{1} << 32); })) {
    return absl::InvalidArgumentError(
        "vocab: each value count must be in [1, 2^32]");
  }
  if (o.mean_length < 1 || o.max_length < 1) {
    return absl::InvalidArgumentError(
        "mean_length and max_length must be >= 1");
  }
  if (o.missing < 0 || o.missing >= 1 || o.hidden_dim < 1 || o.zipf <= 0) {
    return absl::InvalidArgumentError(
        "missing must be in [0, 1), hidden_dim >= 1, zipf > 0");
  }
  if (o.column_separator == o.list_separator || o.column_separator == ':' ||
      o.list_separator == ':' || o.column_separator == '\n' ||
      o.list_separator == '\n') {
    return absl::InvalidArgumentError(
        "the column and list separators must differ, and be neither ':' "
        "(weights) nor a newline");
  }
  return PlantedSchema(std::move(options));
}

PlantedSchema::PlantedSchema(PlantedSchemaOptions options)
    : options_(std::move(options)), rng_(MixPair(options_.seed, 7)) {
  const PlantedSchemaOptions& o = options_;
  b0_ = o.base_logit;
  for (int j = 0; j < o.counts; ++j) {
    Column c{absl::StrCat("i", j), Kind::kCount};
    c.mean = j % 4;
    c.weight = o.dense_weight_std * HashNormal(MixPair(o.seed, 300), j);
    b0_ -= c.weight * (c.mean + 0.2);  // centers the counts' part
    columns_.push_back(c);
  }
  for (int j = 0; j < o.reals; ++j) {
    Column c{absl::StrCat("r", j), Kind::kReal};
    c.weight = o.dense_weight_std * HashNormal(MixPair(o.seed, 301), j);
    columns_.push_back(c);
  }
  int sparse = 0;
  for (const auto& [count, prefix, kind] :
       {std::tuple<int, const char*, Kind>{o.singles, "s", Kind::kSingle},
        {o.lists, "m", Kind::kList},
        {o.weighted_lists, "w", Kind::kWeightedList}}) {
    for (int j = 0; j < count; ++j, ++sparse) {
      Column c{absl::StrCat(prefix, j), kind};
      c.vocab = o.vocab[sparse % o.vocab.size()];
      c.sparse_index = sparse;
      zipf_.emplace_back(c.vocab, o.zipf);
      columns_.push_back(c);
    }
  }
  // Var(Σ_{c<d} <h_c, h_d>) ≈ P·k·σ_h⁴ for P pairs of single ids (pooled
  // lists vary less).
  const double pairs = sparse * (sparse - 1) / 2.0;
  sigma_h_ = std::pow(
      o.interaction_std * o.interaction_std / (pairs * o.hidden_dim), 0.25);
}

double PlantedSchema::Bias(int sparse, int64_t value) const {
  return options_.bias_std *
         HashNormal(MixPair(options_.seed, 100 + sparse), value);
}

double PlantedSchema::Hidden(int sparse, int64_t value, int i) const {
  return sigma_h_ *
         HashNormal(MixPair(options_.seed, 200 + sparse), value * 64 + i);
}

// A token is the value scattered over 32 bits (times an odd constant,
// invertible mod 2^32) and masked per column: frequent values do not look
// alike, and a token decodes to its value.
constexpr uint32_t kScatter = 0x9E3779B1u;
constexpr uint32_t kGather = 0x0E8B2F51u;  // kScatter⁻¹ mod 2^32
static_assert(kScatter * kGather == 1u, "inverse mod 2^32");

std::string PlantedSchema::Token(int sparse, int64_t value) const {
  const uint32_t mask =
      static_cast<uint32_t>(MixPair(options_.seed ^ 0x7a3b, sparse));
  return absl::StrFormat("%08x",
                         (static_cast<uint32_t>(value) * kScatter) ^ mask);
}

int64_t PlantedSchema::Value(int sparse, absl::string_view token) const {
  uint32_t bits = 0;
  if (token.size() != 8 || !absl::SimpleHexAtoi(token, &bits)) return -1;
  const uint32_t mask =
      static_cast<uint32_t>(MixPair(options_.seed ^ 0x7a3b, sparse));
  return static_cast<int64_t>((bits ^ mask) * kGather);
}

std::string PlantedSchema::Header() const {
  std::string header = "label";
  for (const Column& c : columns_) {
    absl::StrAppend(&header, std::string(1, options_.column_separator), c.name);
  }
  return header + "\n";
}

PlantedSchema::Sample PlantedSchema::Next() {
  const PlantedSchemaOptions& o = options_;
  std::uniform_real_distribution<double> unit(0, 1);
  std::normal_distribution<double> normal(0, 1);
  std::poisson_distribution<int> extra(std::max(o.mean_length - 1, 1e-9));
  const std::string column_separator(1, o.column_separator);
  const std::string list_separator(1, o.list_separator);
  Logit logit(b0_, o.hidden_dim);
  std::string fields;
  for (const Column& c : columns_) {
    absl::StrAppend(&fields, column_separator);
    if (unit(rng_) < o.missing) continue;
    switch (c.kind) {
      case Kind::kCount: {
        const int64_t x = static_cast<int64_t>(
            std::floor(std::exp(c.mean + 1.2 * normal(rng_))));
        absl::StrAppend(&fields, x);
        logit.value += c.weight * std::log1p(static_cast<double>(x));
        break;
      }
      case Kind::kReal: {
        // What is written is what counts: the value rounded as printed.
        const std::string text =
            absl::StrFormat("%.3f", 50 + 10 * normal(rng_));
        double x = 0;
        (void)absl::SimpleAtod(text, &x);
        absl::StrAppend(&fields, text);
        logit.value += c.weight * (x - 50) / 10;
        break;
      }
      case Kind::kSingle:
      case Kind::kList:
      case Kind::kWeightedList: {
        const int length = c.kind == Kind::kSingle
                               ? 1
                               : std::min(o.max_length, 1 + extra(rng_));
        std::vector<int64_t> values(length);
        for (int64_t& v : values)
          v = static_cast<int64_t>(zipf_[c.sparse_index](rng_));
        std::vector<double> weights(length, 1.0 / length);
        if (c.kind == Kind::kWeightedList) {
          // Weights summing to 1, as printed (3 decimals).
          double sum = 0;
          for (double& w : weights) sum += (w = 0.2 + unit(rng_));
          for (double& w : weights) {
            (void)absl::SimpleAtod(absl::StrFormat("%.3f", w / sum), &w);
          }
        }
        std::vector<double> pooled(o.hidden_dim, 0.0);
        for (int i = 0; i < length; ++i) {
          if (i > 0) absl::StrAppend(&fields, list_separator);
          absl::StrAppend(&fields, Token(c.sparse_index, values[i]));
          if (c.kind == Kind::kWeightedList) {
            absl::StrAppend(&fields, ":", absl::StrFormat("%.3f", weights[i]));
          }
          logit.value += weights[i] * Bias(c.sparse_index, values[i]);
          for (int d = 0; d < o.hidden_dim; ++d) {
            pooled[d] += weights[i] * Hidden(c.sparse_index, values[i], d);
          }
        }
        for (int d = 0; d < o.hidden_dim; ++d) {
          logit.hidden_sum[d] += pooled[d];
          logit.hidden_square_sum += pooled[d] * pooled[d];
        }
        break;
      }
    }
  }
  Sample sample;
  sample.probability = Sigmoid(logit.Final());
  sample.label = unit(rng_) < sample.probability ? 1 : 0;
  sample.line = absl::StrCat(sample.label, fields, "\n");
  return sample;
}

absl::StatusOr<double> PlantedSchema::Probability(
    absl::string_view line) const {
  const PlantedSchemaOptions& o = options_;
  absl::ConsumeSuffix(&line, "\n");
  const std::vector<absl::string_view> fields =
      absl::StrSplit(line, o.column_separator);
  if (fields.size() != columns_.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat("a line of ", fields.size(),
                                                   " fields; the schema has ",
                                                   columns_.size() + 1));
  }
  Logit logit(b0_, o.hidden_dim);
  for (size_t f = 1; f < fields.size(); ++f) {
    const Column& c = columns_[f - 1];
    const absl::string_view field = fields[f];
    if (field.empty()) continue;
    double x = 0;
    switch (c.kind) {
      case Kind::kCount:
      case Kind::kReal:
        if (!absl::SimpleAtod(field, &x)) {
          return absl::InvalidArgumentError(
              absl::StrCat("column ", c.name, ": not a number"));
        }
        logit.value += c.kind == Kind::kCount ? c.weight * std::log1p(x)
                                              : c.weight * (x - 50) / 10;
        break;
      case Kind::kSingle:
      case Kind::kList:
      case Kind::kWeightedList: {
        const std::vector<absl::string_view> tokens =
            absl::StrSplit(field, o.list_separator);
        if (c.kind == Kind::kSingle && tokens.size() != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("column ", c.name, " holds one id"));
        }
        std::vector<double> pooled(o.hidden_dim, 0.0);
        for (absl::string_view token : tokens) {
          double weight = 1.0 / tokens.size();
          if (c.kind == Kind::kWeightedList) {
            const std::pair<absl::string_view, absl::string_view> parts =
                absl::StrSplit(token, ':');
            token = parts.first;
            if (!absl::SimpleAtod(parts.second, &weight)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("column ", c.name, ": a token without weight"));
            }
          }
          const int64_t value = Value(c.sparse_index, token);
          if (value < 0 || value >= c.vocab) {
            return absl::InvalidArgumentError(
                absl::StrCat("column ", c.name, ": token '",
                             token.substr(0, 16), "' is none of its values"));
          }
          logit.value += weight * Bias(c.sparse_index, value);
          for (int d = 0; d < o.hidden_dim; ++d) {
            pooled[d] += weight * Hidden(c.sparse_index, value, d);
          }
        }
        for (int d = 0; d < o.hidden_dim; ++d) {
          logit.hidden_sum[d] += pooled[d];
          logit.hidden_square_sum += pooled[d] * pooled[d];
        }
        break;
      }
    }
  }
  return Sigmoid(logit.Final());
}

nlohmann::ordered_json PlantedSchema::DescribeColumns() const {
  nlohmann::ordered_json columns = nlohmann::ordered_json::array();
  columns.push_back({{"name", "label"}, {"kind", "label"}});
  for (const Column& c : columns_) {
    nlohmann::ordered_json column = {{"name", c.name}};
    switch (c.kind) {
      case Kind::kCount:
        column["kind"] = "count";
        break;
      case Kind::kReal:
        column["kind"] = "real";
        break;
      case Kind::kSingle:
        column["kind"] = "id";
        break;
      case Kind::kList:
        column["kind"] = "list";
        break;
      case Kind::kWeightedList:
        column["kind"] = "weighted_list";
        break;
    }
    if (c.vocab > 0) column["vocab"] = c.vocab;
    columns.push_back(column);
  }
  return columns;
}

}  // namespace embedps::tools
