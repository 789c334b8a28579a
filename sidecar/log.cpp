#include "log.hpp"

#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace eldr::sidecar {

namespace {
std::atomic<LogLevel> g_level{LogLevel::info};
}

void set_log_level(LogLevel level) noexcept { g_level.store(level, std::memory_order_relaxed); }

bool log_enabled(LogLevel level) noexcept {
  return level >= g_level.load(std::memory_order_relaxed);
}

void log_line(LogLevel level, const char* format, ...) {
  char message[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  gmtime_r(&ts.tv_sec, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &utc);
  // One fprintf per line: stdio locks the stream, so lines never interleave.
  std::fprintf(stderr, "%s.%03ldZ eldrd %s: %s\n", when, ts.tv_nsec / 1000000,
               log_level_name(level), message);
}

}  // namespace eldr::sidecar
