// Google Benchmark suite: routing decision per policy and the fit's stages,
// on synthetic data of the paper's main shape (Qwen3-30B-A3B, 48x128 k=8).
#include <benchmark/benchmark.h>

#include <memory>

#include "eldr/fit.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/router.hpp"

namespace {

struct Fixture {
  std::shared_ptr<const eldr::ClusterTable> table;
  eldr::SyntheticWorkload eval;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    eldr::SyntheticOptions o;
    o.seed = 1;
    auto cal = eldr::generate_synthetic(o, 512);
    eldr::FitOptions fo;
    fo.workers = 16;
    auto labels = cal->labels();
    auto t = eldr::fit_table({o.geometry, cal->prefill.n, cal->prefill.data, {}, labels}, fo);
    o.seed = 2;
    return Fixture{std::make_shared<const eldr::ClusterTable>(std::move(*t)),
                   std::move(*eldr::generate_synthetic(o, 256))};
  }();
  return f;
}

void BM_route(benchmark::State& state) {
  const auto policy = static_cast<eldr::Policy>(state.range(0));
  const Fixture& f = fixture();
  eldr::RouterOptions o;
  o.policy = policy;
  auto router = eldr::Router::create(f.table, o);
  const auto labels = f.eval.labels();
  uint64_t i = 0;
  for (auto _ : state) {
    const uint64_t r = i++ % f.eval.prefill.n;
    eldr::RouteHints hints;
    hints.label = labels[r];
    auto d = (*router)->route(f.eval.prefill.row(r), hints);
    benchmark::DoNotOptimize(d);
    (void)(*router)->complete(d->worker_id);
  }
  state.SetLabel(eldr::policy_name(policy));
}
BENCHMARK(BM_route)->DenseRange(0, 5);

void BM_kmeans_balanced(benchmark::State& state) {
  eldr::SyntheticOptions o;
  o.geometry = {48, 128, 8};
  auto cal = eldr::generate_synthetic(o, 1000);
  eldr::FitOptions fo;
  fo.workers = 16;
  fo.threads = 1;
  for (auto _ : state) {
    auto t = eldr::fit_table({o.geometry, cal->prefill.n, cal->prefill.data, {}, {}}, fo);
    benchmark::DoNotOptimize(t);
  }
}
BENCHMARK(BM_kmeans_balanced)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
