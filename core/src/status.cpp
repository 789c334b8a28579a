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
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(errc_name(m_code)) + ": " + m_message;
}

}  // namespace eldr
