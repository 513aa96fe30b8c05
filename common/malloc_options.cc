#include "common/malloc_options.h"

#include <malloc.h>

#include <algorithm>
#include <climits>
#include <thread>

namespace embedps {

bool ReuseLargeAllocations() {
  // 32 MiB: glibc's largest mmap threshold on 64-bit systems.
  const bool threshold = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  const int cores =
      std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  const bool arenas = mallopt(M_ARENA_MAX, cores) == 1;
  return threshold && trim && arenas;
}

void ReturnFreedMemory() { malloc_trim(0); }

}  // namespace embedps
