// ExpirySweeper: eviction that runs. Every `interval` it removes the
// expired rows of every table of the registry that has a TTL, and the
// least-pulled rows beyond the cap of every table with max_rows
// (Table::SweepExpired: memory and spill tier, each stripe's lock held for
// a few thousand rows at a time, so Pulls and Pushes go on). Removed rows
// count in the table's `evicted` statistic (embedps_rows_evicted_total),
// leave serving replicas with the next publication (the change log
// carries the removals) and are absent from later checkpoints.
//
// Thread safety: thread-safe; the sweeps run on a thread of its own.
#ifndef EMBEDPS_SERVER_EXPIRY_SWEEPER_H_
#define EMBEDPS_SERVER_EXPIRY_SWEEPER_H_

#include <cstdint>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "server/table_registry.h"

namespace embedps::server {

class ExpirySweeper {
 public:
  // `registry` must outlive the sweeper. `interval`: time between sweeps;
  // zero or less: no thread (SweepOnce only).
  ExpirySweeper(TableRegistry* registry, absl::Duration interval);
  // Stops the thread (a sweep under way finishes its current stripe
  // batch's table first).
  ~ExpirySweeper();
  ExpirySweeper(const ExpirySweeper&) = delete;
  ExpirySweeper& operator=(const ExpirySweeper&) = delete;

  // Sweeps every table with a TTL now; the rows removed, all tables. The
  // first table error (from a spill tier) after trying all of them.
  absl::StatusOr<uint64_t> SweepOnce();

  // Sweeps completed since the start.
  uint64_t sweeps();

 private:
  void Loop();

  TableRegistry* const registry_;
  const absl::Duration interval_;
  Mutex mu_;
  CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sweeps_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_EXPIRY_SWEEPER_H_
