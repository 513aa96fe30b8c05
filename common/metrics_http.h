// The limits every /metrics endpoint of ours (ps_server, ps_worker) sets
// on its cpp-httplib server, so that connections which send nothing hold
// a thread for a second, not for httplib's default 5 s each: with its
// default pool (8 threads here), 64 idle connections left the next scrape
// unanswered for 39 s; with these, 64 delay it ~2 s (tests/security_test).
// httplib serves a connection per thread, so N idle connections still
// delay a scrape by about N / kMetricsThreads seconds: keep the port
// internal (--metrics_host, a NetworkPolicy).
#ifndef EMBEDPS_COMMON_METRICS_HTTP_H_
#define EMBEDPS_COMMON_METRICS_HTTP_H_

#include "httplib.h"

namespace embedps {

inline constexpr int kMetricsThreads = 32;

inline void LimitIdleConnections(httplib::Server& http) {
  http.new_task_queue = [] { return new httplib::ThreadPool(kMetricsThreads); };
  // A connection must send its request within 1 s of connecting (or of
  // its previous request), and at most 16 requests per connection.
  http.set_keep_alive_timeout(1);
  http.set_keep_alive_max_count(16);
  http.set_read_timeout(1, 0);
  http.set_write_timeout(5, 0);
}

}  // namespace embedps

#endif  // EMBEDPS_COMMON_METRICS_HTTP_H_
