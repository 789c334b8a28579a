// libFuzzer target: arbitrary text as the research prototype's JSON centroid
// file. Import either fails with a status or yields a valid table.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "eldr/cluster_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto table =
      eldr::import_prototype_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (table && !table->validate().is_ok()) std::abort();
  return 0;
}
