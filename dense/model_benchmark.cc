// model_benchmark: throughput of the dense model's training step.
//
//  1. The MLP of issue 5 (batch 2048, 512 inputs, hidden 256-128, one
//     logit) forward+backward on the CPU, in GEMM GFLOP/s, next to
//     OpenBLAS's cblas_sgemm alone (threaded by itself) replaying exactly
//     the same GEMM calls (shapes and transposes) in the same run. The
//     model's own GEMMs are oneDNN's, one thread a part (dense/blas.h):
//     section 2's fastest library is the figure to hold it against.
//  2. GEMM libraries on the same calls, in this one process: the OpenBLAS
//     linked (pthread), oneDNN's dnnl_sgemm (linked too), and loaded beside
//     them with dlopen (their own symbols: RTLD_DEEPBIND) OpenBLAS's OpenMP
//     build and BLIS, each at --threads; where one of the last two is not
//     installed it says which package would bring it. The calls: the MLP
//     above, and the large DLRM's layers (bottom 13-512-256-64, top
//     415-512-256-1) at the training job's batch 512.
//  3. The DLRM's interaction alone (F = 27, dim 64, one thread) forward
//     and backward, next to the same products as one cblas_sgemm a sample.
//  4. The default DLRM (13 dense, bottom 512-256-64, 26 slots of dim 64
//     with one row per bag, top 512-256) at batch 8192: samples/s on the
//     CPU and, where a CUDA device exists, on the GPU with its MFU (model
//     FLOPs / time / the device's dense FP32 or TF32 peak).
//
// Not a test: prints a table. Threads are set explicitly (--threads).
#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/malloc_options.h"
#include "dense/blas.h"
#include "dense/dense_optimizer.h"
#include "dense/device.h"
#include "dense/host_array.h"
#include "dense/internal/cpu_layers.h"
#include "dense/model.h"

extern "C" void openblas_set_num_threads(int num_threads);

ABSL_FLAG(int32_t, threads, 2, "BLAS threads for every CPU figure");
ABSL_FLAG(int32_t, mlp_batch, 2048, "MLP batch");
ABSL_FLAG(int32_t, mlp_input, 512, "MLP input width");
ABSL_FLAG(std::string, mlp_hidden, "256,128", "MLP hidden widths");
ABSL_FLAG(int32_t, dlrm_batch, 8192, "DLRM batch");
ABSL_FLAG(double, seconds, 3.0, "minimum seconds per measurement");
ABSL_FLAG(std::string, devices, "cpu,cuda",
          "backends to run the DLRM on (cuda is skipped without a device)");
ABSL_FLAG(std::string, sections, "mlp,gemm,interaction,dlrm",
          "what to measure: mlp (model vs sgemm), gemm (the libraries), "
          "interaction (alone vs sgemm), dlrm");
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

// Floats of the largest operand among `calls`.
size_t LargestOperand(const std::vector<GemmCall>& calls) {
  size_t largest = 0;
  for (const GemmCall& c : calls) {
    largest = std::max({largest, static_cast<size_t>(c.m) * c.k,
                        static_cast<size_t>(c.k) * c.n,
                        static_cast<size_t>(c.m) * c.n});
  }
  return largest;
}

std::vector<int> MlpHidden() {
  std::vector<int> hidden;
  for (absl::string_view w :
       absl::StrSplit(absl::GetFlag(FLAGS_mlp_hidden), ',')) {
    hidden.push_back(std::stoi(std::string(w)));
  }
  return hidden;
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

using CblasSgemm = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int,
                            int, int, float, const float*, int, const float*,
                            int, float, float*, int);

std::function<void(const GemmCall&, const float*, const float*, float*)>
ViaCblas(CblasSgemm sgemm) {
  return [sgemm](const GemmCall& g, const float* a, const float* b, float* c) {
    sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans,
          g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f, a,
          g.ta ? g.m : g.k, b, g.tb ? g.k : g.n, 0.0f, c, g.n);
  };
}

void MlpVersusSgemm() {
  const std::vector<int> hidden = MlpHidden();
  const int batch = absl::GetFlag(FLAGS_mlp_batch);
  const int input = absl::GetFlag(FLAGS_mlp_input);
  const ModelSpec spec = MlpModelSpec(input, hidden, 1);
  const ModelLayout layout = LayoutOf(spec);
  const std::vector<GemmCall> calls = MlpGemms(layout, batch);
  const double flops = Flops(calls);

  // OpenBLAS's sgemm alone, threaded by itself at --threads: the same
  // calls over buffers of the same sizes (the gemm section has the rest).
  const size_t largest = LargestOperand(calls);
  const std::vector<float> a = Random(largest, 1), b = Random(largest, 2);
  std::vector<float> c(largest);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  openblas_set_num_threads(absl::GetFlag(FLAGS_threads));
  const auto sgemm = ViaCblas(cblas_sgemm);
  const double sgemm_time = TimePerCall(seconds, [&] {
    for (const GemmCall& g : calls) sgemm(g, a.data(), b.data(), c.data());
  });

  SetDenseThreads(absl::GetFlag(FLAGS_threads));  // BLAS back to 1 thread
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
      "OpenBLAS sgemm same shapes %.1f GFLOP/s  ratio %.2f\n",
      batch, shape.c_str(), absl::GetFlag(FLAGS_threads),
      flops / model_time / 1e9, flops / sgemm_time / 1e9,
      sgemm_time / model_time);
}

// One sgemm implementation: row-major C = A·B (A m×k or its transpose).
struct GemmLibrary {
  std::string name;
  std::string missing;  // what to install, when it could not be loaded
  std::function<void(const GemmCall&, const float*, const float*, float*)> gemm;
};

// `path` loaded with its own symbols (not the linked OpenBLAS's), or null.
void* OpenBeside(const std::string& path) {
  return dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
}

// Calls `symbol(threads)` of library `handle` if it has it.
template <typename Count>
void SetThreads(void* handle, const char* symbol, int threads) {
  if (auto set = reinterpret_cast<void (*)(Count)>(dlsym(handle, symbol))) {
    set(threads);
  }
}

// The CBLAS sgemm of the library at `path` (`package` brings it), after
// `set_threads(handle)`; without gemm if it is not installed.
GemmLibrary LoadCblas(const std::string& name, const std::string& path,
                      const std::string& package,
                      const std::function<void(void*)>& set_threads) {
  void* h = OpenBeside(path);
  if (h == nullptr) return {name, package, nullptr};
  set_threads(h);
  return {name, "",
          ViaCblas(reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm")))};
}

// The libraries this machine has; each set to `threads`.
std::vector<GemmLibrary> LoadGemmLibraries(int threads) {
  constexpr char kLib[] = "/usr/lib/x86_64-linux-gnu/";
  std::vector<GemmLibrary> libraries;
  libraries.push_back({"OpenBLAS pthread (linked)", "", ViaCblas(cblas_sgemm)});
  libraries.push_back(LoadCblas(
      "OpenBLAS OpenMP", std::string(kLib) + "openblas-openmp/libopenblas.so.0",
      "libopenblas0-openmp", [&](void* h) {
        SetThreads<int>(h, "openblas_set_num_threads", threads);
      }));
  libraries.push_back(
      LoadCblas("BLIS OpenMP", std::string(kLib) + "blis-openmp/libblis.so.4",
                "libblis4-openmp", [&](void* h) {
                  SetThreads<int64_t>(h, "bli_thread_set_num_threads", threads);
                }));
  // oneDNN is linked (the step's float GEMMs run on it, dense/blas.h); it
  // threads with OpenMP.
  omp_set_num_threads(threads);
  libraries.push_back(
      {"oneDNN (dnnl_sgemm, linked)", "",
       [](const GemmCall& g, const float* a, const float* b, float* c) {
         dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.m, g.n, g.k, 1.0f, a,
                    g.ta ? g.m : g.k, b, g.tb ? g.k : g.n, 0.0f, c, g.n);
       }});
  return libraries;
}

// The GEMMs of the large DLRM's training step at `batch` (forward, weight
// and input gradients of the bottom and top MLPs).
std::vector<GemmCall> LargeDlrmGemms(int batch) {
  ModelSpec spec;
  spec.num_dense = 13;
  spec.bottom = {512, 256, 64};
  spec.embedding_dim = 64;
  spec.slots.assign(26, Pooling::kSum);
  spec.top = {512, 256};
  const ModelLayout layout = LayoutOf(spec);
  std::vector<GemmCall> calls;
  for (const auto* stack : {&layout.bottom, &layout.top}) {
    for (const LayerShape& l : *stack) {
      calls.push_back({false, true, batch, l.out, l.in});
      calls.push_back({true, false, l.out, l.in, batch});
      calls.push_back({false, false, batch, l.in, l.out});
    }
  }
  return calls;
}

void GemmLibraries() {
  const int threads = absl::GetFlag(FLAGS_threads);
  openblas_set_num_threads(threads);
  const std::vector<int> hidden = MlpHidden();
  const std::vector<std::pair<std::string, std::vector<GemmCall>>> workloads = {
      {"MLP, batch " + std::to_string(absl::GetFlag(FLAGS_mlp_batch)),
       MlpGemms(
           LayoutOf(MlpModelSpec(absl::GetFlag(FLAGS_mlp_input), hidden, 1)),
           absl::GetFlag(FLAGS_mlp_batch))},
      {"large DLRM MLPs, batch 512", LargeDlrmGemms(512)}};
  const std::vector<GemmLibrary> libraries = LoadGemmLibraries(threads);
  for (const auto& [name, calls] : workloads) {
    const size_t largest = LargestOperand(calls);
    const std::vector<float> a = Random(largest, 1), b = Random(largest, 2);
    std::vector<float> c(largest);
    const double flops = Flops(calls);
    std::printf("GEMM libraries, %s, %d threads:\n", name.c_str(), threads);
    double best = 0;
    std::string best_name;
    for (const GemmLibrary& library : libraries) {
      if (library.gemm == nullptr) {
        std::printf("  %-28s not installed (apt-get install %s)\n",
                    library.name.c_str(), library.missing.c_str());
        continue;
      }
      // Each call's result against the linked library's, once.
      double worst = 0;
      std::vector<float> expected(largest);
      for (const GemmCall& g : calls) {
        libraries[0].gemm(g, a.data(), b.data(), expected.data());
        library.gemm(g, a.data(), b.data(), c.data());
        for (size_t i = 0; i < static_cast<size_t>(g.m) * g.n; ++i) {
          worst = std::max(worst, std::abs(double{c[i]} - expected[i]) /
                                      (1.0 + std::abs(double{expected[i]})));
        }
      }
      const double t = TimePerCall(absl::GetFlag(FLAGS_seconds), [&] {
        for (const GemmCall& g : calls) {
          library.gemm(g, a.data(), b.data(), c.data());
        }
      });
      const double gflops = flops / t / 1e9;
      std::printf("  %-28s %7.1f GFLOP/s  (max relative difference %.1e)%s\n",
                  library.name.c_str(), gflops, worst,
                  worst > 1e-3 ? "  WRONG RESULTS" : "");
      if (worst > 1e-3) continue;
      if (gflops > best) {
        best = gflops;
        best_name = library.name;
      }
    }
    std::printf("  fastest: %s\n", best_name.c_str());
  }
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
  SetDenseThreads(absl::GetFlag(FLAGS_threads));
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
  // The rows and their gradients in the model's own host memory
  // (page-locked for CUDA), as ps_worker keeps them; for CUDA also in plain
  // vectors (pageable), the comparison.
  std::vector<HostArray> rows, grads;
  std::vector<std::vector<float>> plain_rows, plain_grads;
  Batch<float> data, plain;
  data.size = plain.size = batch;
  data.dense = plain.dense = x;
  data.labels = plain.labels = y;
  std::vector<absl::Span<float>> spans, plain_spans;
  for (int s = 0; s < 26; ++s) {
    plain_rows.push_back(Random(static_cast<size_t>(batch) * 64, 10 + s));
    plain_grads.emplace_back(plain_rows.back().size());
    absl::StatusOr<HostArray> r = (*model)->NewHostArray(plain_rows[s].size());
    absl::StatusOr<HostArray> g = (*model)->NewHostArray(plain_rows[s].size());
    if (!r.ok() || !g.ok()) {
      std::printf("DLRM %s: skipped (%s)\n", BackendName(backend),
                  (r.ok() ? g.status() : r.status()).ToString().c_str());
      return;
    }
    std::copy(plain_rows[s].begin(), plain_rows[s].end(), r->data());
    rows.push_back(*std::move(r));
    grads.push_back(*std::move(g));
    data.slots.push_back({rows[s].span(), offsets});
    spans.push_back(grads[s].span());
    plain.slots.push_back({plain_rows[s], offsets});
    plain_spans.push_back(absl::MakeSpan(plain_grads[s]));
  }
  const double flops_per_sample = TrainingFlopsPerSample(spec, layout, 1.0);
  const auto time_step = [&](const Batch<float>& b,
                             const std::vector<absl::Span<float>>& g) {
    return TimePerCall(absl::GetFlag(FLAGS_seconds), [&] {
      if (!(*model)->TrainStep(b, g).ok()) std::abort();
    });
  };
  const double step = time_step(data, spans);
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
    const double pageable = time_step(plain, plain_spans);
    std::printf(
        "\n  the same batch in pageable memory: %.0f samples/s (page-locked "
        "%.2fx)",
        batch / pageable, pageable / step);
    // The step as a job takes it, with the dense optimizer's (Adam): on the
    // device (the model's NewOptimizer) and on the host over copies of the
    // parameters and gradients.
    absl::StatusOr<std::unique_ptr<DenseOptimizer>> on_device =
        (*model)->NewOptimizer({});
    absl::StatusOr<std::unique_ptr<DenseOptimizer>> on_host =
        DenseOptimizer::Create({}, (*model)->num_parameters());
    if (!on_device.ok() || !on_host.ok()) std::abort();
    const auto time_with = [&](DenseOptimizer& optimizer) {
      return TimePerCall(absl::GetFlag(FLAGS_seconds), [&] {
        if (!(*model)->TrainStep(data, spans).ok() ||
            !(*model)->ApplyOptimizer(optimizer).ok()) {
          std::abort();
        }
      });
    };
    const double device_step = time_with(**on_device);
    const double host_step = time_with(**on_host);
    std::printf(
        "\n  with the Adam step on the device: %.0f samples/s; on the host "
        "over copies: %.0f (device %.2fx)",
        batch / device_step, batch / host_step, host_step / device_step);
  }
  std::printf("\n");
}

// The DLRM's interaction alone (26 slots of dim 64 and z0: F = 27, one
// thread, as each part of a step runs it), forward and backward, next to
// the same products as one cblas_sgemm a sample: X·Xᵀ (F × F, the whole
// square: what a batched matrix product computes) forward, (G + Gᵀ)·X
// backward.
void InteractionVersusSgemm() {
  SetDenseThreads(absl::GetFlag(FLAGS_threads));  // BLAS back to 1 thread
  constexpr int kF = 27, kDim = 64;
  const int batch = absl::GetFlag(FLAGS_dlrm_batch);
  const int out_dim = kDim + kF * (kF - 1) / 2;
  const std::vector<float> features =
      Random(static_cast<size_t>(batch) * kF * kDim, 5);
  std::vector<float> dfeatures(features.size()),
      out(size_t{1} * batch * out_dim);
  const std::vector<float> dout = Random(out.size(), 6);
  std::vector<const float*> x(static_cast<size_t>(batch) * kF);
  std::vector<float*> dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = features.data() + i * kDim;
    dx[i] = dfeatures.data() + i * kDim;
  }
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const double forward = TimePerCall(seconds, [&] {
    dense_internal::Interact<float>(x.data(), batch, kF, kDim, out.data());
  });
  const double backward = TimePerCall(seconds, [&] {
    dense_internal::InteractBackward<float>(x.data(), dout.data(), batch, kF,
                                            kDim, dx.data());
  });
  std::vector<float> gram(static_cast<size_t>(batch) * kF * kF);
  const double gemm_forward = TimePerCall(seconds, [&] {
    for (int b = 0; b < batch; ++b) {
      const float* xb = features.data() + static_cast<size_t>(b) * kF * kDim;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kF, kF, kDim, 1.0f,
                  xb, kDim, xb, kDim, 0.0f,
                  gram.data() + static_cast<size_t>(b) * kF * kF, kF);
    }
  });
  const double gemm_backward = TimePerCall(seconds, [&] {
    for (int b = 0; b < batch; ++b) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kF, kDim, kF, 1.0f,
                  gram.data() + static_cast<size_t>(b) * kF * kF, kF,
                  features.data() + static_cast<size_t>(b) * kF * kDim, kDim,
                  0.0f, dfeatures.data() + static_cast<size_t>(b) * kF * kDim,
                  kDim);
    }
  });
  std::printf(
      "interaction F %d dim %d, 1 thread: forward %.0f samples/s (sgemm X·Xᵀ "
      "%.0f: %.2fx), backward %.0f (sgemm (G+Gᵀ)·X %.0f: %.2fx)\n",
      kF, kDim, batch / forward, batch / gemm_forward, gemm_forward / forward,
      batch / backward, batch / gemm_backward, gemm_backward / backward);
}

}  // namespace
}  // namespace embedps::dense

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Large buffers reused rather than mapped afresh each step, as ps_worker
  // and dense_worker run the model.
  embedps::ReuseLargeAllocations();
  embedps::dense::SetDenseThreads(absl::GetFlag(FLAGS_threads));
  const std::vector<std::string> sections =
      absl::StrSplit(absl::GetFlag(FLAGS_sections), ',');
  auto wanted = [&](absl::string_view name) {
    return std::find(sections.begin(), sections.end(), name) != sections.end();
  };
  if (wanted("mlp")) embedps::dense::MlpVersusSgemm();
  if (wanted("gemm")) embedps::dense::GemmLibraries();
  if (wanted("interaction")) embedps::dense::InteractionVersusSgemm();
  if (!wanted("dlrm")) return 0;
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
