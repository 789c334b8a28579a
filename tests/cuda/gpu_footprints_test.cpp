// The CUDA footprint kernels against the CPU reference (eldr::BlockRows'
// flagging path): fresh random inputs per check, outputs poisoned before each
// run, every row cell, footprint cell and flag compared. Without a device the
// GPU cases skip (with the reason) and only the host-side checks run.
#include "eldr/cuda/gpu_footprints.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/shm.hpp"
#include "eldr/signature_cache.hpp"

namespace eldr::gpu {
namespace {

#define SKIP_WITHOUT_DEVICE() \
  if (!device_available()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none)"

Options options_of(const Geometry& g, uint32_t block_size, uint32_t num_blocks,
                   uint32_t max_requests = 8) {
  Options o;
  o.geometry = g;
  o.block_size = block_size;
  o.num_blocks = num_blocks;
  o.max_requests = max_requests;
  return o;
}

// ---- without a device -------------------------------------------------------

TEST(GpuFootprintsOptionsTest, validate_rejects_each_bad_field_without_touching_cuda) {
  const Options good = options_of({48, 128, 8}, 16, 64);
  EXPECT_TRUE(validate(good).is_ok());
  auto with = [&](auto edit) {
    Options o = good;
    edit(o);
    return validate(o).code();
  };
  EXPECT_EQ(with([](Options& o) { o.geometry.layers = 0; }), Errc::invalid_argument);
  EXPECT_EQ(with([](Options& o) { o.geometry.experts = 0; }), Errc::invalid_argument);
  EXPECT_EQ(with([](Options& o) { o.geometry.top_k = 0; }), Errc::invalid_argument);
  EXPECT_EQ(with([](Options& o) { o.block_size = 0; }), Errc::invalid_argument);
  EXPECT_EQ(with([](Options& o) { o.block_size = 256; }), Errc::invalid_argument);
  EXPECT_EQ(with([](Options& o) { o.num_blocks = 0; }), Errc::invalid_argument);
  EXPECT_EQ(with([](Options& o) { o.max_requests = 0; }), Errc::invalid_argument);
  EXPECT_EQ(with([](Options& o) { o.max_requests = 65536; }), Errc::invalid_argument);
  EXPECT_EQ(with([](Options& o) { o.device = -1; }), Errc::invalid_argument);
  EXPECT_TRUE(with([](Options& o) { o.block_size = 255; }) == Errc::ok);
}

TEST(GpuFootprintsOptionsTest, create_without_a_device_is_a_cuda_error_not_a_crash) {
  if (device_available()) GTEST_SKIP() << "a CUDA device is present";
  auto created = GpuFootprints::create(options_of({48, 128, 8}, 16, 64));
  ASSERT_FALSE(created.is_ok());
  EXPECT_EQ(created.status().code(), Errc::cuda);
  EXPECT_FALSE(created.status().message().empty());
}

// ---- helpers for the device cases ------------------------------------------

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t size = 0;
  explicit DeviceBuffer(size_t n) : size(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(n, 1) * sizeof(T)),
              cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    // From pageable memory the copy may return before its DMA is done, and a
    // non-blocking stream does not wait for the legacy stream.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> to_host() const {
    std::vector<T> out(size);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr, size * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  void poison() { EXPECT_EQ(cudaMemset(ptr, 0x7b, size * sizeof(T)), cudaSuccess); }
};

struct Pair {
  std::unique_ptr<GpuFootprints> gpu;
  BlockRows cpu;
};

Pair make_pair(const Geometry& g, uint32_t block_size, uint32_t num_blocks,
               uint32_t max_requests = 8) {
  auto gpu = GpuFootprints::create(options_of(g, block_size, num_blocks, max_requests));
  EXPECT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  auto cpu = BlockRows::create(g, num_blocks, block_size);
  EXPECT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  return {std::move(gpu).value(), std::move(cpu).value()};
}

std::vector<uint8_t> cpu_rows(const BlockRows& rows) {
  std::vector<uint8_t> out;
  for (uint32_t b = 0; b < rows.num_blocks(); ++b) {
    auto r = rows.row(b);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

// Mostly engine-like input: tokens fill blocks in order from a random offset,
// several requests per step, padding mixed in. `hostile` adds the bad cases:
// ids outside [0, E) (also beyond 32 bits), slots past the last block,
// duplicate picks and repeated slots (which saturate cells).
struct StepInput {
  std::vector<int64_t> ids;  // widened; narrowed to int32 for id_bytes 4
  std::vector<int64_t> slots;
};

StepInput random_step(std::mt19937_64& rng, const Geometry& g, uint32_t call_layers,
                      uint32_t block_size, uint32_t num_blocks, uint32_t tokens, bool hostile) {
  StepInput in;
  const uint64_t capacity = uint64_t{num_blocks} * block_size;
  while (in.slots.size() < tokens) {
    const uint32_t run = 1 + static_cast<uint32_t>(rng() % (3 * block_size));
    int64_t slot = static_cast<int64_t>(rng() % capacity);
    if (rng() % 2 == 0) slot -= slot % block_size;  // starts at a block head
    for (uint32_t i = 0; i < run && in.slots.size() < tokens; ++i) {
      int64_t s = slot + i;
      if (static_cast<uint64_t>(s) >= capacity) s = -1;
      if (rng() % 16 == 0) s = -1 - static_cast<int64_t>(rng() % 5);  // padding
      if (hostile && rng() % 64 == 0) s = static_cast<int64_t>(capacity + rng() % 100);
      if (hostile && rng() % 64 == 0 && !in.slots.empty()) s = in.slots[rng() % in.slots.size()];
      in.slots.push_back(s);
    }
  }
  std::uniform_int_distribution<int64_t> expert(0, g.experts - 1);
  in.ids.resize(size_t{tokens} * call_layers * g.top_k);
  for (size_t tl = 0; tl < size_t{tokens} * call_layers; ++tl) {
    int64_t* picks = in.ids.data() + tl * g.top_k;
    for (uint32_t j = 0; j < g.top_k; ++j) {
      int64_t e;
      do e = expert(rng);
      while (std::find(picks, picks + j, e) != picks + j && g.top_k < g.experts);
      picks[j] = e;
      if (hostile) {
        const auto roll = rng() % 200;
        if (roll == 0) picks[j] = g.experts;
        if (roll == 1) picks[j] = -1;
        if (roll == 2) picks[j] = (int64_t{1} << 33) + 1;  // int32: wraps to 1 if truncated
        if (roll == 3 && j > 0) picks[j] = picks[0];       // duplicate pick
      }
    }
  }
  return in;
}

// Runs one step on both sides and compares every row cell and the flags.
void check_step(Pair& p, const StepInput& in, uint32_t id_bytes, int32_t layer,
                cudaStream_t stream = nullptr) {
  const auto tokens = static_cast<uint32_t>(in.slots.size());
  DeviceBuffer<int64_t> slots(in.slots);
  // int32 engines cannot express ids beyond 32 bits: those become -1 there.
  std::vector<int32_t> narrow(in.ids.size());
  std::transform(in.ids.begin(), in.ids.end(), narrow.begin(), [](int64_t v) {
    return v > INT32_MAX || v < INT32_MIN ? -1 : static_cast<int32_t>(v);
  });
  DeviceBuffer<int64_t> wide_ids(id_bytes == 8 ? in.ids : std::vector<int64_t>{});
  DeviceBuffer<int32_t> narrow_ids(id_bytes == 4 ? narrow : std::vector<int32_t>{});
  const void* ids = id_bytes == 8 ? static_cast<const void*>(wide_ids.ptr) : narrow_ids.ptr;
  Status launched = p.gpu->update_blocks(ids, id_bytes, tokens, layer, slots.ptr, stream);
  ASSERT_TRUE(launched.is_ok()) << launched.to_string();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  auto want = id_bytes == 8 ? p.cpu.accumulate(std::span<const int64_t>(in.ids), in.slots, layer)
                            : p.cpu.accumulate(std::span<const int32_t>(narrow), in.slots, layer);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();
  auto got_flags = p.gpu->take_errors(nullptr);
  ASSERT_TRUE(got_flags.is_ok()) << got_flags.status().to_string();
  EXPECT_EQ(got_flags.value(), want.value());
  auto rows = p.gpu->copy_rows(nullptr);
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  const auto expected = cpu_rows(p.cpu);
  ASSERT_EQ(rows.value().size(), expected.size());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    if (rows.value()[i] != expected[i] && mismatches++ == 0) first = i;
  ASSERT_EQ(mismatches, 0u) << "first at cell " << first << ": gpu " << int{rows.value()[first]}
                            << " cpu " << int{expected[first]};
}

struct SumInput {
  std::vector<int32_t> table;
  std::vector<int32_t> counts;
  uint32_t max_blocks = 0;
};

SumInput random_tables(std::mt19937_64& rng, uint32_t requests, uint32_t max_blocks,
                       uint32_t num_blocks, bool hostile) {
  SumInput in;
  in.max_blocks = max_blocks;
  in.table.resize(size_t{requests} * max_blocks);
  for (auto& b : in.table) b = static_cast<int32_t>(rng() % num_blocks);
  if (hostile)
    for (auto& b : in.table)
      if (rng() % 50 == 0) b = rng() % 2 ? -1 : static_cast<int32_t>(num_blocks + rng() % 9);
  for (uint32_t r = 0; r < requests; ++r) {
    int32_t c = static_cast<int32_t>(rng() % (max_blocks + 1));
    if (hostile && rng() % 6 == 0) c = rng() % 2 ? -3 : static_cast<int32_t>(max_blocks + 2);
    in.counts.push_back(c);
  }
  return in;
}

void check_sum(Pair& p, const SumInput& in) {
  const auto requests = static_cast<uint32_t>(in.counts.size());
  const size_t cells = p.cpu.geometry().cells();
  DeviceBuffer<int32_t> table(in.table);
  DeviceBuffer<int32_t> counts(in.counts);
  DeviceBuffer<int16_t> out(size_t{requests} * cells);
  out.poison();
  Status launched =
      p.gpu->sum_requests(table.ptr, in.max_blocks, counts.ptr, requests, out.ptr, nullptr);
  ASSERT_TRUE(launched.is_ok()) << launched.to_string();
  std::vector<int16_t> want(size_t{requests} * cells, -7);
  std::vector<uint32_t> want_per_request(requests, 99);
  auto want_flags = p.cpu.sum_requests(in.table, in.max_blocks, in.counts, want, want_per_request);
  ASSERT_TRUE(want_flags.is_ok()) << want_flags.status().to_string();
  EXPECT_EQ(out.to_host(), want);
  auto per_request = p.gpu->request_flags(requests, nullptr);
  ASSERT_TRUE(per_request.is_ok());
  EXPECT_EQ(per_request.value(), want_per_request);
  auto flags = p.gpu->take_errors(nullptr);
  ASSERT_TRUE(flags.is_ok());
  EXPECT_EQ(flags.value(), want_flags.value());
}

// ---- device cases -------------------------------------------------------------

struct Case {
  Geometry geometry;
  uint32_t block_size;
  uint32_t num_blocks;
  uint32_t tokens;
};

TEST(GpuFootprintsTest, steps_match_the_cpu_reference_cell_for_cell) {
  SKIP_WITHOUT_DEVICE();
  const Case cases[] = {
      {{48, 128, 8}, 16, 96, 700},   // the paper's model
      {{48, 128, 8}, 64, 40, 1500},  // larger blocks
      {{5, 30, 3}, 7, 50, 333},      // E not a multiple of 4 (padded rows), odd block size
      {{3, 2, 2}, 255, 4, 900},      // tiny E, largest block size
      {{2, 16, 12}, 5, 20, 64},      // k beyond the 8 picks preloaded in registers
      {{3, 20, 10}, 16, 40, 500},    // k = 10: picks not 16-byte aligned (scalar preload)
      {{2, 4096, 8}, 16, 24, 300},   // the most experts: 3 warps' histograms per CTA
  };
  // The even steps run on a stream of their own, where the accumulate kernel
  // is launched with programmatic dependent launch (the legacy stream may
  // refuse it and fall back to an ordinary launch).
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::mt19937_64 rng(2024);
  for (const Case& c : cases)
    for (uint32_t id_bytes : {4u, 8u})
      for (bool hostile : {false, true}) {
        SCOPED_TRACE(c.geometry.to_string() + " block " + std::to_string(c.block_size) + " int" +
                     std::to_string(8 * id_bytes) + (hostile ? " hostile" : ""));
        Pair p = make_pair(c.geometry, c.block_size, c.num_blocks);
        for (int step = 0; step < 4; ++step) {
          // All layers at once, then the same kind of step one layer at a time.
          check_step(p,
                     random_step(rng, c.geometry, c.geometry.layers, c.block_size, c.num_blocks,
                                 c.tokens, hostile),
                     id_bytes, -1, step % 2 == 0 ? stream : nullptr);
          if (HasFatalFailure()) return;
          const auto layer = static_cast<int32_t>(rng() % c.geometry.layers);
          check_step(p,
                     random_step(rng, c.geometry, 1, c.block_size, c.num_blocks, c.tokens, hostile),
                     id_bytes, layer, step % 2 == 0 ? stream : nullptr);
          if (HasFatalFailure()) return;
          check_sum(p, random_tables(rng, 1 + rng() % 8, 1 + rng() % 40, c.num_blocks, hostile));
          if (HasFatalFailure()) return;
        }
      }
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(GpuFootprintsTest, request_sum_split_across_ctas_matches_and_saturates_past_32767) {
  SKIP_WITHOUT_DEVICE();
  // Full blocks of 255 tokens on one cell: 129 of them pass int16; long block
  // tables make the sum kernel split each request over several CTAs.
  const Geometry g{1, 1, 1};
  Pair p = make_pair(g, 255, 300, 4);
  std::mt19937_64 rng(5);
  StepInput fill;
  for (int64_t slot = 0; slot < 300 * 255; ++slot) {
    fill.slots.push_back(slot);
    fill.ids.push_back(0);
  }
  check_step(p, fill, 4, -1);
  ASSERT_FALSE(HasFatalFailure());
  SumInput in;
  in.max_blocks = 3000;  // entries repeat blocks: sums up to 3000 * 255
  in.table.resize(4 * in.max_blocks);
  for (auto& b : in.table) b = static_cast<int32_t>(rng() % 300);
  in.counts = {128, 129, 3000, 1000};
  check_sum(p, in);
}

// Many requests leave one CTA per request (sum_splits), so a long block
// table is summed in several chunks of 256 block ids, each at the packed
// 16-bit accumulators' bound (256 rows of cells up to 255).
TEST(GpuFootprintsTest, request_sum_of_one_cta_over_several_chunks_matches) {
  SKIP_WITHOUT_DEVICE();
  const Geometry g{1, 3, 1};
  const uint32_t requests = 600;
  Pair p = make_pair(g, 255, 300, requests);
  // Every block full. Blocks below 150 have all their picks on expert 0 (a
  // cell of 255); the others alternate experts 0 and 2.
  StepInput fill;
  for (int64_t slot = 0; slot < 300 * 255; ++slot) {
    fill.slots.push_back(slot);
    fill.ids.push_back(slot < 150 * 255 || slot % 2 == 0 ? 0 : 2);
  }
  check_step(p, fill, 4, -1);
  ASSERT_FALSE(HasFatalFailure());
  std::mt19937_64 rng(9);
  SumInput in = random_tables(rng, requests, 700, 300, false);
  in.counts[0] = 700;  // three chunks: 256 + 256 + 188
  in.counts[1] = 256;  // exactly one whole chunk
  // 700 copies of block 0: each chunk's packed sums reach 256 * 255 = 65280.
  std::fill_n(in.table.begin() + 2 * 700, 700, 0);
  in.counts[2] = 700;
  check_sum(p, in);
}

TEST(GpuFootprintsTest, bad_arguments_are_rejected_before_any_kernel_runs) {
  SKIP_WITHOUT_DEVICE();
  Pair p = make_pair({4, 8, 2}, 16, 8);
  DeviceBuffer<int32_t> ids(std::vector<int32_t>(8, 0));
  DeviceBuffer<int64_t> slots(std::vector<int64_t>(4, 0));
  std::vector<int32_t> host_ids(32, 0);
  std::vector<int64_t> host_slots(4, 0);
  EXPECT_EQ(p.gpu->update_blocks(ids.ptr, 3, 4, 0, slots.ptr, nullptr).code(),
            Errc::invalid_argument);
  EXPECT_EQ(p.gpu->update_blocks(ids.ptr, 4, 4, 4, slots.ptr, nullptr).code(), Errc::out_of_range);
  EXPECT_EQ(p.gpu->update_blocks(host_ids.data(), 4, 4, -1, slots.ptr, nullptr).code(),
            Errc::invalid_argument);
  EXPECT_EQ(p.gpu->update_blocks(ids.ptr, 4, 4, 0, host_slots.data(), nullptr).code(),
            Errc::invalid_argument);
  EXPECT_EQ(p.gpu->update_blocks(nullptr, 4, 4, 0, slots.ptr, nullptr).code(),
            Errc::invalid_argument);
  EXPECT_TRUE(p.gpu->update_blocks(nullptr, 4, 0, 0, nullptr, nullptr).is_ok());  // no tokens

  DeviceBuffer<int32_t> counts(std::vector<int32_t>(9, 1));
  DeviceBuffer<int16_t> out(9 * 32);
  EXPECT_EQ(p.gpu->sum_requests(ids.ptr, 1, counts.ptr, 9, out.ptr, nullptr).code(),
            Errc::invalid_argument);  // 9 > max_requests 8
  EXPECT_EQ(p.gpu->sum_requests(ids.ptr, kMaxBlocksPerRequest + 1, counts.ptr, 1, out.ptr, nullptr)
                .code(),
            Errc::invalid_argument);
  std::vector<int16_t> host_out(32);
  EXPECT_EQ(p.gpu->sum_requests(ids.ptr, 1, counts.ptr, 1, host_out.data(), nullptr).code(),
            Errc::invalid_argument);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the context is still healthy
  auto flags = p.gpu->take_errors(nullptr);
  ASSERT_TRUE(flags.is_ok());
  EXPECT_EQ(flags.value(), 0u);
  EXPECT_EQ(cpu_rows(p.cpu), p.gpu->copy_rows(nullptr).value());
}

// ---- ring hand-off through a live in-process daemon end ---------------------

class Collector : public shm::RecordHandler {
 public:
  struct Got {
    std::string id;
    std::vector<int16_t> counts;
  };
  std::vector<Got> footprints;
  std::vector<std::string> rejected;
  void on_footprint(const shm::FootprintIn& f) override {
    footprints.push_back({std::string(f.request_id), {f.counts.begin(), f.counts.end()}});
  }
  void on_complete(uint32_t, std::string_view) override {}
  void on_worker_report(uint32_t, uint32_t, uint32_t, float) override {}
  void on_worker_control(uint32_t, uint32_t, shm::WorkerOp) override {}
  void on_rejected(uint32_t, shm::RejectReason, std::string_view id, const Status&) override {
    rejected.emplace_back(id);
  }
  // Footprint `got` arrived for `id` with request `r`'s counts of `want`
  // ([requests][cells]).
  void expect_footprint(size_t got, std::string_view id, const std::vector<int16_t>& want, size_t r,
                        size_t cells) const {
    ASSERT_LT(got, footprints.size());
    EXPECT_EQ(footprints[got].id, id);
    EXPECT_EQ(footprints[got].counts,
              std::vector<int16_t>(want.begin() + r * cells, want.begin() + (r + 1) * cells))
        << "request " << r;
  }
  // Polls until `records` footprints and rejections arrived, for at most 5 s.
  void collect(shm::Host& host, size_t records) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (footprints.size() + rejected.size() < records &&
           std::chrono::steady_clock::now() < deadline)
      host.poll(*this);
  }
};

// The daemon's end of a ring on a private instance, and one client. Made
// after the CUDA set-up, so its heartbeat is fresh at the first claim.
struct DaemonEnd {
  shm::SegmentConfig config;
  std::unique_ptr<shm::Host> host;
  std::unique_ptr<shm::Client> client;
  DaemonEnd(const std::string& tag, uint32_t ring_bytes) {
    config.instance = tag + std::to_string(getpid());
    config.ring_bytes = ring_bytes;
    // Small: containers' /dev/shm is small.
    config.max_clients = 2;
    config.decision_slots = 1024;
    auto h = shm::Host::create(config);
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    if (!h) return;
    host = std::move(*h);
    auto c = shm::Client::open(config.instance);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    if (c) client = std::move(*c);
  }
  bool ready() const { return host != nullptr && client != nullptr; }
};

TEST(GpuFootprintsTest, push_writes_each_footprint_into_the_ring_and_poisons_flagged_ones) {
  SKIP_WITHOUT_DEVICE();
  const Geometry g{48, 128, 8};
  Pair p = make_pair(g, 16, 64, 12);
  std::mt19937_64 rng(77);
  check_step(p, random_step(rng, g, g.layers, 16, 64, 1000, false), 4, -1);
  ASSERT_FALSE(HasFatalFailure());
  DaemonEnd end("h6gpu", 1u << 17);  // a ring of 128 KiB: about 10 footprints of 12 KiB
  ASSERT_TRUE(end.ready());
  SumInput in = random_tables(rng, 3, 10, 64, false);
  in.table[1 * 10] = 64;  // request 1 names a block past the last: must not be routed
  in.counts[1] = std::max(in.counts[1], 1);
  DeviceBuffer<int32_t> table(in.table);
  DeviceBuffer<int32_t> counts(in.counts);
  const std::vector<std::string_view> ids = {"req-a", "req-b", "req-c"};
  Status pushed = p.gpu->push_requests(*end.client, ids, table.ptr, 10, counts.ptr, nullptr);
  ASSERT_TRUE(pushed.is_ok()) << pushed.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<int16_t> want(3 * g.cells());
  ASSERT_TRUE(p.cpu.sum_requests(in.table, 10, in.counts, want).is_ok());
  Collector seen;
  seen.collect(*end.host, 3);
  ASSERT_EQ(seen.footprints.size(), 2u);
  seen.expect_footprint(0, "req-a", want, 0, g.cells());
  seen.expect_footprint(1, "req-c", want, 2, g.cells());
  EXPECT_EQ(seen.rejected, std::vector<std::string>{"req-b"});
  auto flags = p.gpu->take_errors(nullptr);
  ASSERT_TRUE(flags.is_ok());
  EXPECT_EQ(flags.value(), kRowErrBlockId);

  // A step that cannot fit even an empty ring is a capacity error, never a
  // ring_full to retry forever; nothing of it is claimed.
  SumInput big = random_tables(rng, 12, 10, 64, false);
  DeviceBuffer<int32_t> big_table(big.table);
  DeviceBuffer<int32_t> big_counts(big.counts);
  std::vector<std::string> names;
  for (int i = 0; i < 12; ++i) names.push_back("big-" + std::to_string(i));
  const std::vector<std::string_view> big_ids(names.begin(), names.end());
  EXPECT_EQ(
      p.gpu->push_requests(*end.client, big_ids, big_table.ptr, 10, big_counts.ptr, nullptr).code(),
      Errc::capacity);
  EXPECT_TRUE(end.client->push_complete("after-capacity").is_ok());  // no claim left pending
}

// Pushes enqueue work and return: a second step's push goes out while the
// first step's hand-off may still be in flight, and the records arrive in
// call order, even though the second push runs on another stream (it waits
// on the GPU for the first's hand-offs, whose staging it would overwrite).
TEST(GpuFootprintsTest, pushes_of_consecutive_steps_do_not_wait_for_the_gpu_across_streams) {
  SKIP_WITHOUT_DEVICE();
  const Geometry g{3, 9, 2};  // 27 cells: pairs of cells, then one alone
  Pair p = make_pair(g, 8, 32, 40);
  std::mt19937_64 rng(31);
  check_step(p, random_step(rng, g, g.layers, 8, 32, 200, false), 8, -1);
  ASSERT_FALSE(HasFatalFailure());
  DaemonEnd end("h6gpu2", 1u << 20);
  ASSERT_TRUE(end.ready());
  cudaStream_t stream = nullptr, other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  // 40 requests in the first step: two hand-off launches (32 + 8).
  SumInput first = random_tables(rng, 40, 6, 32, false);
  SumInput second = random_tables(rng, 3, 6, 32, false);
  DeviceBuffer<int32_t> table1(first.table), counts1(first.counts);
  DeviceBuffer<int32_t> table2(second.table), counts2(second.counts);
  std::vector<std::string> names;
  for (int i = 0; i < 43; ++i) names.push_back("step-req-" + std::to_string(i));
  const std::vector<std::string_view> ids1(names.begin(), names.begin() + 40);
  const std::vector<std::string_view> ids2(names.begin() + 40, names.end());
  Status pushed = p.gpu->push_requests(*end.client, ids1, table1.ptr, 6, counts1.ptr, stream);
  ASSERT_TRUE(pushed.is_ok()) << pushed.to_string();
  pushed = p.gpu->push_requests(*end.client, ids2, table2.ptr, 6, counts2.ptr, other);
  ASSERT_TRUE(pushed.is_ok()) << pushed.to_string();
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  std::vector<int16_t> want(43 * g.cells());
  ASSERT_TRUE(
      p.cpu.sum_requests(first.table, 6, first.counts, std::span(want).first(40 * g.cells()))
          .is_ok());
  ASSERT_TRUE(
      p.cpu.sum_requests(second.table, 6, second.counts, std::span(want).subspan(40 * g.cells()))
          .is_ok());
  Collector seen;
  seen.collect(*end.host, 43);
  ASSERT_EQ(seen.footprints.size(), 43u);
  EXPECT_TRUE(seen.rejected.empty());
  for (size_t r = 0; r < 43; ++r) seen.expect_footprint(r, names[r], want, r, g.cells());
  // Every claim is committed: the client's CPU pushes flow again.
  EXPECT_TRUE(end.client->push_complete("step-req-0").is_ok());
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
}

// Only the client's ring is registered, so a restarted daemon's new segment
// needs a registration of its own: the push after the client re-attached
// registers the new ring (releasing the old one) and lands there.
TEST(GpuFootprintsTest, a_push_after_the_daemon_restarted_lands_in_the_new_ring) {
  SKIP_WITHOUT_DEVICE();
  const Geometry g{4, 16, 2};
  Pair p = make_pair(g, 8, 32, 4);
  std::mt19937_64 rng(53);
  check_step(p, random_step(rng, g, g.layers, 8, 32, 100, false), 4, -1);
  ASSERT_FALSE(HasFatalFailure());
  DaemonEnd end("h6gpu3", 1u << 16);
  ASSERT_TRUE(end.ready());
  SumInput in = random_tables(rng, 2, 4, 32, false);
  DeviceBuffer<int32_t> table(in.table), counts(in.counts);
  std::vector<int16_t> want(2 * g.cells());
  ASSERT_TRUE(p.cpu.sum_requests(in.table, 4, in.counts, want).is_ok());
  const auto push_and_collect = [&](const std::vector<std::string_view>& ids) {
    Status pushed = p.gpu->push_requests(*end.client, ids, table.ptr, 4, counts.ptr, nullptr);
    EXPECT_TRUE(pushed.is_ok()) << pushed.to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Collector seen;
    seen.collect(*end.host, 2);
    EXPECT_TRUE(seen.rejected.empty());
    EXPECT_EQ(seen.footprints.size(), 2u);
    for (size_t r = 0; r < 2; ++r) seen.expect_footprint(r, ids[r], want, r, g.cells());
  };
  push_and_collect({"before-0", "before-1"});
  end.host.reset();  // the daemon stops: DRAINING, unlink
  const std::vector<std::string_view> lost = {"lost"};
  EXPECT_EQ(p.gpu->push_requests(*end.client, lost, table.ptr, 4, counts.ptr, nullptr).code(),
            Errc::no_daemon);
  auto restarted = shm::Host::create(end.config);
  ASSERT_TRUE(restarted.is_ok()) << restarted.status().to_string();
  end.host = std::move(*restarted);
  push_and_collect({"after-0", "after-1"});
  EXPECT_EQ(end.client->reattachments(), 1u);
}

}  // namespace
}  // namespace eldr::gpu
