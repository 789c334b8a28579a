#include "metrics.hpp"

#include <httplib.h>

#include <chrono>

namespace eldr::sidecar {

const char* rejection_name(Rejection r) noexcept {
  switch (r) {
    case Rejection::bad_header:
      return "bad_header";
    case Rejection::bad_checksum:
      return "bad_checksum";
    case Rejection::bad_payload:
      return "bad_payload";
    case Rejection::too_large:
      return "too_large";
    case Rejection::shape_mismatch:
      return "shape_mismatch";
    case Rejection::bad_footprint:
      return "bad_footprint";
    case Rejection::unknown_block:
      return "unknown_block";
    case Rejection::unsupported:
      return "unsupported";
    case Rejection::no_worker:
      return "no_worker";
    case Rejection::internal:
      return "internal";
    case Rejection::count_:
      break;
  }
  return "unknown";
}

const char* prompt_rejection_name(PromptRejection r) noexcept {
  switch (r) {
    case PromptRejection::no_predictor:
      return "no_predictor";
    case PromptRejection::bad_prompt:
      return "bad_prompt";
    case PromptRejection::too_long:
      return "too_long";
    case PromptRejection::no_worker:
      return "no_worker";
    case PromptRejection::internal:
      return "internal";
    case PromptRejection::count_:
      break;
  }
  return "unknown";
}

Rejection rejection_from(shm::RejectReason reason) noexcept {
  switch (reason) {
    case shm::RejectReason::bad_header:
      return Rejection::bad_header;
    case shm::RejectReason::bad_checksum:
      return Rejection::bad_checksum;
    case shm::RejectReason::bad_payload:
      return Rejection::bad_payload;
    case shm::RejectReason::too_large:
      return Rejection::too_large;
    case shm::RejectReason::count_:
      break;
  }
  return Rejection::internal;
}

Metrics::Metrics(uint32_t max_workers)
    : m_max_workers(max_workers),
      m_routed(new std::atomic<uint64_t>[size_t{max_workers} * kPolicyCount]()) {}

void Metrics::count_routed(uint32_t slot, Policy policy) noexcept {
  const auto p = static_cast<size_t>(policy);
  if (slot >= m_max_workers || p >= kPolicyCount) return;
  m_routed[size_t{slot} * kPolicyCount + p].fetch_add(1, kRelaxed);
}

void Metrics::count_rejected(Rejection r) noexcept {
  const auto i = static_cast<size_t>(r);
  if (i < m_rejected.size()) m_rejected[i].fetch_add(1, kRelaxed);
}

void Metrics::count_prompt_rejected(PromptRejection r) noexcept {
  const auto i = static_cast<size_t>(r);
  if (i < m_prompt_rejected.size()) m_prompt_rejected[i].fetch_add(1, kRelaxed);
}

uint64_t Metrics::prompt_rejected(PromptRejection r) const noexcept {
  const auto i = static_cast<size_t>(r);
  return i < m_prompt_rejected.size() ? m_prompt_rejected[i].load(kRelaxed) : 0;
}

void Metrics::set_predictor(const PredictorGauge& predictor) {
  std::lock_guard lock(m_tables);
  m_predictor = predictor;
}

uint64_t Metrics::rejected(Rejection r) const noexcept {
  const auto i = static_cast<size_t>(r);
  return i < m_rejected.size() ? m_rejected[i].load(kRelaxed) : 0;
}

void Metrics::set_workers(std::vector<WorkerGauge> workers) {
  std::lock_guard lock(m_tables);
  m_workers = std::move(workers);
}

void Metrics::set_clients(std::vector<shm::ClientInfo> clients) {
  std::lock_guard lock(m_tables);
  m_clients = std::move(clients);
}

void Metrics::set_pool(const PoolGauge& pool) {
  std::lock_guard lock(m_tables);
  m_pool = pool;
  m_pool_set = true;
}

void Metrics::set_router(const RouterGauge& router) {
  std::lock_guard lock(m_tables);
  m_router = router;
  m_router_set = true;
}

NsHistogram::NsHistogram(std::span<const uint64_t> bounds)
    : m_bounds(bounds), m_buckets(std::make_unique<std::atomic<uint64_t>[]>(bounds.size() + 1)) {}

void NsHistogram::observe(uint64_t ns) noexcept {
  size_t b = 0;
  while (b < m_bounds.size() && ns > m_bounds[b]) ++b;
  m_buckets[b].fetch_add(1, std::memory_order_relaxed);
  m_sum_ns.fetch_add(ns, std::memory_order_relaxed);
  m_count.fetch_add(1, std::memory_order_relaxed);
}

// ---- HTTP ----------------------------------------------------------------------

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> done{false};
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const Metrics& metrics, uint16_t port) {
  auto impl = std::make_unique<Impl>();
  impl->server.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  impl->server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("eldrd: metrics at /metrics\n", "text/plain");
  });
  // Loopback only: the metrics name workers and clients and carry no auth.
  if (!impl->server.bind_to_port("127.0.0.1", port))
    return Status{Errc::io, "metrics: cannot listen on 127.0.0.1:" + std::to_string(port)};
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    raw->server.listen_after_bind();
    raw->done.store(true);
  });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl), port));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl, uint16_t port)
    : m_impl(std::move(impl)), m_port(port) {}

MetricsServer::~MetricsServer() {
  // stop() is a no-op until the listen loop runs: repeat it until the thread ends.
  while (!m_impl->done.load()) {
    m_impl->server.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  m_impl->thread.join();
}

}  // namespace eldr::sidecar
