// The eldr._eldr extension module: a thin pybind11 layer over libeldr.so
// (eldr.h). The public package eldr/ re-exports it next to the exception
// classes (eldr/_errors.py).
#include <string>

#include "py_common.hpp"

namespace eldr_py {
namespace {

// The library this module was built against must speak the header's ABI; a
// stale libeldr.so on the loader path would otherwise misread every struct.
void check_abi(uint32_t library_abi) {
  if (library_abi != ELDR_ABI_VERSION)
    throw py::import_error("eldr: libeldr.so has ABI version " + std::to_string(library_abi) +
                           ", this module was built for ABI version " +
                           std::to_string(ELDR_ABI_VERSION) + ": rebuild the binding");
}

}  // namespace
}  // namespace eldr_py

PYBIND11_MODULE(_eldr, m) {
  namespace py = pybind11;
  using namespace eldr_py;
  check_abi(eldr_abi_version());

  m.doc() = "eldr: expert-locality-aware routing for MoE serving (C API binding)";
  m.attr("__version__") = eldr_version_string();
  m.attr("ABI_VERSION") = ELDR_ABI_VERSION;
  m.def("version_number", &eldr_version_number, "MAJOR * 10000 + MINOR * 100 + PATCH.");
  m.def("abi_version", &eldr_abi_version, "The loaded libeldr.so's ABI version.");
  m.def("cuda_available", &eldr_gpu_available, "True when libeldr.so was built with CUDA.");
  m.def("_check_abi", &check_abi, py::arg("library_abi"),
        "The import-time ABI check (ImportError on a mismatch); exposed for tests.");
  m.def(
      "status_name", [](int32_t status) { return std::string(eldr_status_name(status)); },
      py::arg("status"));
  m.def(
      "status_string", [](int32_t status) { return std::string(eldr_status_string(status)); },
      py::arg("status"));
  m.def(
      "policy_names",
      [] {
        py::list names;
        for (uint32_t id = 0; const char* name = eldr_policy_name(id); ++id) names.append(name);
        return names;
      },
      "Policy names by id: policy_names()[ELDR_POLICY_*].");

  register_error_translator();
  bind_decision(m);
  bind_table(m);
  bind_router(m);
  bind_client(m);
  bind_pool(m);
  bind_gpu(m);
  bind_engines(m);
}
