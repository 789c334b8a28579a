// Times the footprint kernels at the paper's shapes (Qwen3-30B-A3B: L=48,
// E=128, k=8; 8,192 tokens per step; block sizes 16 and 64; int32 and int64
// ids) with CUDA events (median of many runs after warm-up), against the
// device-to-device copy bandwidth measured in the same run. Every shape is
// first checked element by element against the CPU reference
// (eldr::BlockRows); any mismatch or unexpected error flag exits 1.
// Prints a markdown table. Run by cuda/check_gpu.sh.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "eldr/cuda/gpu_footprints.hpp"
#include "eldr/shm.hpp"
#include "eldr/signature_cache.hpp"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "gpu_bench: %s\n", what.c_str());
  std::exit(1);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

void check(const eldr::Status& s, const char* what) {
  if (!s) die(std::string(what) + ": " + s.to_string());
}

template <class T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&d), std::max<size_t>(1, host.size()) * sizeof(T)),
        "cudaMalloc");
  check(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "H2D");
  // From pageable memory the copy may return before its DMA is done, and the
  // bench's non-blocking stream does not wait for the legacy stream.
  check(cudaDeviceSynchronize(), "H2D");
  return d;
}

// Keeps the GPU busy while the host enqueues a timed run, so the events time
// the GPU's work, not the host's launch overhead.
__global__ void spin_kernel(uint64_t ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  while (now - start < ns);
}

// Median GPU time in microseconds of `body` over `runs` after `warmup`.
template <class F>
double median_us(cudaStream_t stream, int warmup, int runs, F&& body) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    spin_kernel<<<1, 1, 0, stream>>>(200000);
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    body();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    us.push_back(ms * 1000.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Device-to-device copy bandwidth (bytes read + written per second).
double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "cudaMemset");
  const double us = median_us(stream, 3, 15, [&] {
    check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "D2D");
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (us * 1e-6);
}

struct Shape {
  uint32_t block_size;
  uint32_t id_bytes;
};

struct Row {
  Shape shape;
  double update_us, floor_us, sum_us, push_us, push_host_us, path_us;
  double update_bytes;
};

// The daemon's end of a real ring, in a thread: drains every record as eldrd
// would (heartbeat included) and keeps the first `keep` footprints.
class RingDrain : public eldr::shm::RecordHandler {
 public:
  struct Kept {
    std::string id;
    std::vector<int16_t> counts;
  };
  RingDrain(eldr::shm::Host& host, size_t keep) : m_host(host), m_keep(keep) {
    m_thread = std::thread([this] { run(); });
  }
  ~RingDrain() {
    m_stop = true;
    m_thread.join();
  }
  // Waits (bounded) until `footprints` arrived; any rejection is fatal.
  void wait_for(uint64_t footprints) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (m_footprints.load() < footprints && m_rejected.load() == 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (m_rejected.load() != 0) die("the daemon end rejected a record: " + m_why);
    if (m_footprints.load() != footprints)
      die("the daemon end saw " + std::to_string(m_footprints.load()) + " footprints, not " +
          std::to_string(footprints));
  }
  std::vector<Kept> kept() {
    std::lock_guard lock(m_mutex);
    return m_kept;
  }

  void on_footprint(const eldr::shm::FootprintIn& f) override {
    {
      std::lock_guard lock(m_mutex);
      if (m_kept.size() < m_keep)
        m_kept.push_back({std::string(f.request_id), {f.counts.begin(), f.counts.end()}});
    }
    m_footprints.fetch_add(1);
  }
  void on_complete(uint32_t, std::string_view) override {}
  void on_worker_report(uint32_t, uint32_t, uint32_t, float) override {}
  void on_worker_control(uint32_t, uint32_t, eldr::shm::WorkerOp) override {}
  void on_rejected(uint32_t, eldr::shm::RejectReason, std::string_view id,
                   const eldr::Status& why) override {
    {
      std::lock_guard lock(m_mutex);
      m_why = std::string(id) + ": " + why.to_string();
    }
    m_rejected.fetch_add(1);
  }

 private:
  void run() {
    auto beat = std::chrono::steady_clock::now();
    while (!m_stop.load()) {
      if (m_host.poll(*this) == 0) m_host.wait_for_work(std::chrono::microseconds(1000));
      if (std::chrono::steady_clock::now() - beat > std::chrono::milliseconds(100)) {
        m_host.maintain();
        beat = std::chrono::steady_clock::now();
      }
    }
  }
  eldr::shm::Host& m_host;
  const size_t m_keep;
  std::mutex m_mutex;
  std::vector<Kept> m_kept;
  std::string m_why;
  std::atomic<uint64_t> m_footprints{0}, m_rejected{0};
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

constexpr uint32_t kLayers = 48, kExperts = 128, kTopK = 8, kTokens = 8192;
constexpr uint32_t kRequests = 4;       // each prefills 2,048 tokens this step
constexpr uint32_t kPrefixBlocks = 32;  // cached blocks per request (prefix hits)

Row run_shape(const Shape& shape, double copy_bw, cudaStream_t stream, int runs) {
  const eldr::Geometry g{kLayers, kExperts, kTopK};
  const uint32_t bs = shape.block_size;
  const uint32_t step_blocks = kTokens / bs;
  const uint32_t num_blocks = 2 * step_blocks + kRequests * kPrefixBlocks;
  std::mt19937_64 rng(bs * 131 + shape.id_bytes);

  // Requests own random physical blocks: a cached prefix, then this step's.
  std::vector<int32_t> free_blocks(num_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  const uint32_t per_request = kTokens / kRequests / bs;
  const uint32_t max_blocks = kPrefixBlocks + per_request;
  std::vector<int32_t> table(kRequests * max_blocks);
  for (auto& b : table) {
    b = free_blocks.back();
    free_blocks.pop_back();
  }
  std::vector<int64_t> slots(kTokens);
  for (uint32_t t = 0; t < kTokens; ++t) {
    const uint32_t r = t / (kTokens / kRequests), i = t % (kTokens / kRequests);
    slots[t] = int64_t{table[r * max_blocks + kPrefixBlocks + i / bs]} * bs + i % bs;
  }
  std::vector<int32_t> counts(kRequests, static_cast<int32_t>(max_blocks));
  auto random_ids = [&](uint32_t tokens) {
    std::vector<int32_t> ids(size_t{tokens} * kLayers * kTopK);
    std::uniform_int_distribution<int32_t> expert(0, kExperts - 1);
    for (size_t tl = 0; tl < size_t{tokens} * kLayers; ++tl)
      for (uint32_t j = 0; j < kTopK; ++j) {
        int32_t e;
        do e = expert(rng);
        while (std::find(&ids[tl * kTopK], &ids[tl * kTopK] + j, e) != &ids[tl * kTopK] + j);
        ids[tl * kTopK + j] = e;
      }
    return ids;
  };

  eldr::gpu::Options o;
  o.geometry = g;
  o.block_size = bs;
  o.num_blocks = num_blocks;
  o.max_requests = kRequests;
  auto created = eldr::gpu::GpuFootprints::create(o);
  check(created.status(), "GpuFootprints::create");
  auto& sut = *created.value();
  auto ref = eldr::BlockRows::create(g, num_blocks, bs);
  check(ref.status(), "BlockRows::create");

  auto upload_ids = [&](const std::vector<int32_t>& ids) -> void* {
    if (shape.id_bytes == 4) return device_copy(ids);
    return device_copy(std::vector<int64_t>(ids.begin(), ids.end()));
  };
  // Prefix blocks: filled by an earlier step (full blocks, no reset pending).
  {
    std::vector<int64_t> prefix_slots;
    for (uint32_t r = 0; r < kRequests; ++r)
      for (uint32_t i = 0; i < kPrefixBlocks * bs; ++i)
        prefix_slots.push_back(int64_t{table[r * max_blocks + i / bs]} * bs + i % bs);
    const auto ids = random_ids(static_cast<uint32_t>(prefix_slots.size()));
    void* d_ids = upload_ids(ids);
    int64_t* d_slots = device_copy(prefix_slots);
    check(sut.update_blocks(d_ids, shape.id_bytes, static_cast<uint32_t>(prefix_slots.size()), -1,
                            d_slots, stream),
          "update_blocks (prefix)");
    check(ref.value().accumulate(ids, prefix_slots).status(), "BlockRows::accumulate");
    cudaFree(d_ids);
    cudaFree(d_slots);
  }
  const auto ids = random_ids(kTokens);
  void* d_ids = upload_ids(ids);
  int64_t* d_slots = device_copy(slots);
  int32_t* d_table = device_copy(table);
  int32_t* d_counts = device_copy(counts);
  int16_t* d_out = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&d_out), kRequests * g.cells() * sizeof(int16_t)),
        "cudaMalloc");
  check(cudaMemsetAsync(d_out, 0xA5, kRequests * g.cells() * sizeof(int16_t), stream), "poison");

  // Correctness at this shape first.
  check(sut.update_blocks(d_ids, shape.id_bytes, kTokens, -1, d_slots, stream), "update_blocks");
  check(sut.sum_requests(d_table, max_blocks, d_counts, kRequests, d_out, stream), "sum_requests");
  auto flags = ref.value().accumulate(ids, slots);
  check(flags.status(), "BlockRows::accumulate");
  std::vector<int16_t> want(kRequests * g.cells()), got(want.size());
  check(ref.value().sum_requests(table, max_blocks, counts, want).status(), "sum_requests (CPU)");
  check(cudaMemcpyAsync(got.data(), d_out, got.size() * sizeof(int16_t), cudaMemcpyDeviceToHost,
                        stream),
        "D2H");
  auto rows = sut.copy_rows(stream);
  check(rows.status(), "copy_rows");
  std::vector<uint8_t> want_rows;
  for (uint32_t b = 0; b < num_blocks; ++b) {
    auto r = ref.value().row(b);
    want_rows.insert(want_rows.end(), r.begin(), r.end());
  }
  auto gpu_flags = sut.take_errors(stream);
  check(gpu_flags.status(), "take_errors");
  if (rows.value() != want_rows) die("block rows differ from the CPU reference");
  if (got != want) die("request footprints differ from the CPU reference");
  if (gpu_flags.value() != 0 || flags.value() != 0) die("unexpected error flags");

  // The real hand-off: push_requests into the ring of an in-process daemon
  // end, drained by a thread as eldrd would. Its records are checked first.
  eldr::shm::SegmentConfig config;
  config.instance = "eldrgpubench" + std::to_string(getpid());
  // Small: containers' /dev/shm is small.
  config.max_clients = 1;
  config.ring_bytes = 1u << 20;  // 20 steps of 4 footprints
  config.decision_slots = 64;
  auto host = eldr::shm::Host::create(config);
  check(host.status(), "shm::Host::create");
  auto client = eldr::shm::Client::open(config.instance);
  check(client.status(), "shm::Client::open");
  RingDrain drain(*host.value(), kRequests);
  std::vector<std::string> names;
  for (uint32_t r = 0; r < kRequests; ++r) names.push_back("bench-" + std::to_string(r));
  const std::vector<std::string_view> request_ids(names.begin(), names.end());
  auto push = [&] {
    // ring_full only while the drain thread is behind: wait for it (bounded).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      const eldr::Status st =
          sut.push_requests(*client.value(), request_ids, d_table, max_blocks, d_counts, stream);
      if (st.code() != eldr::Errc::ring_full || std::chrono::steady_clock::now() > deadline)
        return check(st, "push_requests");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  };
  push();
  check(cudaStreamSynchronize(stream), "sync");
  drain.wait_for(kRequests);
  const auto kept = drain.kept();
  for (uint32_t r = 0; r < kRequests; ++r)
    if (kept[r].id != names[r] ||
        !std::equal(kept[r].counts.begin(), kept[r].counts.end(), want.begin() + r * g.cells(),
                    want.begin() + (r + 1) * g.cells()))
      die("the ring's footprint " + std::to_string(r) + " differs from the CPU reference");

  Row row{shape, 0, 0, 0, 0, 0, 0, 0};
  const int warmup = 20;
  row.update_us = median_us(stream, warmup, runs, [&] {
    check(sut.update_blocks(d_ids, shape.id_bytes, kTokens, -1, d_slots, stream), "update");
  });
  row.sum_us = median_us(stream, warmup, runs, [&] {
    check(sut.sum_requests(d_table, max_blocks, d_counts, kRequests, d_out, stream), "sum");
  });
  std::vector<double> host_us;
  row.push_us = median_us(stream, warmup, runs, [&] {
    const auto start = std::chrono::steady_clock::now();
    push();
    host_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  });
  row.path_us = median_us(stream, warmup, runs, [&] {
    check(sut.update_blocks(d_ids, shape.id_bytes, kTokens, -1, d_slots, stream), "update");
    push();
  });
  check(cudaStreamSynchronize(stream), "sync");
  drain.wait_for(uint64_t{kRequests} * (1 + 2 * (warmup + runs)));
  std::sort(host_us.begin(), host_us.end());
  row.push_host_us = host_us[host_us.size() / 2];
  auto after = sut.take_errors(stream);
  check(after.status(), "take_errors");
  if (after.value() != 0) die("error flags raised during timing");

  // Floor: the ids and slots read once, each touched row slice written once.
  row.update_bytes = static_cast<double>(ids.size()) * shape.id_bytes + kTokens * 8.0 +
                     static_cast<double>(step_blocks) * g.cells();
  row.floor_us = row.update_bytes / copy_bw * 1e6;

  cudaFree(d_ids);
  cudaFree(d_slots);
  cudaFree(d_table);
  cudaFree(d_counts);
  cudaFree(d_out);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: eldr_gpu_bench [--runs N]\n");
      return 2;
    }
  }
  if (!eldr::gpu::device_available()) die("no CUDA device");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const double copy_bw = copy_bandwidth(stream);

  std::printf(
      "Device: %s (%d SMs), D2D copy bandwidth %.0f GB/s (read+write), median of %d runs\n\n",
      prop.name, prop.multiProcessorCount, copy_bw / 1e9, runs);
  std::printf(
      "Qwen3-30B-A3B (L=48, E=128, k=8), 8,192 tokens per step, %u requests of 2,048 "
      "tokens + %u cached blocks each\n\n",
      kRequests, kPrefixBlocks);
  std::printf(
      "| block | ids | update µs | floor µs | update / floor | update GB/s | sum µs | "
      "push µs | push host µs | whole path µs |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& shape : {Shape{16, 4}, Shape{16, 8}, Shape{64, 4}, Shape{64, 8}}) {
    const Row r = run_shape(shape, copy_bw, stream, runs);
    std::printf("| %u | int%u | %.1f | %.1f | %.2f | %.0f | %.1f | %.1f | %.1f | %.1f |\n",
                shape.block_size, shape.id_bytes * 8, r.update_us, r.floor_us,
                r.update_us / r.floor_us, r.update_bytes / (r.update_us * 1e-6) / 1e9, r.sum_us,
                r.push_us, r.push_host_us, r.path_us);
  }
  std::printf(
      "\nfloor = (ids + slot mapping read once + touched rows written once) / copy "
      "bandwidth; push = push_requests of %u requests (sum, hand-off into a real ring in "
      "mapped shared memory, doorbell host function), GPU time; push host = the call's own "
      "time on the CPU; whole path = update + push, GPU time.\n",
      kRequests);
  cudaStreamDestroy(stream);
  return 0;
}
