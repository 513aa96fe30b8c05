// A y = a·x + y kernel on device memory, for CheckCudaDevice.
// Host-callable; returns the cudaError_t of the launch as an int so that
// callers need no CUDA headers.
#ifndef EMBEDPS_DENSE_CUDA_SAXPY_CUH_
#define EMBEDPS_DENSE_CUDA_SAXPY_CUH_

namespace embedps::dense::cuda {

// REQUIRES: x and y point to n floats of device memory on the current device.
int LaunchSaxpy(int n, float a, const float* x, float* y);

}  // namespace embedps::dense::cuda

#endif  // EMBEDPS_DENSE_CUDA_SAXPY_CUH_
