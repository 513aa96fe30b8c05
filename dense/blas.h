// The few BLAS calls the CPU backend needs, typed for float and double,
// over the system's CBLAS (OpenBLAS from Debian). Row-major throughout.
// Thread safety: thread-safe (BLAS calls are reentrant).
#ifndef EMBEDPS_DENSE_BLAS_H_
#define EMBEDPS_DENSE_BLAS_H_

namespace embedps::dense {

// C[m×n] = alpha · op(A) · op(B) + beta · C, with op(A) m×k and op(B) k×n.
template <typename T>
void Gemm(bool transpose_a, bool transpose_b, int m, int n, int k, T alpha,
          const T* a, const T* b, T beta, T* c);

// Threads the CPU model's step runs on (cpu_model.h splits each batch
// into as many parts, one per thread). Every Gemm call is single-threaded
// from then on (OpenBLAS's own pool is set to one thread): a thread of the
// step calls it on its own part. Set it explicitly: a worker's server and
// data threads share the cores.
void SetDenseThreads(int threads);
// What SetDenseThreads set last (1 before any call).
int DenseThreads();

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_BLAS_H_
