// Routed-expert payload decoders (eldr_footprint_from_*): the C calls behind
// eldr/_engines.py. Deliberately NumPy-free: payloads come in as str, bytes or
// any buffer, and footprints go out as a bytearray of int16 cells that
// _engines.py views with NumPy (imported there lazily), so `import eldr`
// never needs NumPy because of these functions.
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "py_common.hpp"

namespace eldr_py {
namespace {

// A str (ASCII base64 from JSON) or bytes-like object, viewed without a copy.
// The view lives as long as `obj`, which the caller keeps alive.
std::string_view text_arg(const py::handle& obj, const char* what) {
  if (PyUnicode_Check(obj.ptr())) {
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
    if (p == nullptr) throw py::error_already_set();
    return {p, static_cast<size_t>(n)};
  }
  if (PyBytes_Check(obj.ptr()))
    return {PyBytes_AS_STRING(obj.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(obj.ptr()))};
  raise_status(ELDR_E_INVALID_ARGUMENT,
               std::string(what) + " must be str or bytes, not " +
                   std::string(py::str(py::type::of(obj).attr("__name__"))));
}

py::dict info_dict(const eldr_routed_experts_info_t& i) {
  py::dict d;
  d["dtype"] = i.dtype;
  d["num_hidden_layers"] = i.num_hidden_layers;
  d["top_k"] = i.top_k;
  d["layers"] = i.layers;
  d["rows_in_payload"] = i.rows_in_payload;
  d["rows_counted"] = i.rows_counted;
  d["cached_entries"] = i.cached_entries;
  return d;
}

struct Options {
  eldr_routed_experts_options_t c = ELDR_ROUTED_EXPERTS_OPTIONS_INIT;
  std::vector<uint32_t> moe;
  uint32_t layers = 0;  // footprint layers, to size the output
};

Options make_options(uint32_t num_experts, uint32_t num_hidden_layers, uint32_t top_k,
                     const std::optional<std::vector<uint32_t>>& moe_layers, uint64_t first_row,
                     std::optional<uint64_t> row_count) {
  Options o;
  o.c.num_experts = num_experts;
  o.c.num_hidden_layers = num_hidden_layers;
  o.c.top_k = top_k;
  o.c.first_row = first_row;
  o.c.row_count = row_count.value_or(ELDR_ALL_ROWS);
  o.layers = num_hidden_layers;
  if (moe_layers) {
    o.moe = *moe_layers;
    if (o.moe.empty())
      raise_status(ELDR_E_INVALID_ARGUMENT, "moe_layers is empty (None means every layer)");
    o.c.moe_layers = o.moe.data();
    o.c.num_moe_layers = static_cast<uint32_t>(o.moe.size());
    o.layers = o.c.num_moe_layers;
  }
  return o;
}

// Runs one decode without the GIL into a fresh bytearray of layers * E cells.
template <typename Call>
py::tuple decode(const Options& o, Call&& call) {
  const size_t cells = size_t{o.layers} * o.c.num_experts;
  std::vector<int16_t> out(cells);
  eldr_routed_experts_info_t info = ELDR_ROUTED_EXPERTS_INFO_INIT;
  {
    py::gil_scoped_release unlocked;
    check(call(&o.c, out.data(), out.size(), &info));
  }
  py::bytearray bytes(reinterpret_cast<const char*>(out.data()), cells * sizeof(int16_t));
  return py::make_tuple(std::move(bytes), info_dict(info));
}

}  // namespace

void bind_engines(py::module_& m) {
  m.def(
      "_footprint_from_base64_ids",
      [](const py::object& text, uint32_t dtype, uint32_t num_experts, uint32_t num_hidden_layers,
         uint32_t top_k, std::optional<std::vector<uint32_t>> moe_layers, uint64_t first_row,
         std::optional<uint64_t> row_count) {
        const std::string_view t = text_arg(text, "routed_experts");
        const Options o =
            make_options(num_experts, num_hidden_layers, top_k, moe_layers, first_row, row_count);
        return decode(o, [&](auto* opts, int16_t* out, size_t n, auto* info) {
          return eldr_routed_experts_decode_base64_ids(t.data(), t.size(), dtype, opts, out, n,
                                                       info);
        });
      },
      py::arg("text"), py::arg("dtype"), py::arg("num_experts"), py::arg("num_hidden_layers"),
      py::arg("top_k"), py::arg("moe_layers"), py::arg("first_row"), py::arg("row_count"),
      "(int16 cells as a bytearray, info dict) of eldr_routed_experts_decode_base64_ids.");
  m.def(
      "_footprint_from_ids",
      [](const py::buffer& ids, uint32_t dtype, uint32_t num_experts, uint32_t num_hidden_layers,
         uint32_t top_k, std::optional<std::vector<uint32_t>> moe_layers, uint64_t first_row,
         std::optional<uint64_t> row_count) {
        const py::buffer_info buf = ids.request();
        // Strides of a C-contiguous buffer; anything else would be read wrongly.
        py::ssize_t expect = buf.itemsize;
        for (py::ssize_t d = buf.ndim - 1; d >= 0; --d) {
          if (buf.shape[d] > 1 && buf.strides[d] != expect)
            raise_status(ELDR_E_INVALID_ARGUMENT, "ids must be a C-contiguous buffer");
          expect *= buf.shape[d];
        }
        const Options o =
            make_options(num_experts, num_hidden_layers, top_k, moe_layers, first_row, row_count);
        const size_t bytes = static_cast<size_t>(buf.size * buf.itemsize);
        return decode(o, [&](auto* opts, int16_t* out, size_t n, auto* info) {
          return eldr_routed_experts_decode_ids(buf.ptr, bytes, dtype, opts, out, n, info);
        });
      },
      py::arg("ids"), py::arg("dtype"), py::arg("num_experts"), py::arg("num_hidden_layers"),
      py::arg("top_k"), py::arg("moe_layers"), py::arg("first_row"), py::arg("row_count"),
      "(int16 cells as a bytearray, info dict) of eldr_routed_experts_decode_ids over a "
      "C-contiguous "
      "buffer.");
  m.def(
      "_footprint_from_base64_npy",
      [](const py::object& text, uint32_t dtype, uint32_t num_experts,
         std::optional<std::vector<uint32_t>> moe_layers, uint64_t first_row,
         std::optional<uint64_t> row_count) {
        const std::string_view t = text_arg(text, "routed_experts");
        // The layer axis is the .npy's own: read its header first.
        eldr_routed_experts_info_t shape = ELDR_ROUTED_EXPERTS_INFO_INIT;
        {
          py::gil_scoped_release unlocked;
          check(eldr_routed_experts_inspect_base64_npy(t.data(), t.size(), &shape));
        }
        Options o = make_options(num_experts, shape.num_hidden_layers, shape.top_k, moe_layers,
                                 first_row, row_count);
        return decode(o, [&](auto* opts, int16_t* out, size_t n, auto* info) {
          return eldr_routed_experts_decode_base64_npy(t.data(), t.size(), dtype, opts, out, n,
                                                       info);
        });
      },
      py::arg("text"), py::arg("dtype"), py::arg("num_experts"), py::arg("moe_layers"),
      py::arg("first_row"), py::arg("row_count"),
      "(int16 cells as a bytearray, info dict) of eldr_routed_experts_decode_base64_npy.");
}

}  // namespace eldr_py
