// Fuzz target: the Criteo TSV line parser (data/criteo_reader.h), with
// and without the label column, as the reader and ps_predictor call it.
#include <cstdint>
#include <cstring>
#include <memory>

#include "data/criteo_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader hands the parser one line without its newline, in a buffer
  // of its own: a copy makes reads past the end visible to ASAN.
  const std::unique_ptr<char[]> line(new char[size]);
  if (size > 0) std::memcpy(line.get(), data, size);
  embedps::data::CriteoBatch batch;
  batch.labels.resize(1);
  batch.dense.resize(13);
  batch.keys.resize(26);
  (void)embedps::data::ParseCriteoLine(line.get(), size, &batch, 0);
  (void)embedps::data::ParseCriteoFeatures(line.get(), size, &batch, 0);
  return 0;
}
