// Test helper: reading what a job wrote — whole files, and number fields
// of the one-line JSON results that ps_worker and datagen print.
#ifndef EMBEDPS_TESTING_JOB_OUTPUT_H_
#define EMBEDPS_TESTING_JOB_OUTPUT_H_

#include <string>

namespace embedps::testing {

// The file's contents; empty if it cannot be read.
std::string ReadFile(const std::string& path);

// The number after "field": in `json`; NaN, and a test failure, if absent.
double JsonNumber(const std::string& json, const std::string& field);

}  // namespace embedps::testing

#endif  // EMBEDPS_TESTING_JOB_OUTPUT_H_
