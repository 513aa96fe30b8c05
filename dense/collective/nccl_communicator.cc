// nccl_communicator.h for builds with the CUDA toolkit and NCCL.
#include "dense/collective/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dense/cuda/cuda_status.h"

namespace embedps::dense {
namespace {

absl::Status CudaStatus(cudaError_t error, int rank, absl::string_view what) {
  return ::embedps::dense::CudaStatus(
      error, absl::StrCat("CUDA ", what, " on rank ", rank));
}

absl::Status NcclStatus(ncclResult_t result, int rank, absl::string_view what) {
  const std::string message = absl::StrCat("NCCL ", what, " on rank ", rank,
                                           ": ", ncclGetErrorString(result));
  if (result == ncclInvalidArgument || result == ncclInvalidUsage) {
    return absl::InvalidArgumentError(message);
  }
  if (result == ncclRemoteError || result == ncclSystemError) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclOptions& options, ncclComm_t comm,
                   cudaStream_t stream)
      : options_(options), comm_(comm), stream_(stream) {}

  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  bool buffers_on_device() const override { return true; }

  absl::Status AllReduce(absl::Span<float> buffer, ReduceOp op) override {
    if (buffer.empty()) return absl::OkStatus();
    return Run("AllReduce",
               ncclAllReduce(
                   buffer.data(), buffer.data(), buffer.size(), ncclFloat32,
                   op == ReduceOp::kMean ? ncclAvg : ncclSum, comm_, stream_));
  }

  absl::Status Broadcast(absl::Span<float> buffer, int root) override {
    if (absl::Status s = CheckBroadcastRoot(root, options_.world_size);
        !s.ok()) {
      return s;
    }
    if (buffer.empty()) return absl::OkStatus();
    return Run("Broadcast",
               ncclBroadcast(buffer.data(), buffer.data(), buffer.size(),
                             ncclFloat32, root, comm_, stream_));
  }

  absl::Status AllGather(absl::Span<const float> input,
                         absl::Span<float> output) override {
    if (absl::Status s = CheckAllGatherSizes(input.size(), output.size(),
                                             options_.world_size);
        !s.ok()) {
      return s;
    }
    if (input.empty()) return absl::OkStatus();
    return Run("AllGather",
               ncclAllGather(input.data(), output.data(), input.size(),
                             ncclFloat32, comm_, stream_));
  }

  absl::Status Barrier() override {
    if (scratch_ == nullptr) {
      const cudaError_t error = cudaMalloc(&scratch_, sizeof(float));
      if (error != cudaSuccess)
        return CudaStatus(error, options_.rank, "cudaMalloc");
    }
    return Run("Barrier", ncclAllReduce(scratch_, scratch_, 1, ncclFloat32,
                                        ncclSum, comm_, stream_));
  }

 private:
  // Waits for the collective that `launched` started; aborts the
  // communicator if it does not finish within the timeout.
  absl::Status Run(absl::string_view operation, ncclResult_t launched) {
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("NCCL communicator of rank ", options_.rank,
                       " was aborted after a timeout"));
    }
    if (launched != ncclSuccess)
      return NcclStatus(launched, options_.rank, operation);
    const absl::Time give_up = absl::Now() + options_.timeout;
    while (true) {
      const cudaError_t state = cudaStreamQuery(stream_);
      if (state == cudaSuccess) return absl::OkStatus();
      if (state != cudaErrorNotReady)
        return CudaStatus(state, options_.rank, operation);
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      if (async_error != ncclSuccess)
        return NcclStatus(async_error, options_.rank, operation);
      if (absl::Now() > give_up) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        return absl::DeadlineExceededError(absl::StrCat(
            "NCCL ", operation, " on rank ", options_.rank,
            " did not finish in ", absl::FormatDuration(options_.timeout),
            " (a rank is slow or gone)"));
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }

  const NcclOptions options_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  float* scratch_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const NcclOptions& options, Store* store) {
  if (absl::Status s = CheckRank(options.rank, options.world_size); !s.ok()) {
    return s;
  }
  if (store == nullptr)
    return absl::InvalidArgumentError("no rendezvous store");
  cudaError_t error = cudaSetDevice(options.device);
  if (error != cudaSuccess) {
    return CudaStatus(error, options.rank,
                      absl::StrCat("cudaSetDevice(", options.device, ")"));
  }
  const std::string key = options.store_prefix + "/unique_id";
  ncclUniqueId id;
  if (options.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclStatus(r, options.rank, "ncclGetUniqueId");
    absl::Status s =
        store->Set(key, std::string(id.internal, sizeof(id.internal)));
    if (!s.ok()) return s;
  } else {
    absl::Status s = store->Wait({key}, options.timeout);
    if (!s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("rank ", options.rank,
                       " waiting for rank 0's NCCL id: ", s.message()));
    }
    absl::StatusOr<std::string> value = store->Get(key);
    if (!value.ok()) return value.status();
    if (value->size() != sizeof(id.internal)) {
      return absl::InternalError(
          "the stored NCCL unique id has the wrong size");
    }
    std::memcpy(id.internal, value->data(), sizeof(id.internal));
  }
  cudaStream_t stream;
  error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (error != cudaSuccess)
    return CudaStatus(error, options.rank, "cudaStreamCreate");
  ncclComm_t comm;
  const ncclResult_t r =
      ncclCommInitRank(&comm, options.world_size, id, options.rank);
  if (r != ncclSuccess) {
    cudaStreamDestroy(stream);
    return NcclStatus(r, options.rank, "ncclCommInitRank");
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(options, comm, stream));
}

}  // namespace embedps::dense
