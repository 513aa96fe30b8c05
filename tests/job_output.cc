#include "tests/job_output.h"

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"

namespace embedps::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double JsonNumber(const std::string& json, const std::string& field) {
  std::smatch match;
  if (!std::regex_search(json, match,
                         std::regex("\"" + field + "\": ([-0-9.e+]+)"))) {
    ADD_FAILURE() << "no " << field << " in " << json;
    return NAN;
  }
  return std::stod(match[1]);
}

}  // namespace embedps::testing
