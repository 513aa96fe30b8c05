#include "dense/blas.h"

#include <cblas.h>

#include <atomic>

extern "C" void openblas_set_num_threads(int num_threads);

namespace embedps::dense {

template <>
void Gemm<float>(bool ta, bool tb, int m, int n, int k, float alpha,
                 const float* a, const float* b, float beta, float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, ta ? m : k, b,
              tb ? k : n, beta, c, n);
}

template <>
void Gemm<double>(bool ta, bool tb, int m, int n, int k, double alpha,
                  const double* a, const double* b, double beta, double* c) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, ta ? m : k, b,
              tb ? k : n, beta, c, n);
}

namespace {
std::atomic<int> dense_threads{1};
}  // namespace

void SetDenseThreads(int threads) {
  dense_threads.store(threads < 1 ? 1 : threads, std::memory_order_relaxed);
  openblas_set_num_threads(1);
}

int DenseThreads() { return dense_threads.load(std::memory_order_relaxed); }

}  // namespace embedps::dense
