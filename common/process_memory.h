// The calling process's memory as the kernel counts it.
// Thread safety: thread-safe.
#ifndef EMBEDPS_COMMON_PROCESS_MEMORY_H_
#define EMBEDPS_COMMON_PROCESS_MEMORY_H_

#include <cstdint>

namespace embedps {

// The process's resident set in bytes (/proc/self/statm: pages the kernel
// holds in memory, file-backed ones included); 0 if it cannot be read.
uint64_t ResidentBytes();

}  // namespace embedps

#endif  // EMBEDPS_COMMON_PROCESS_MEMORY_H_
