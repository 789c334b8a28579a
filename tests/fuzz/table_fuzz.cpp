// libFuzzer target: arbitrary bytes as a FlatBuffers cluster table, and as a
// prompt. A table that decodes must pass validation and survive an
// encode/decode round trip (its predictor included), and a router must be
// able to use it, from a footprint and from a prompt. The same bytes as
// prompt text and as token ids must extract or be refused, never crash.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/predictor.hpp"
#include "eldr/router.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  eldr::PromptFeatures f;
  (void)eldr::extract_features(eldr::Prompt::of_text({reinterpret_cast<const char*>(data), size}),
                               f);
  std::vector<uint32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  (void)eldr::extract_features(eldr::Prompt::of_tokens(ids), f);

  auto table = eldr::decode_table({data, size});
  if (!table) return 0;
  if (!table->validate().is_ok()) std::abort();
  const auto bytes = eldr::encode_table(*table);
  auto again = eldr::decode_table(bytes);
  if (!again || again->centroids != table->centroids || again->layer_mask != table->layer_mask)
    std::abort();
  if (table->predictor &&
      (!again->predictor || again->predictor->encode() != table->predictor->encode()))
    std::abort();
  if (table->geometry.cells() <= (1u << 16)) {
    auto router = eldr::Router::create(std::make_shared<const eldr::ClusterTable>(*table));
    if (router) {
      std::vector<int16_t> counts(table->geometry.cells(), 1);
      (void)(*router)->route(counts);
      (void)(*router)->route_prompt(eldr::Prompt::of_text("a question about contracts"),
                                    {.request_id = 1});
      (void)(*router)->learn(1, counts);
      const uint32_t tokens[] = {1, 2, 3, 4};
      (void)(*router)->route_prompt(eldr::Prompt::of_tokens(tokens));
    }
  }
  return 0;
}
