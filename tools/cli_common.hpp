// Shared helpers of the eldr CLI subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/predictor.hpp"
#include "eldr/status.hpp"

namespace eldr::cli {

// Prints "eldr: <status>" to stderr and returns exit code 1 (0 when ok).
int report(const Status& status);

// A one-line progress bar on stderr, drawn only when stderr is a terminal.
class ProgressBar {
 public:
  ProgressBar();
  void update(std::string_view stage, double fraction);
  void finish();

 private:
  bool m_tty;
  int m_last_permille = -1;
  std::string m_stage;
};

// Loads a cluster table: FlatBuffers file, or a prototype JSON (*.json).
Result<ClusterTable> load_any_table(const std::string& path, uint32_t json_top_k = 0);

// --predictor-capacity, --predictor-neighbours, --predictor-bandwidth,
// --predictor-max-features (eldr fit, eldr sim).
void add_predictor_options(CLI::App* app, PredictorOptions* options);

// Nearest-rank percentile of unsorted samples (copied).
uint64_t percentile(std::vector<uint64_t> samples, double percent);  // percent in (0, 100]

}  // namespace eldr::cli
