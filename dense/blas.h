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

// Threads BLAS may use in each call (OpenBLAS keeps its own pool). Set it
// explicitly: the default is every core, which fights with the server and
// data threads of a worker.
void SetBlasThreads(int threads);
// What SetBlasThreads set last (1 before any call); the CPU model runs its
// per-sample work (pooling, interaction) on as many threads.
int BlasThreads();

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_BLAS_H_
