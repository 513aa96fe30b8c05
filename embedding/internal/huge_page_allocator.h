// An allocator for large, randomly accessed arrays (the tables' row
// indexes, a values table's rows): allocations of kMapBytes and more are
// mmapped (freed, they go straight back to the kernel instead of leaving
// holes in malloc's heap), those of 2 MiB and more advised to use
// transparent huge pages; smaller ones come from std::allocator.
//
// Thread safety: stateless; safe from any thread.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_HUGE_PAGE_ALLOCATOR_H_
#define EMBEDPS_EMBEDDING_INTERNAL_HUGE_PAGE_ALLOCATOR_H_

#include <sys/mman.h>

#include <cstddef>
#include <memory>
#include <new>

namespace embedps::embedding_internal {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

template <typename T, size_t kMapBytes = kHugePageBytes>
struct HugePageAllocator {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = HugePageAllocator<U, kMapBytes>;
  };

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(  // NOLINT: rebinding
      const HugePageAllocator<U, kMapBytes>&) {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMapBytes) return std::allocator<T>().allocate(n);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    if (bytes >= kHugePageBytes) madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }

  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMapBytes) {
      std::allocator<T>().deallocate(p, n);
    } else {
      munmap(p, bytes);
    }
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U, kMapBytes>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U, kMapBytes>&) const {
    return false;
  }
};

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_HUGE_PAGE_ALLOCATOR_H_
