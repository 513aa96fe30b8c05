// ForEachPart: one piece of work split over threads started for the call.
//
// Calls work(p) for every p in [0, parts): p = 0 on the calling thread, the
// others on threads started for the call (the start cost, ~20 µs, is small
// next to the work it is meant for). Returns when all have returned.
#ifndef EMBEDPS_COMMON_FOR_EACH_PART_H_
#define EMBEDPS_COMMON_FOR_EACH_PART_H_

#include <functional>
#include <thread>
#include <vector>

namespace embedps {

inline void ForEachPart(int parts, const std::function<void(int)>& work) {
  std::vector<std::thread> helpers;
  helpers.reserve(parts > 1 ? parts - 1 : 0);
  for (int p = 1; p < parts; ++p) helpers.emplace_back(work, p);
  work(0);
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace embedps

#endif  // EMBEDPS_COMMON_FOR_EACH_PART_H_
