// Routes one footprint through an installed eldr and names a shared-memory
// segment: proves the exported package (and the pkg-config file) carry the
// routing library and the transport a C++ engine needs.
#include <cstdio>
#include <memory>
#include <vector>

#include "eldr/router.hpp"
#include "eldr/shm.hpp"

int main() {
  eldr::ClusterTable t;
  t.geometry = {1, 2, 1};
  t.layer_mask = {0};
  t.idf = {1.0f, 1.0f};
  t.centroids = {1.0f, 0.0f, 0.0f, 1.0f};
  t.worker_ids = {7, 8};
  // The paper's rule, so the most similar worker is the only right answer.
  auto router = eldr::Router::create(std::make_shared<const eldr::ClusterTable>(t),
                                     {.policy = eldr::Policy::eldr});
  if (!router) return 1;
  const std::vector<int16_t> counts{0, 5};
  auto d = (*router)->route(counts);
  if (!d || d->worker_id != 8) return 2;
  if (eldr::shm::segment_name("pkg").empty()) return 3;
  if (eldr::shm::validate_instance_name("../x").is_ok()) return 4;
  std::printf("consumer: routed to worker %d\n", d->worker_id);
  return 0;
}
