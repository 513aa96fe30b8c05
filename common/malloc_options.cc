#include "common/malloc_options.h"

#include <malloc.h>

#include <climits>

namespace embedps {

bool ReuseLargeAllocations() {
  // 32 MiB: glibc's largest mmap threshold on 64-bit systems.
  const bool threshold = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  return threshold && trim;
}

}  // namespace embedps
