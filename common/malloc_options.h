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
// heap. Cost: memory freed stays with the process, up to its peak, in
// every malloc arena; so it also bounds the arenas to one per core (glibc
// makes up to eight per core, one per thread that finds the others busy:
// each keeps its own peak — a server's RSS grew by 200 MB after its first
// checkpoint, whose writer threads allocate, and by 40 MB with one per
// core). Call once, early in main. Returns false if glibc refused a
// setting.
bool ReuseLargeAllocations();

// Gives the free pages of every malloc arena back to the kernel
// (malloc_trim). For after a rare large transient — a checkpoint's
// snapshot, a replica's catch-up, a serving version replaced — whose
// memory ReuseLargeAllocations would otherwise keep. Takes a few
// milliseconds per GB of heap.
void ReturnFreedMemory();

}  // namespace embedps

#endif  // EMBEDPS_COMMON_MALLOC_OPTIONS_H_
