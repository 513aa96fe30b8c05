// The calling process's memory as the kernel counts it.
// Thread safety: thread-safe.
#ifndef EMBEDPS_COMMON_PROCESS_MEMORY_H_
#define EMBEDPS_COMMON_PROCESS_MEMORY_H_

#include <cstdint>
#include <string>

namespace embedps {

// The process's resident set in bytes (/proc/self/statm: pages the kernel
// holds in memory, file-backed ones included); 0 if it cannot be read.
uint64_t ResidentBytes();

// The memory this process may use: the machine's (MemTotal of
// /proc/meminfo) or, where less, the limit of its memory cgroup or of any
// cgroup above it (cgroup v2 memory.max, v1 memory.limit_in_bytes; a
// container's limit). 0 if not even MemTotal can be read. `root` prefixes
// every path read ("" in production; a directory of the same files in
// tests).
uint64_t AvailableMemoryBytes(const std::string& root = "");

}  // namespace embedps

#endif  // EMBEDPS_COMMON_PROCESS_MEMORY_H_
