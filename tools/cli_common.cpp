#include "cli_common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace eldr::cli {

int report(const Status& status) {
  if (status.is_ok()) return 0;
  std::fprintf(stderr, "eldr: %s\n", status.to_string().c_str());
  return 1;
}

ProgressBar::ProgressBar() : m_tty(isatty(STDERR_FILENO) == 1) {}

void ProgressBar::update(std::string_view stage, double fraction) {
  if (!m_tty) return;
  const int permille = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 1000.0);
  if (permille == m_last_permille && stage == m_stage) return;
  if (stage != m_stage && !m_stage.empty()) std::fputc('\n', stderr);
  m_last_permille = permille;
  m_stage = stage;
  constexpr int kWidth = 30;
  const int filled = permille * kWidth / 1000;
  std::fprintf(stderr, "\r%-16s [%.*s%*s] %5.1f%%", m_stage.c_str(), filled,
               "##############################", kWidth - filled, "", permille / 10.0);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (m_tty && !m_stage.empty()) std::fputc('\n', stderr);
  m_stage.clear();
}

Result<ClusterTable> load_any_table(const std::string& path, uint32_t json_top_k) {
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    JsonImportOptions o;
    o.top_k = json_top_k;
    return import_prototype_json_file(path, o);
  }
  return load_table(path);
}

uint64_t percentile(std::vector<uint64_t> samples, double p) {
  if (samples.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * samples.size()));
  const size_t idx = std::min(samples.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(idx),
                   samples.end());
  return samples[idx];
}

void add_predictor_options(CLI::App* app, PredictorOptions* o) {
  app->add_option("--predictor-capacity", o->capacity, "prototypes the predictor keeps")
      ->check(CLI::Range(1u, 1u << 20));
  app->add_option("--predictor-neighbours", o->neighbours, "prototypes averaged per prediction")
      ->check(CLI::Range(1u, 256u));
  app->add_option("--predictor-bandwidth", o->bandwidth, "softmax temperature over cosines")
      ->check(CLI::Range(1e-4f, 10.0f));
  app->add_option("--predictor-max-features", o->max_features, "features kept per prototype")
      ->check(CLI::Range(1u, 65535u));
}

}  // namespace eldr::cli
