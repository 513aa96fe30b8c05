// The few BLAS calls the CPU backend needs, typed for float and double.
// Row-major throughout. float goes to oneDNN's dnnl_sgemm (Debian's
// libdnnl, JIT kernels for the machine's widest vectors), double to the
// system's CBLAS (OpenBLAS): on the DLRM's and MLP's shapes, one thread a
// call, oneDNN ran 1.05–1.12× OpenBLAS here (docs/benchmarks.md).
// Thread safety: thread-safe (both libraries are reentrant).
#ifndef EMBEDPS_DENSE_BLAS_H_
#define EMBEDPS_DENSE_BLAS_H_

namespace embedps::dense {

// C[m×n] = alpha · op(A) · op(B) + beta · C, with op(A) m×k and op(B) k×n.
// Runs on the calling thread alone: it sets that thread's OpenMP team size
// (which oneDNN threads with) to one.
template <typename T>
void Gemm(bool transpose_a, bool transpose_b, int m, int n, int k, T alpha,
          const T* a, const T* b, T beta, T* c);

// Threads the CPU model's step runs on (cpu_model.h splits each batch
// into as many parts, one per thread). Every Gemm call is single-threaded
// (OpenBLAS's own pool is set to one thread here, oneDNN's team per call):
// a thread of the step calls it on its own part. Set it explicitly: a
// worker's server and data threads share the cores.
void SetDenseThreads(int threads);
// What SetDenseThreads set last (1 before any call).
int DenseThreads();

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_BLAS_H_
