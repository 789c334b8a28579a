// Saving what the table's footprint predictor learned online ([predictor],
// docs/design.md §8): every save_interval_s on a thread of its own and at a
// clean stop, the table the router holds now, its predictor included, goes
// atomically (tmp + rename, save_table) to save_path, by default the table
// file the daemon loaded, so a restart resumes with what was learned. A save
// is skipped when nothing was learned since the last one, and refused
// (counted, logged) when the file changed since the daemon read or wrote it:
// a table an operator installed is never overwritten before it is reloaded.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "config.hpp"
#include "metrics.hpp"
#include "service.hpp"

namespace eldr::sidecar {

class PredictorSaver {
 public:
  // Starts the periodic saves (save_interval_s > 0); a target path empty
  // (no table file, no save_path): never saves.
  PredictorSaver(const DaemonConfig& config, Service& service, Metrics& metrics);
  ~PredictorSaver();  // stops the thread (no save: see stop_and_save)
  PredictorSaver(const PredictorSaver&) = delete;
  PredictorSaver& operator=(const PredictorSaver&) = delete;

  // Any thread: saves now when something was learned since the last save.
  // Errc::state: refused (the file changed under the daemon).
  Status save_now();
  // The file at the target path is the daemon's own again (after a reload
  // read it): saves resume.
  void adopt_file();
  // The clean stop: no more periodic saves, then the last one (save_on_exit).
  void stop_and_save();
  const std::string& path() const noexcept { return m_path; }

 private:
  struct FileStamp {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };
  static FileStamp stamp_of(const std::string& path);
  void loop();
  void stop();

  PredictorConfig m_config;
  std::string m_path;
  Service& m_service;
  Metrics& m_metrics;
  std::mutex m_mutex;  // one save at a time; the fields below
  FileStamp m_stamp;   // the file as the daemon last read or wrote it
  const void* m_saved_table = nullptr;
  uint64_t m_saved_learned = 0;
  std::thread m_thread;
  std::mutex m_stop_mutex;
  std::condition_variable m_stop_cv;
  bool m_stop = false;
};

}  // namespace eldr::sidecar
