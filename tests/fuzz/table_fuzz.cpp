// libFuzzer target: arbitrary bytes as a FlatBuffers cluster table. A table
// that decodes must pass validation and survive an encode/decode round trip,
// and a router must be able to use it.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/router.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto table = eldr::decode_table({data, size});
  if (!table) return 0;
  if (!table->validate().is_ok()) std::abort();
  const auto bytes = eldr::encode_table(*table);
  auto again = eldr::decode_table(bytes);
  if (!again || again->centroids != table->centroids || again->layer_mask != table->layer_mask)
    std::abort();
  if (table->geometry.cells() <= (1u << 16)) {
    auto router = eldr::Router::create(std::make_shared<const eldr::ClusterTable>(*table));
    if (router) {
      std::vector<int16_t> counts(table->geometry.cells(), 1);
      (void)(*router)->route(counts);
    }
  }
  return 0;
}
