#include "py_common.hpp"

#include <cstring>
#include <exception>
#include <limits>

namespace eldr_py {

void raise_status(eldr_status_t status, const std::string& message) {
  throw StatusError(status, message);
}

void register_error_translator() {
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const StatusError& e) {
      try {
        py::object errors = py::module_::import("eldr._errors");
        py::object exc = errors.attr("_from_status")(e.status(), e.what());
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      } catch (py::error_already_set& nested) {
        nested.restore();  // the class lookup itself failed: report that
      }
    }
  });
}

void require_numpy(const char* what, bool is_argument) {
  static bool imported = false;  // read and written with the GIL held
  if (imported) return;
  try {
    py::module_::import("numpy");
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_ImportError)) throw;
    throw py::import_error(std::string("eldr: ") + (is_argument ? "the array argument " : "") +
                           what +
                           " needs NumPy, which this interpreter cannot import (pip install "
                           "numpy); import eldr and the calls without arrays work without it");
  }
  imported = true;
}

namespace {

void check_ndim(const py::array& array, py::ssize_t expected, const char* what) {
  if (array.ndim() == expected) return;
  const std::string shape = py::str(array.attr("shape")).cast<std::string>();
  const char* layout = expected == 1   ? "[workers]"
                       : expected == 2 ? "[layers][experts]"
                                       : "[requests][layers][experts]";
  raise_status(ELDR_E_SHAPE_MISMATCH, std::string(what) + " must be a " + std::to_string(expected) +
                                          "-D array " + layout + ", got shape " + shape);
}

}  // namespace

template <typename T>
IntArray<T> as_int_array(const py::handle& obj, py::ssize_t ndim, const char* what) {
  require_numpy(what, /*is_argument=*/true);
  // Fast path: the caller's buffer, borrowed.
  if (IntArray<T>::check_(obj)) {
    auto array = py::reinterpret_borrow<IntArray<T>>(obj);
    check_ndim(array, ndim, what);
    return array;
  }
  py::module_ numpy = py::module_::import("numpy");
  py::array array = numpy.attr("asarray")(obj);
  const char kind = array.dtype().kind();
  if (kind != 'i' && kind != 'u')
    throw py::type_error(std::string(what) + " must be an integer array (" +
                         py::str(py::dtype::of<T>()).cast<std::string>() +
                         " preferred), got dtype " + py::str(array.dtype()).cast<std::string>());
  check_ndim(array, ndim, what);
  if (array.size() > 0) {
    const py::object low = array.attr("min")();
    const py::object high = array.attr("max")();
    if (low < py::int_(std::numeric_limits<T>::min()) ||
        high > py::int_(std::numeric_limits<T>::max()))
      raise_status(ELDR_E_OUT_OF_RANGE, std::string(what) + " holds values in [" +
                                            py::str(low).cast<std::string>() + ", " +
                                            py::str(high).cast<std::string>() + "], outside " +
                                            py::str(py::dtype::of<T>()).cast<std::string>());
  }
  return py::cast<IntArray<T>>(array.attr("astype")(py::dtype::of<T>(), "C"));
}

template IntArray<int16_t> as_int_array(const py::handle&, py::ssize_t, const char*);
template IntArray<uint32_t> as_int_array(const py::handle&, py::ssize_t, const char*);

eldr_prompt_t PromptArg::view() const noexcept {
  eldr_prompt_t p{nullptr, 0, nullptr, 0};
  if (is_text) {
    p.text = text.data();
    p.text_len = text.size();
  } else {
    p.tokens = tokens.data();
    p.n_tokens = static_cast<size_t>(tokens.size());
  }
  return p;
}

PromptArg prompt_arg(const py::handle& obj, const char* what) {
  PromptArg out;
  if (PyUnicode_Check(obj.ptr())) {
    Py_ssize_t n = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
    if (!utf8) throw py::error_already_set();  // lone surrogates: UnicodeEncodeError
    out.text.assign(utf8, static_cast<size_t>(n));
    out.is_text = true;
    return out;
  }
  if (PyBytes_Check(obj.ptr()))
    throw py::type_error(std::string(what) +
                         " must be str (text) or an integer array of "
                         "token ids, not bytes (decode it first)");
  // An empty sequence has no integer dtype to infer: it is the empty prompt,
  // which the library refuses with a clear message.
  if (py::isinstance<py::sequence>(obj) && py::len(obj) == 0) {
    require_numpy(what, /*is_argument=*/true);
    out.tokens = IntArray<uint32_t>(0);
    return out;
  }
  out.tokens = as_int_array<uint32_t>(obj, 1, what);
  return out;
}

uint32_t extent_u32(const py::array& array, py::ssize_t axis, const char* what) {
  const py::ssize_t n = array.shape(axis);
  if (n < 0 || static_cast<uint64_t>(n) > UINT32_MAX)
    raise_status(ELDR_E_INVALID_ARGUMENT,
                 std::string(what) + " axis " + std::to_string(axis) + " is too large");
  return static_cast<uint32_t>(n);
}

std::string request_id_arg(const py::handle& obj) {
  std::string id;
  if (PyUnicode_Check(obj.ptr())) {
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
    if (utf8 == nullptr) throw py::error_already_set();
    id.assign(utf8, static_cast<size_t>(size));
  } else if (PyBytes_Check(obj.ptr())) {
    id = py::reinterpret_borrow<py::bytes>(obj).cast<std::string>();
  } else {
    throw py::type_error("request_id must be str or bytes, got " +
                         py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>());
  }
  if (id.find('\0') != std::string::npos)
    raise_status(ELDR_E_INVALID_ARGUMENT, "request_id contains a NUL byte");
  return id;
}

std::string policy_label(uint32_t policy) {
  const char* name = eldr_policy_name(policy);
  return name != nullptr ? std::string(name) : std::to_string(policy);
}

void bind_decision(py::module_& m) {
  py::class_<Decision>(m, "Decision",
                       "Where one request goes: the decode worker and why (immutable).")
      .def_readonly("worker", &Decision::worker, "Chosen decode worker id.")
      .def_readonly("similarity", &Decision::similarity,
                    "Signature . centroid of the chosen worker's cluster.")
      .def_readonly("band_size", &Decision::band_size, "Workers inside the locality band.")
      .def_readonly("table_epoch", &Decision::table_epoch, "Cluster table generation used.")
      .def_property_readonly(
          "policy", [](const Decision& d) { return policy_label(d.policy); },
          "Policy name (\"eldr\", \"jsq\", ...).")
      .def_readonly("status", &Decision::status,
                    "Sidecar: 0, or the ELDR_E_* code the daemon rejected the request with.")
      .def_property_readonly(
          "status_name", [](const Decision& d) { return std::string(eldr_status_name(d.status)); })
      .def_readonly("latency_ns", &Decision::latency_ns,
                    "Sidecar: push to publish, measured by the daemon (0 when embedded).")
      .def_readonly("completion_token", &Decision::completion_token,
                    "Sidecar: what Client.complete(request_id, token) presents from a process "
                    "other than the one that pushed the footprint (0 when embedded).")
      .def_readonly("confidence", &Decision::confidence,
                    "Routed from a prompt: how sure the predicted footprint was, in [0, 1]; "
                    "1 for a footprint.")
      .def_property_readonly("ok", [](const Decision& d) { return d.status == ELDR_OK; })
      // A decision stands for its worker id where one is expected: as an index
      // (workers[d], int(d)) and in comparisons with an int.
      .def("__index__", [](const Decision& d) { return d.worker; })
      .def("__int__", [](const Decision& d) { return d.worker; })
      .def("__hash__", [](const Decision& d) { return py::hash(py::int_(d.worker)); })
      .def("__eq__",
           [](const Decision& d, const py::object& other) -> py::object {
             if (py::isinstance<Decision>(other)) {
               const auto& o = other.cast<const Decision&>();
               return py::bool_(d.worker == o.worker && d.similarity == o.similarity &&
                                d.band_size == o.band_size && d.table_epoch == o.table_epoch &&
                                d.policy == o.policy && d.status == o.status &&
                                d.completion_token == o.completion_token &&
                                d.confidence == o.confidence);
             }
             if (PyLong_Check(other.ptr())) return py::bool_(other.cast<long long>() == d.worker);
             return py::reinterpret_borrow<py::object>(Py_NotImplemented);
           })
      .def("to_dict",
           [](const Decision& d) {
             py::dict out;
             out["worker"] = d.worker;
             out["similarity"] = d.similarity;
             out["band_size"] = d.band_size;
             out["table_epoch"] = d.table_epoch;
             out["policy"] = policy_label(d.policy);
             out["status"] = d.status;
             out["latency_ns"] = d.latency_ns;
             out["completion_token"] = d.completion_token;
             out["confidence"] = d.confidence;
             return out;
           })
      .def("__repr__", [](const Decision& d) {
        return "Decision(worker=" + std::to_string(d.worker) +
               ", similarity=" + py::repr(py::float_(d.similarity)).cast<std::string>() +
               ", band_size=" + std::to_string(d.band_size) +
               ", table_epoch=" + std::to_string(d.table_epoch) +
               ", confidence=" + py::repr(py::float_(d.confidence)).cast<std::string>() +
               ", policy='" + policy_label(d.policy) + "', status=" + eldr_status_name(d.status) +
               ", latency_ns=" + std::to_string(d.latency_ns) + ")";
      });
}

}  // namespace eldr_py
