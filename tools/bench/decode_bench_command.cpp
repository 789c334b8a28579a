// eldr bench decode: throughput of the routed-expert decoders on synthetic
// engine payloads, in GB/s of base64 input (what the gateway receives).
// Three figures side by side: an SGLang int32 payload decoded and counted,
// the same text through the base64 decoder alone (the ceiling), and a vLLM
// uint8 .npy payload. Medians over repetitions.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/base64.hpp"
#include "eldr/geometry.hpp"
#include "eldr/npy.hpp"
#include "eldr/routed_experts.hpp"

namespace eldr::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct DecodeArgs {
  uint64_t rows = 2000;
  uint32_t layers = 48, experts = 128, top_k = 8;
  uint32_t reps = 9;
  double min_seconds = 0.05;  // per repetition
  uint64_t seed = 1;
  bool json = false;
};

// This thread's CPU time: on a shared machine (the 2-core CI box runs builds
// beside the bench) wall time measures the neighbours, CPU time the decoder.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Rate {
  double cpu_gbps = 0;   // over thread CPU time
  double wall_gbps = 0;  // over wall-clock time
};

// Median GB/s of `once` (which returns false on error) over `bytes` of input.
template <class F>
Rate median_gbps(const DecodeArgs& a, size_t bytes, F&& once, bool* ok) {
  std::vector<double> rates, walls;
  for (uint32_t rep = 0; rep < a.reps + 1; ++rep) {  // the first one warms up
    uint64_t iters = 0;
    const auto t0 = Clock::now();
    const double c0 = thread_seconds();
    double secs = 0;
    do {
      if (!once()) {
        *ok = false;
        return {};
      }
      ++iters;
      secs = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (secs < a.min_seconds);
    const double cpu = thread_seconds() - c0;
    const double total = static_cast<double>(bytes) * static_cast<double>(iters) / 1e9;
    if (rep > 0) {
      rates.push_back(total / cpu);
      walls.push_back(total / secs);
    }
  }
  std::sort(rates.begin(), rates.end());
  std::sort(walls.begin(), walls.end());
  return {rates[rates.size() / 2], walls[walls.size() / 2]};
}

int run_bench_decode(const DecodeArgs& a) {
  if (a.experts > 256)
    return report({Errc::invalid_argument, "--experts must be <= 256 (uint8 .npy case)"});
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<uint32_t> pick(0, a.experts - 1);
  const size_t n = static_cast<size_t>(a.rows) * a.layers * a.top_k;
  std::vector<int32_t> ids32(n);
  std::vector<uint8_t> ids8(n);
  for (size_t i = 0; i < n; ++i)
    ids8[i] = static_cast<uint8_t>(ids32[i] = static_cast<int32_t>(pick(rng)));
  const std::string sglang_text =
      base64::encode(reinterpret_cast<const uint8_t*>(ids32.data()), n * sizeof(int32_t));
  const uint64_t shape[] = {a.rows, a.layers, a.top_k};
  const auto npy = encode_npy(NpyDtype::u8, shape, ids8.data());
  if (!npy) return report(npy.status());
  const std::string vllm = base64::encode(npy->data(), npy->size());

  RoutedExpertsOptions o;
  o.num_experts = a.experts;
  o.num_hidden_layers = a.layers;
  o.top_k = a.top_k;
  std::vector<int16_t> fp(size_t{a.layers} * a.experts);
  Status err;
  bool ok = true;

  const Rate sglang = median_gbps(
      a, sglang_text.size(),
      [&] {
        auto r = footprint_from_base64_ids(sglang_text, IdDtype::i32, o, fp);
        if (!r) err = r.status();
        return r.is_ok();
      },
      &ok);
  // The decoder alone, into the same kind of stack buffer the counting path
  // uses; the XOR keeps the compiler from dropping the work.
  volatile uint8_t sink = 0;
  const Rate b64only = median_gbps(
      a, sglang_text.size(),
      [&] {
        auto dec = base64::Decoder::create(sglang_text);
        if (!dec) {
          err = dec.status();
          return false;
        }
        alignas(64) uint8_t buf[6144 + 16];
        uint8_t x = 0;
        while (dec->remaining() > 0) {
          auto got = dec->next(buf, sizeof buf);
          if (!got) {
            err = got.status();
            return false;
          }
          x ^= buf[0] ^ buf[*got - 1];
        }
        sink = sink ^ x;
        return true;
      },
      &ok);
  const Rate vllm_rate = median_gbps(
      a, vllm.size(),
      [&] {
        auto r = footprint_from_base64_npy(vllm, o, fp);
        if (!r) err = r.status();
        return r.is_ok();
      },
      &ok);
  if (!ok) return report(err);

  if (a.json) {
    nlohmann::json j = {{"bench", "decode"},
                        {"rows", a.rows},
                        {"layers", a.layers},
                        {"experts", a.experts},
                        {"top_k", a.top_k},
                        {"reps", a.reps},
                        {"sglang_int32_bytes", sglang_text.size()},
                        {"sglang_int32_gbps", sglang.cpu_gbps},
                        {"base64_only_gbps", b64only.cpu_gbps},
                        {"vllm_uint8_npy_bytes", vllm.size()},
                        {"vllm_uint8_npy_gbps", vllm_rate.cpu_gbps},
                        {"sglang_int32_wall_gbps", sglang.wall_gbps},
                        {"base64_only_wall_gbps", b64only.wall_gbps},
                        {"vllm_uint8_npy_wall_gbps", vllm_rate.wall_gbps}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "decode %llu rows x %u layers x %u ids, E=%u (GB/s of base64 input, median of %u)\n",
        static_cast<unsigned long long>(a.rows), a.layers, a.top_k, a.experts, a.reps);
    std::printf("  (CPU time of this thread; wall clock in brackets)\n");
    std::printf("  sglang int32 decode+count  %6.2f GB/s  [%6.2f]  (%zu bytes)\n", sglang.cpu_gbps,
                sglang.wall_gbps, sglang_text.size());
    std::printf("  base64 decode only         %6.2f GB/s  [%6.2f]\n", b64only.cpu_gbps,
                b64only.wall_gbps);
    std::printf("  vllm uint8 .npy            %6.2f GB/s  [%6.2f]  (%zu bytes)\n",
                vllm_rate.cpu_gbps, vllm_rate.wall_gbps, vllm.size());
  }
  return 0;
}

}  // namespace

void register_bench_decode_command(CLI::App& bench) {
  auto a = std::make_shared<DecodeArgs>();
  auto* c = bench.add_subcommand("decode", "routed-expert payload decoders (GB/s of base64)");
  c->add_option("--rows", a->rows, "tokens per payload")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  c->add_option("--layers", a->layers)->check(CLI::Range(1u, kMaxLayers));
  c->add_option("--experts", a->experts)->check(CLI::Range(1u, 256u));
  c->add_option("--top-k", a->top_k)->check(CLI::Range(1u, kMaxTopK));
  c->add_option("--reps", a->reps, "repetitions (the median is reported)")
      ->check(CLI::Range(1u, 1000u));
  c->add_option("--min-seconds", a->min_seconds, "minimum time per repetition");
  c->add_option("--seed", a->seed);
  c->add_flag("--json", a->json, "one JSON line");
  c->callback([a] { g_exit_code = run_bench_decode(*a); });
}

}  // namespace eldr::cli
