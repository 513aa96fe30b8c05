// Process-wide malloc settings for processes that move messages of many
// megabytes per RPC (servers, the benchmark, training workers).
#ifndef EMBEDPS_COMMON_MALLOC_OPTIONS_H_
#define EMBEDPS_COMMON_MALLOC_OPTIONS_H_

namespace embedps {

// glibc's malloc serves a block above its mmap threshold (128 KiB at
// first) with a fresh mapping, and gives a heap's free top back to the
// kernel above its trim threshold. A process that allocates and frees
// buffers of tens of MiB on every call then page-faults (and the kernel
// zeroes) every 4 KiB of each: in a ps_server under 100k-key Pushes that
// was ~28% of all its cycles. This raises the mmap threshold to its
// maximum (32 MiB) and stops trimming, so such buffers are reused from the
// heap. Cost: memory freed stays with the process, up to its peak.
// Call once, early in main. Returns false if glibc refused a setting.
bool ReuseLargeAllocations();

}  // namespace embedps

#endif  // EMBEDPS_COMMON_MALLOC_OPTIONS_H_
