#include "data/batch_reader.h"

namespace embedps::data {

absl::StatusOr<CountedLines> CountBatchLines(
    const BatchReaderOptions& options) {
  if (options.files.empty()) {
    return absl::InvalidArgumentError("no data files given");
  }
  if (options.batch_size <= 0 || options.num_workers <= 0 ||
      options.worker_index < 0 || options.worker_index >= options.num_workers ||
      options.epochs <= 0 || options.prefetch_batches <= 0 ||
      (options.include_tail && options.num_workers != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad reader options: batch_size ", options.batch_size, ", worker ",
        options.worker_index, " of ", options.num_workers, ", epochs ",
        options.epochs, options.include_tail ? ", include_tail" : ""));
  }
  CountedLines counted;
  for (const std::string& file : options.files) {
    bool damaged = false;
    absl::StatusOr<int64_t> n = CountLines(
        file, options.damaged_files_are_bad_lines && !options.fatal_bad_lines,
        &damaged);
    if (!n.ok()) return n.status();
    // A header row is no sample.
    counted.lines += options.header && *n > 0 ? *n - 1 : *n;
    counted.damaged_files += damaged;
  }
  // With the tail, a single partial step is a step (an evaluation of a
  // small test set); without, training needs one whole step per worker.
  const int64_t per_step =
      options.include_tail
          ? 1
          : static_cast<int64_t>(options.batch_size) * options.num_workers;
  if (counted.lines < per_step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", options.name, " files hold ", counted.lines,
        " lines, fewer than one ", "step needs (", options.num_workers,
        " workers × batch ", options.batch_size, ")"));
  }
  return counted;
}

}  // namespace embedps::data
