#include "predictor_saver.hpp"

#include <sys/stat.h>

#include <chrono>

#include "log.hpp"

namespace eldr::sidecar {

PredictorSaver::PredictorSaver(const DaemonConfig& config, Service& service, Metrics& metrics)
    : m_config(config.predictor),
      m_path(config.predictor.target(config.table)),
      m_service(service),
      m_metrics(metrics) {
  const auto table = m_service.router().table();
  m_saved_table = table.get();
  m_saved_learned = table->predictor ? table->predictor->info().learned : 0;
  m_stamp = stamp_of(m_path);
  if (!m_path.empty() && m_config.save_interval_s != 0) m_thread = std::thread([this] { loop(); });
}

PredictorSaver::~PredictorSaver() { stop(); }

PredictorSaver::FileStamp PredictorSaver::stamp_of(const std::string& path) {
  FileStamp s;
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return s;
  s.exists = true;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  return s;
}

void PredictorSaver::adopt_file() {
  std::lock_guard lock(m_mutex);
  m_stamp = stamp_of(m_path);
  const auto table = m_service.router().table();
  m_saved_table = table.get();
  m_saved_learned = table->predictor ? table->predictor->info().learned : 0;
}

Status PredictorSaver::save_now() {
  if (m_path.empty())
    return {Errc::state, "no table file and no predictor.save_path: nothing to save to"};
  std::lock_guard lock(m_mutex);
  const auto table = m_service.router().table();
  if (!table->predictor) return Status::ok();
  const uint64_t learned = table->predictor->info().learned;
  if (table.get() == m_saved_table && learned == m_saved_learned) return Status::ok();
  // Someone else wrote the file (a new table, not reloaded yet): never overwrite it.
  if (const FileStamp now = stamp_of(m_path); now.exists && !(now == m_stamp)) {
    m_metrics.count_predictor_save(false);
    return {Errc::state, m_path +
                             " changed since eldrd read or wrote it: not overwritten (reload it, "
                             "or set predictor.save_path)"};
  }
  const auto started = std::chrono::steady_clock::now();
  Status s = save_table(*table, m_path);
  m_metrics.count_predictor_save(s.is_ok());
  if (!s) return s;
  m_stamp = stamp_of(m_path);
  m_saved_table = table.get();
  m_saved_learned = learned;
  ELDR_LOG(
      info, "saved the table with its predictor (%u prototypes, %llu learned) to %s in %lld ms",
      table->predictor->info().prototypes, static_cast<unsigned long long>(learned), m_path.c_str(),
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - started)
                                 .count()));
  return s;
}

void PredictorSaver::loop() {
  const auto period = std::chrono::seconds(m_config.save_interval_s);
  std::unique_lock lock(m_stop_mutex);
  while (!m_stop_cv.wait_for(lock, period, [this] { return m_stop; })) {
    lock.unlock();
    if (Status s = save_now(); !s)
      ELDR_LOG(warn, "predictor save failed: %s", s.to_string().c_str());
    lock.lock();
  }
}

void PredictorSaver::stop() {
  {
    std::lock_guard lock(m_stop_mutex);
    m_stop = true;
  }
  m_stop_cv.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

void PredictorSaver::stop_and_save() {
  stop();
  if (!m_config.save_on_exit || m_path.empty()) return;
  if (Status s = save_now(); !s)
    ELDR_LOG(warn, "predictor save at exit failed: %s", s.to_string().c_str());
}

}  // namespace eldr::sidecar
