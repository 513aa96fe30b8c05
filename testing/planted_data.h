// Test helper: a planted Criteo-format data set written by tools/datagen
// with small vocabularies (5, 10, 20 and 50 values a slot group), so that
// seconds of training come near its Bayes-optimal AUC.
#ifndef EMBEDPS_TESTING_PLANTED_DATA_H_
#define EMBEDPS_TESTING_PLANTED_DATA_H_

#include <string>

#include "absl/status/status.h"

namespace embedps::testing {

// Writes train.txt, test.txt and meta.json into `dir` (datagen's
// runfile path; it must exit 0 within two minutes).
absl::Status WritePlantedData(const std::string& dir, int train_rows,
                              int test_rows);

}  // namespace embedps::testing

#endif  // EMBEDPS_TESTING_PLANTED_DATA_H_
