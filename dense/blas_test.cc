#include "dense/blas.h"

#include <omp.h>

#include <cmath>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

// op(X)[r][c] of a row-major matrix stored as rows × cols before op.
double At(const std::vector<float>& x, bool transpose, int cols, int r, int c) {
  return transpose ? x[c * cols + r] : x[r * cols + c];
}

// Gemm<float> against the definition in double, every transpose pair,
// with alpha and beta both in play, on shapes that are not multiples of
// any vector width.
TEST(BlasTest, FloatGemmAgreesWithTheDefinition) {
  const int m = 37, n = 23, k = 51;
  const float alpha = 0.75f, beta = -1.5f;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> a(m * k), b(k * n), c(m * n);
      for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * i);
      for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.91 * i);
      for (size_t i = 0; i < c.size(); ++i) c[i] = 0.01f * (i % 17);
      const std::vector<float> c0 = c;
      Gemm<float>(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, c.data());
      for (int r = 0; r < m; ++r) {
        for (int col = 0; col < n; ++col) {
          double sum = 0;
          for (int p = 0; p < k; ++p) {
            sum += At(a, ta, ta ? m : k, r, p) * At(b, tb, tb ? k : n, p, col);
          }
          const double want = alpha * sum + beta * c0[r * n + col];
          ASSERT_NEAR(c[r * n + col], want, 1e-4 * (1 + std::abs(want)))
              << "ta " << ta << " tb " << tb << " at " << r << "," << col;
        }
      }
    }
  }
}

// A step's thread calls Gemm on its own part: oneDNN must not start a
// team of its own there, whatever the thread's OpenMP setting was.
TEST(BlasTest, FloatGemmRunsOnTheCallingThreadAlone) {
  std::thread([] {
    omp_set_num_threads(4);
    std::vector<float> a(64 * 64, 1.0f), b(64 * 64, 1.0f), c(64 * 64);
    Gemm<float>(false, false, 64, 64, 64, 1.0f, a.data(), b.data(), 0.0f,
                c.data());
    EXPECT_EQ(omp_get_max_threads(), 1);
    EXPECT_EQ(c[0], 64.0f);
  }).join();
}

}  // namespace
}  // namespace embedps::dense
