// model_benchmark: throughput of the dense model's training step.
//
//  1. The MLP of issue 5 (batch 2048, 512 inputs, hidden 256-128, one
//     logit) forward+backward on the CPU, in GEMM GFLOP/s, next to
//     cblas_sgemm alone replaying exactly the same GEMM calls (shapes and
//     transposes) in the same run: the ratio is what the model keeps of
//     the machine's BLAS.
//  2. The default DLRM (13 dense, bottom 512-256-64, 26 slots of dim 64
//     with one row per bag, top 512-256) at batch 8192: samples/s on the
//     CPU and, where a CUDA device exists, on the GPU with its MFU (model
//     FLOPs / time / the device's dense FP32 or TF32 peak).
//
// Not a test: prints a table. Threads are set explicitly (--threads).
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "dense/blas.h"
#include "dense/device.h"
#include "dense/model.h"

ABSL_FLAG(int32_t, threads, 2, "BLAS threads for every CPU figure");
ABSL_FLAG(int32_t, mlp_batch, 2048, "MLP batch");
ABSL_FLAG(int32_t, mlp_input, 512, "MLP input width");
ABSL_FLAG(std::string, mlp_hidden, "256,128", "MLP hidden widths");
ABSL_FLAG(int32_t, dlrm_batch, 8192, "DLRM batch");
ABSL_FLAG(double, seconds, 3.0, "minimum seconds per measurement");
ABSL_FLAG(std::string, devices, "cpu,cuda",
          "backends to run the DLRM on (cuda is skipped without a device)");
ABSL_FLAG(bool, allow_tf32, false, "cuda: allow TF32 GEMMs");
ABSL_FLAG(double, gpu_peak_tflops, 0,
          "the GPU's dense peak for the kernels used (FP32, or TF32 with "
          "--allow_tf32); 0: look it up by device name");

namespace embedps::dense {
namespace {

struct GemmCall {
  bool ta, tb;
  int m, n, k;
};

// The GEMMs CpuModel runs for a stack of layers (forward, weight
// gradient, and input gradient for every layer but the first).
std::vector<GemmCall> MlpGemms(const ModelLayout& layout, int batch) {
  std::vector<GemmCall> calls;
  for (const LayerShape& l : layout.top) {
    calls.push_back({false, true, batch, l.out, l.in});
  }
  for (size_t i = layout.top.size(); i-- > 0;) {
    const LayerShape& l = layout.top[i];
    calls.push_back({true, false, l.out, l.in, batch});
    if (i > 0) calls.push_back({false, false, batch, l.in, l.out});
  }
  return calls;
}

double Flops(const std::vector<GemmCall>& calls) {
  double flops = 0;
  for (const GemmCall& c : calls) flops += 2.0 * c.m * c.n * c.k;
  return flops;
}

// Runs `body` repeatedly for at least `seconds` (after one warm-up call);
// returns seconds per call.
template <typename F>
double TimePerCall(double seconds, F body) {
  body();
  int calls = 0;
  const absl::Time start = absl::Now();
  absl::Duration elapsed;
  do {
    body();
    ++calls;
    elapsed = absl::Now() - start;
  } while (absl::ToDoubleSeconds(elapsed) < seconds);
  return absl::ToDoubleSeconds(elapsed) / calls;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

void MlpVersusSgemm() {
  std::vector<int> hidden;
  for (absl::string_view w :
       absl::StrSplit(absl::GetFlag(FLAGS_mlp_hidden), ',')) {
    hidden.push_back(std::stoi(std::string(w)));
  }
  const int batch = absl::GetFlag(FLAGS_mlp_batch);
  const int input = absl::GetFlag(FLAGS_mlp_input);
  const ModelSpec spec = MlpModelSpec(input, hidden, 1);
  const ModelLayout layout = LayoutOf(spec);
  const std::vector<GemmCall> calls = MlpGemms(layout, batch);
  const double flops = Flops(calls);

  // sgemm alone: the same calls over buffers of the same sizes.
  size_t largest = 0;
  for (const GemmCall& c : calls) {
    largest = std::max({largest, static_cast<size_t>(c.m) * c.k,
                        static_cast<size_t>(c.k) * c.n,
                        static_cast<size_t>(c.m) * c.n});
  }
  const std::vector<float> a = Random(largest, 1), b = Random(largest, 2);
  std::vector<float> c(largest);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const double sgemm_time = TimePerCall(seconds, [&] {
    for (const GemmCall& g : calls) {
      Gemm<float>(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), b.data(), 0.0f,
                  c.data());
    }
  });

  auto model = CreateModel(spec, {}).value();
  const std::vector<float> x = Random(static_cast<size_t>(batch) * input, 3);
  std::vector<float> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = static_cast<float>(i % 2);
  Batch<float> data;
  data.size = batch;
  data.dense = x;
  data.labels = y;
  const double model_time = TimePerCall(seconds, [&] {
    if (!model->TrainStep(data, {}).ok()) std::abort();
  });
  std::string shape = std::to_string(input);
  for (int h : hidden) shape += "-" + std::to_string(h);
  std::printf(
      "MLP fwd+bwd  batch %d  %s-1  threads %d:  model %.1f GFLOP/s  "
      "sgemm same shapes %.1f GFLOP/s  ratio %.2f\n",
      batch, shape.c_str(), absl::GetFlag(FLAGS_threads),
      flops / model_time / 1e9, flops / sgemm_time / 1e9,
      sgemm_time / model_time);
}

// Dense FP32 (and TF32 tensor) peaks, TFLOP/s, by device name.
double LookUpPeakTflops(const std::string& name, bool tf32) {
  struct Peak {
    const char* name;
    double fp32, tf32;
  };
  // NVIDIA data sheets, dense (no sparsity).
  const Peak peaks[] = {{"H100 PCIe", 51.2, 378},
                        {"H100", 66.9, 494.7},  // SXM5
                        {"H200", 66.9, 494.7},
                        {"A100", 19.5, 156}};
  for (const Peak& p : peaks) {
    if (name.find(p.name) != std::string::npos) return tf32 ? p.tf32 : p.fp32;
  }
  return 0;
}

void Dlrm(Backend backend) {
  ModelSpec spec;
  spec.num_dense = 13;
  spec.bottom = {512, 256, 64};
  spec.embedding_dim = 64;
  spec.slots.assign(26, Pooling::kSum);
  spec.top = {512, 256};
  const ModelLayout layout = LayoutOf(spec);
  ModelOptions options;
  options.backend = backend;
  options.allow_tf32 = absl::GetFlag(FLAGS_allow_tf32);
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(spec, options);
  if (!model.ok()) {
    std::printf("DLRM %s: skipped (%s)\n", BackendName(backend),
                model.status().ToString().c_str());
    return;
  }
  const int batch = absl::GetFlag(FLAGS_dlrm_batch);
  const std::vector<float> x = Random(static_cast<size_t>(batch) * 13, 4);
  std::vector<float> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = static_cast<float>(i % 2);
  std::vector<int32_t> offsets(batch + 1);
  for (int i = 0; i <= batch; ++i) offsets[i] = i;  // one row per bag
  std::vector<std::vector<float>> rows, grads;
  Batch<float> data;
  data.size = batch;
  data.dense = x;
  data.labels = y;
  for (int s = 0; s < 26; ++s) {
    rows.push_back(Random(static_cast<size_t>(batch) * 64, 10 + s));
    grads.emplace_back(rows.back().size());
  }
  std::vector<absl::Span<float>> spans;
  for (int s = 0; s < 26; ++s) {
    data.slots.push_back({rows[s], offsets});
    spans.push_back(absl::MakeSpan(grads[s]));
  }
  const double flops_per_sample = TrainingFlopsPerSample(spec, layout, 1.0);
  const double step = TimePerCall(absl::GetFlag(FLAGS_seconds), [&] {
    if (!(*model)->TrainStep(data, spans).ok()) std::abort();
  });
  const double samples = batch / step;
  std::printf(
      "DLRM fwd+bwd  %s  batch %d  (%.2f MFLOP/sample):  %.0f samples/s  "
      "%.1f GFLOP/s",
      BackendName(backend), batch, flops_per_sample / 1e6, samples,
      samples * flops_per_sample / 1e9);
  if (backend == Backend::kCuda) {
    const auto devices = ListCudaDevices();
    const std::string name = devices.ok() ? (*devices)[0].name : "?";
    double peak = absl::GetFlag(FLAGS_gpu_peak_tflops);
    if (peak <= 0) peak = LookUpPeakTflops(name, options.allow_tf32);
    std::printf("  on %s", name.c_str());
    if (peak > 0) {
      std::printf("  MFU %.1f%% of %.1f TFLOP/s %s",
                  100.0 * samples * flops_per_sample / (peak * 1e12), peak,
                  options.allow_tf32 ? "TF32" : "FP32");
    } else {
      std::printf("  (MFU: give --gpu_peak_tflops)");
    }
    std::printf("  (host<->device copies of the batch included)");
  }
  std::printf("\n");
}

}  // namespace
}  // namespace embedps::dense

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  embedps::dense::SetBlasThreads(absl::GetFlag(FLAGS_threads));
  embedps::dense::MlpVersusSgemm();
  for (absl::string_view device :
       absl::StrSplit(absl::GetFlag(FLAGS_devices), ',')) {
    auto backend = embedps::dense::ParseBackend(device);
    if (!backend.ok()) {
      std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
      return 2;
    }
    embedps::dense::Dlrm(*backend);
  }
  return 0;
}
