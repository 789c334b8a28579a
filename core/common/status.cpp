#include "eldr/status.hpp"

namespace eldr {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok:
      return "ok";
    case Errc::invalid_argument:
      return "invalid_argument";
    case Errc::shape_mismatch:
      return "shape_mismatch";
    case Errc::out_of_range:
      return "out_of_range";
    case Errc::io:
      return "io";
    case Errc::corrupt:
      return "corrupt";
    case Errc::unsupported:
      return "unsupported";
    case Errc::not_found:
      return "not_found";
    case Errc::no_worker:
      return "no_worker";
    case Errc::capacity:
      return "capacity";
    case Errc::state:
      return "state";
    case Errc::internal:
      return "internal";
    case Errc::ring_full:
      return "ring_full";
    case Errc::timeout:
      return "timeout";
    case Errc::no_daemon:
      return "no_daemon";
    case Errc::incompatible:
      return "incompatible";
    case Errc::out_of_memory:
      return "out_of_memory";
    case Errc::cuda:
      return "cuda";
    case Errc::permission:
      return "permission";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(errc_name(m_code)) + ": " + m_message;
}

}  // namespace eldr
