// eldrd's logger: one line per event on stderr ("2026-11-30T21:00:00.123Z
// info: ..."), which journald captures under systemd. printf-style so the
// routing thread formats nothing unless the level is enabled.
#pragma once

#include <atomic>

#include "config.hpp"

namespace eldr::sidecar {

void set_log_level(LogLevel level) noexcept;
bool log_enabled(LogLevel level) noexcept;
void log_line(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

#define ELDR_LOG(level, ...)                                                    \
  do {                                                                          \
    if (::eldr::sidecar::log_enabled(::eldr::sidecar::LogLevel::level))         \
      ::eldr::sidecar::log_line(::eldr::sidecar::LogLevel::level, __VA_ARGS__); \
  } while (0)

}  // namespace eldr::sidecar
