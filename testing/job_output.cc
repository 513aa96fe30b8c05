#include "testing/job_output.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace embedps::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double JsonNumber(const std::string& json, const std::string& field) {
  const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains(field) ||
      !parsed[field].is_number()) {
    ADD_FAILURE() << "no number " << field << " in " << json;
    return NAN;
  }
  return parsed[field].get<double>();
}

}  // namespace embedps::testing
