#include "dense/model.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/file_io.h"
#include "common/status_matchers.h"
#include "dense/dense_model.pb.h"
#include "dense/device.h"
#include "dense/unique_rows_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

ModelSpec Spec() {
  ModelSpec spec;
  spec.num_dense = 4;
  spec.bottom = {8, 4};
  spec.embedding_dim = 4;
  spec.slots = {Pooling::kSum, Pooling::kMean};
  spec.top = {8};
  spec.seed = 3;
  return spec;
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<float> Parameters(Model& model) {
  std::vector<float> p(model.num_parameters());
  EXPECT_OK(model.GetParameters(absl::MakeSpan(p)));
  return p;
}

TEST(ModelTest, CpuTrainStepAndOptimizer) {
  ASSERT_OK_AND_ASSIGN(auto model, CreateModel(Spec(), {}));
  EXPECT_EQ(model->backend(), Backend::kCpu);
  std::vector<float> none(2);
  EXPECT_THAT(model->LastLogits(absl::MakeSpan(none)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(model->gradient_buffer().size(), model->num_parameters());
  const std::vector<float> dense = {1, 2, 3, 4, -1, 0, 1, 0};
  const std::vector<float> labels = {1, 0};
  const std::vector<float> rows0(3 * 4, 0.5f), rows1(1 * 4, -0.25f);
  const std::vector<int32_t> offsets0 = {0, 2, 3}, offsets1 = {0, 0, 1};
  Batch<float> batch;
  batch.size = 2;
  batch.dense = dense;
  batch.labels = labels;
  batch.slots = {{rows0, offsets0}, {rows1, offsets1}};
  std::vector<float> g0(rows0.size()), g1(rows1.size());
  const std::vector<absl::Span<float>> spans = {absl::MakeSpan(g0),
                                                absl::MakeSpan(g1)};
  ASSERT_OK_AND_ASSIGN(float loss, model->TrainStep(batch, spans));
  EXPECT_GT(loss, 0.0f);
  const std::vector<float> before = Parameters(*model);
  DenseOptimizerSpec sgd;
  sgd.kind = DenseOptimizerSpec::Kind::kSgd;
  sgd.learning_rate = 0.5;
  // The model's own optimizer (the host's, on the CPU).
  ASSERT_OK_AND_ASSIGN(auto optimizer, model->NewOptimizer(sgd));
  ASSERT_OK(model->ApplyOptimizer(*optimizer));
  EXPECT_EQ(optimizer->steps(), 1);
  DenseOptimizerSpec bad = sgd;
  bad.learning_rate = -1;
  EXPECT_THAT(
      model->NewOptimizer(bad).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("learning_rate")));
  std::vector<float> gradients(model->num_parameters());
  ASSERT_OK(model->GetGradients(absl::MakeSpan(gradients)));
  const std::vector<float> after = Parameters(*model);
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_FLOAT_EQ(after[i], before[i] - 0.5f * gradients[i]);
  }
  std::vector<float> train_logits(2), logits(2);
  ASSERT_OK(model->LastLogits(absl::MakeSpan(train_logits)));
  EXPECT_THAT(model->LastLogits(absl::MakeSpan(train_logits).subspan(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(model->Predict(batch, absl::MakeSpan(logits)));
  EXPECT_THAT(model->Predict(batch, absl::MakeSpan(logits).subspan(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->SetParameters(std::vector<float>(3)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs")));
}

// The unique-rows step is the bag-layout step around the host stages,
// bit for bit: same loss, logits, dense gradients and per-row sums.
TEST(ModelTest, CpuUniqueRowsStepIsTheBagStepWithItsRowsSummed) {
  ModelSpec spec = Spec();
  spec.slots = {Pooling::kSum, Pooling::kMean, Pooling::kSum};
  ASSERT_OK_AND_ASSIGN(auto unique_model, CreateModel(spec, {}));
  ASSERT_OK_AND_ASSIGN(auto bag_model, CreateModel(spec, {}));
  const float scale = 0.5f;
  for (uint32_t step = 0; step < 3; ++step) {
    const RandomUniqueRows data(spec, 37, step);
    const UniqueRowsBatch batch = data.Batch();
    std::vector<float> got[2] = {std::vector<float>(data.table_floats(0)),
                                 std::vector<float>(data.table_floats(1))};
    bool ready = false;
    ASSERT_OK_AND_ASSIGN(
        const float loss,
        unique_model->TrainStepOnUniqueRows(
            batch, scale, {absl::MakeSpan(got[0]), absl::MakeSpan(got[1])},
            [&] { ready = true; }));
    EXPECT_TRUE(ready);
    std::vector<std::vector<float>> want;
    ASSERT_OK_AND_ASSIGN(const float want_loss,
                         data.BagStepWithHostSums(*bag_model, scale, want));
    EXPECT_EQ(loss, want_loss);
    EXPECT_EQ(got[0], want[0]);
    EXPECT_EQ(got[1], want[1]);
    std::vector<float> g_unique(unique_model->num_parameters()),
        g_bag(bag_model->num_parameters());
    ASSERT_OK(unique_model->GetGradients(absl::MakeSpan(g_unique)));
    ASSERT_OK(bag_model->GetGradients(absl::MakeSpan(g_bag)));
    EXPECT_EQ(g_unique, g_bag);
    std::vector<float> p_unique(37), p_bag(37);
    ASSERT_OK(
        unique_model->PredictOnUniqueRows(batch, absl::MakeSpan(p_unique)));
    ASSERT_OK(bag_model->Predict(data.BagLayout(), absl::MakeSpan(p_bag)));
    EXPECT_EQ(p_unique, p_bag);
  }
  // A batch that does not fit changes nothing.
  const RandomUniqueRows data(spec, 5, 9);
  UniqueRowsBatch bad = data.Batch();
  bad.slots.pop_back();
  std::vector<float> before(unique_model->num_parameters()),
      after(unique_model->num_parameters());
  ASSERT_OK(unique_model->GetGradients(absl::MakeSpan(before)));
  std::vector<float> g0(data.table_floats(0)), g1(data.table_floats(1));
  EXPECT_THAT(unique_model->TrainStepOnUniqueRows(
                  bad, 1.0f, {absl::MakeSpan(g0), absl::MakeSpan(g1)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slots")));
  EXPECT_THAT(unique_model->TrainStepOnUniqueRows(data.Batch(), 1.0f,
                                                  {absl::MakeSpan(g0)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1 table gradients for 2 tables")));
  ASSERT_OK(unique_model->GetGradients(absl::MakeSpan(after)));
  EXPECT_EQ(before, after);
}

TEST(ModelTest, CpuHostArraysHoldABatchLikeAnyMemory) {
  ASSERT_OK_AND_ASSIGN(auto model, CreateModel(Spec(), {}));
  ASSERT_OK_AND_ASSIGN(auto twin, CreateModel(Spec(), {}));
  const std::vector<float> dense = {1, 2, 3, 4, -1, 0, 1, 0};
  const std::vector<float> labels = {1, 0};
  const std::vector<float> rows0(2 * 4, 0.5f), rows1(2 * 4, -0.25f);
  const std::vector<int32_t> offsets = {0, 1, 2};
  ASSERT_OK_AND_ASSIGN(HostArray a0, model->NewHostArray(rows0.size()));
  ASSERT_OK_AND_ASSIGN(HostArray a1, model->NewHostArray(rows1.size()));
  ASSERT_OK_AND_ASSIGN(HostArray g0, model->NewHostArray(rows0.size()));
  ASSERT_OK_AND_ASSIGN(HostArray g1, model->NewHostArray(rows1.size()));
  std::copy(rows0.begin(), rows0.end(), a0.data());
  std::copy(rows1.begin(), rows1.end(), a1.data());
  Batch<float> in_arrays, in_vectors;
  in_arrays.size = in_vectors.size = 2;
  in_arrays.dense = in_vectors.dense = dense;
  in_arrays.labels = in_vectors.labels = labels;
  in_arrays.slots = {{a0.span(), offsets}, {a1.span(), offsets}};
  in_vectors.slots = {{rows0, offsets}, {rows1, offsets}};
  std::vector<float> v0(rows0.size()), v1(rows1.size());
  ASSERT_OK_AND_ASSIGN(float loss,
                       model->TrainStep(in_arrays, {g0.span(), g1.span()}));
  ASSERT_OK_AND_ASSIGN(
      float twin_loss,
      twin->TrainStep(in_vectors, {absl::MakeSpan(v0), absl::MakeSpan(v1)}));
  EXPECT_EQ(loss, twin_loss);
  EXPECT_EQ(std::vector<float>(g0.data(), g0.data() + g0.size()), v0);
  EXPECT_EQ(std::vector<float>(g1.data(), g1.data() + g1.size()), v1);
  EXPECT_THAT(model->NewHostArray(size_t{1} << 62),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(ModelTest, CudaBackendWithoutDeviceIsFailedPrecondition) {
  ModelOptions options;
  options.backend = Backend::kCuda;
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(Spec(), options);
  if (ListCudaDevices().ok()) {
    EXPECT_OK(model.status());  // model_gpu_test covers it
  } else {
    EXPECT_THAT(model, StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  EXPECT_THAT(ParseBackend("tpu"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tpu")));
  EXPECT_EQ(ParseBackend("cuda").value(), Backend::kCuda);
}

TEST(ModelTest, SaveAndLoadRoundTrip) {
  ASSERT_OK_AND_ASSIGN(auto a, CreateModel(Spec(), {}));
  std::vector<float> p = Parameters(*a);
  for (size_t i = 0; i < p.size(); ++i) p[i] += 0.001f * i;
  ASSERT_OK(a->SetParameters(p));
  const std::string path = TempPath("roundtrip.dense");
  ASSERT_OK(SaveParameters(*a, 42, path));
  ModelSpec other_seed = Spec();
  other_seed.seed = 99;
  ASSERT_OK_AND_ASSIGN(auto b, CreateModel(other_seed, {}));
  ASSERT_OK_AND_ASSIGN(int64_t step, LoadParameters(path, *b));
  EXPECT_EQ(step, 42);
  EXPECT_EQ(Parameters(*b), p);
}

TEST(ModelTest, OptimizerStateTravelsWithTheParameters) {
  ASSERT_OK_AND_ASSIGN(auto a, CreateModel(Spec(), {}));
  DenseOptimizerSpec adam;
  adam.kind = DenseOptimizerSpec::Kind::kAdam;
  ASSERT_OK_AND_ASSIGN(auto optimizer,
                       DenseOptimizer::Create(adam, a->num_parameters()));
  std::vector<float> p = Parameters(*a);
  std::vector<float> g(p.size(), 0.25f);
  ASSERT_OK(optimizer->Step(absl::MakeSpan(p), g));
  const std::string with_state = TempPath("with_state.dense");
  const std::string without_state = TempPath("without_state.dense");
  ASSERT_OK(SaveParameters(*a, 7, with_state, optimizer.get()));
  ASSERT_OK(SaveParameters(*a, 7, without_state));
  ASSERT_OK_AND_ASSIGN(auto b, CreateModel(Spec(), {}));
  ASSERT_OK_AND_ASSIGN(auto restored,
                       DenseOptimizer::Create(adam, b->num_parameters()));
  ASSERT_OK(LoadParameters(with_state, *b, restored.get()).status());
  EXPECT_EQ(*restored->SaveState(), *optimizer->SaveState());
  EXPECT_THAT(LoadParameters(without_state, *b, restored.get()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("no optimizer state")));
  // Loading without asking for the state is fine either way.
  EXPECT_OK(LoadParameters(with_state, *b).status());
}

// The input layout is stored as given and read back from the bytes that
// travel (checkpoints, publications); a file saved without one reads back
// an empty layout; bytes that are no such file are DATA_LOSS.
TEST(ModelTest, TheInputLayoutTravelsWithTheParameters) {
  ASSERT_OK_AND_ASSIGN(auto a, CreateModel(Spec(), {}));
  InputLayout layout;
  layout.set_header("label\tprice\tuser");
  InputLayout::Standardized* price = layout.add_standardized();
  price->set_column("price");
  price->set_mean(12.5);
  price->set_inv_std(0.25);
  const std::string path = TempPath("layout.dense");
  ASSERT_OK(SaveParameters(*a, 3, path, nullptr, &layout));
  ASSERT_OK_AND_ASSIGN(const std::string saved, ReadWholeFile(path));
  ASSERT_OK_AND_ASSIGN(const InputLayout read, ReadInputLayout(saved, path));
  EXPECT_EQ(read.SerializeAsString(), layout.SerializeAsString());
  // The parameters load as from any file.
  ASSERT_OK_AND_ASSIGN(auto b, CreateModel(Spec(), {}));
  ASSERT_OK_AND_ASSIGN(const int64_t step, LoadParameters(path, *b));
  EXPECT_EQ(step, 3);

  ASSERT_OK_AND_ASSIGN(const std::string plain, SerializeParameters(*a, 3));
  ASSERT_OK_AND_ASSIGN(const InputLayout none, ReadInputLayout(plain, "p"));
  EXPECT_TRUE(none.header().empty());
  EXPECT_EQ(none.standardized_size(), 0);
  EXPECT_THAT(ReadInputLayout("\xff\xff\xff", "junk"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("junk")));
  EXPECT_THAT(ReadInputLayout("", "nothing"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("nothing has format version 0")));
}

TEST(ModelTest, BadFilesAreRefusedAndChangeNothing) {
  ASSERT_OK_AND_ASSIGN(auto a, CreateModel(Spec(), {}));
  const std::string path = TempPath("good.dense");
  ASSERT_OK(SaveParameters(*a, 1, path));
  const std::string good = ReadFile(path);

  ModelSpec other_seed = Spec();
  other_seed.seed = 5;
  ASSERT_OK_AND_ASSIGN(auto b, CreateModel(other_seed, {}));
  const std::vector<float> before = Parameters(*b);

  EXPECT_THAT(LoadParameters(TempPath("missing.dense"), *b),
              StatusIs(absl::StatusCode::kNotFound));

  const std::string truncated = TempPath("truncated.dense");
  WriteFile(truncated, good.substr(0, good.size() / 2));
  EXPECT_THAT(LoadParameters(truncated, *b),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(truncated)));

  const std::string corrupt = TempPath("corrupt.dense");
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;
  WriteFile(corrupt, flipped);
  EXPECT_THAT(LoadParameters(corrupt, *b),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("checksum")));

  ModelSpec wider = Spec();
  wider.top = {9};
  ASSERT_OK_AND_ASSIGN(auto c, CreateModel(wider, {}));
  EXPECT_THAT(
      LoadParameters(path, *c),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("top=8")));
  EXPECT_EQ(Parameters(*b), before);
}

}  // namespace
}  // namespace embedps::dense
