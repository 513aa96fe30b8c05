#include "dense/blas.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

extern "C" void openblas_set_num_threads(int num_threads);

namespace embedps::dense {

template <>
void Gemm<float>(bool ta, bool tb, int m, int n, int k, float alpha,
                 const float* a, const float* b, float beta, float* c) {
  // oneDNN parallelizes over the caller's OpenMP team size, which is the
  // core count unless set; the step's threads each want their own core.
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  const dnnl_status_t status =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, ta ? m : k,
                 b, tb ? k : n, beta, c, n);
  if (status != dnnl_success) {
    // Only shapes that contradict each other get here: a bug of ours.
    std::fprintf(stderr, "dnnl_sgemm(%d, %d, %d) failed: status %d\n", m, n, k,
                 static_cast<int>(status));
    std::abort();
  }
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
