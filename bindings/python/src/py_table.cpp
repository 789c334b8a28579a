// eldr.fit and eldr.Table over eldr_table_*.
#include "py_table.hpp"

#include <string>
#include <vector>

namespace eldr_py {

Table::Table(eldr_table_t* table) : m_table(table) {
  check(eldr_table_get_info(m_table.get(), &m_info));
}

namespace {

// str, bytes or os.PathLike -> the bytes the OS sees (os.fsencode).
std::string path_arg(const py::handle& obj) {
  const auto encoded = py::module_::import("os").attr("fsencode")(obj).cast<std::string>();
  if (encoded.find('\0') != std::string::npos)
    raise_status(ELDR_E_INVALID_ARGUMENT, "path contains a NUL byte");
  return encoded;
}

// The table's predictor, fitted on prompts[i] -> prefill[i].
eldr_table_t* fit_predictor(eldr_table_t* table, const py::handle& prompts_obj,
                            const IntArray<int16_t>& prefill, const py::handle& options_obj) {
  eldr_predictor_options_t options = ELDR_PREDICTOR_OPTIONS_INIT;
  if (!options_obj.is_none()) {
    const auto given = options_obj.cast<py::dict>();
    for (const auto& [key, value] : given) {
      const auto name = key.cast<std::string>();
      if (name == "capacity")
        options.capacity = value.cast<uint32_t>();
      else if (name == "neighbours")
        options.neighbours = value.cast<uint32_t>();
      else if (name == "bandwidth")
        options.bandwidth = value.cast<float>();
      else if (name == "max_features")
        options.max_features = value.cast<uint32_t>();
      else
        raise_status(ELDR_E_INVALID_ARGUMENT,
                     "unknown predictor option '" + name +
                         "' (known: capacity, neighbours, bandwidth, max_features)");
    }
  }
  const auto n = static_cast<uint64_t>(prefill.shape(0));
  if (!py::isinstance<py::sequence>(prompts_obj) || PyUnicode_Check(prompts_obj.ptr()))
    throw py::type_error("prompts must be a sequence: one str or token-id array per request");
  if (static_cast<uint64_t>(py::len(prompts_obj)) != n)
    raise_status(ELDR_E_SHAPE_MISMATCH, "prompts has " + std::to_string(py::len(prompts_obj)) +
                                            " entries, prefill_counts " + std::to_string(n));
  std::vector<PromptArg> args;
  args.reserve(n);
  for (const py::handle item : prompts_obj) args.push_back(prompt_arg(item, "prompts[i]"));
  std::vector<eldr_prompt_t> views;
  views.reserve(n);
  for (const PromptArg& a : args) views.push_back(a.view());
  eldr_table_t* out = nullptr;
  uint64_t skipped = 0;
  eldr_status_t status;
  {
    py::gil_scoped_release unlocked;
    status = eldr_table_fit_predictor(
        table, views.data(), prefill.data(), n, static_cast<uint32_t>(prefill.shape(1)),
        static_cast<uint32_t>(prefill.shape(2)), &options, &skipped, &out);
  }
  eldr_table_free(table);
  check(status);
  if (skipped > 0) {
    const std::string msg = std::to_string(skipped) +
                            " calibration records were skipped by the predictor (an empty or "
                            "invalid prompt, or an invalid footprint)";
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) < 0) {
      eldr_table_free(out);
      throw py::error_already_set();
    }
  }
  return out;
}

std::shared_ptr<Table> fit(const py::handle& prefill_obj, uint32_t num_workers,
                           const py::handle& decode_obj, uint64_t seed, uint32_t top_k,
                           bool select_layers, uint32_t max_iterations, uint32_t threads,
                           const py::handle& prompts_obj, const py::handle& predictor_obj) {
  const auto prefill = as_counts(prefill_obj, 3, "prefill_counts");
  IntArray<int16_t> decode;
  const bool has_decode = !decode_obj.is_none();
  if (has_decode) {
    decode = as_counts(decode_obj, 3, "decode_counts");
    for (py::ssize_t axis = 0; axis < 3; ++axis)
      if (decode.shape(axis) != prefill.shape(axis))
        raise_status(ELDR_E_SHAPE_MISMATCH, "decode_counts shape " +
                                                py::str(decode.attr("shape")).cast<std::string>() +
                                                " differs from prefill_counts shape " +
                                                py::str(prefill.attr("shape")).cast<std::string>());
  }
  const auto n = static_cast<uint64_t>(prefill.shape(0));
  const uint32_t layers = extent_u32(prefill, 1, "prefill_counts");
  const uint32_t experts = extent_u32(prefill, 2, "prefill_counts");

  eldr_fit_options_t options;
  eldr_fit_options_init(&options);
  options.num_workers = num_workers;
  options.seed = seed;
  options.select_layers = select_layers ? 1 : 0;
  options.max_iterations = max_iterations;
  options.threads = threads;

  eldr_table_t* table = nullptr;
  eldr_status_t status;
  {
    py::gil_scoped_release unlocked;  // fitting takes seconds on real data
    status = eldr_table_fit(prefill.data(), has_decode ? decode.data() : nullptr, n, layers,
                            experts, top_k, &options, &table);
  }
  check(status);
  if (!prompts_obj.is_none()) {
    table = fit_predictor(table, prompts_obj, prefill, predictor_obj);
  } else if (!predictor_obj.is_none()) {
    eldr_table_free(table);
    raise_status(ELDR_E_INVALID_ARGUMENT, "predictor options need prompts");
  }
  return std::make_shared<Table>(table);
}

// None, or what the table's predictor holds.
py::object predictor_info(const Table& self) {
  eldr_predictor_info_t info = ELDR_PREDICTOR_INFO_INIT;
  const eldr_status_t status = eldr_table_get_predictor_info(self.get(), &info);
  if (status == ELDR_E_NOT_FOUND) return py::none();
  check(status);
  py::list kinds;
  if (info.kinds & ELDR_PROMPT_KIND_TOKENS) kinds.append("tokens");
  if (info.kinds & ELDR_PROMPT_KIND_TEXT) kinds.append("text");
  py::dict out;
  out["prototypes"] = info.prototypes;
  out["kinds"] = kinds;
  out["learned"] = info.learned;
  out["demand_bytes"] = info.demand_bytes;
  out["feature_bytes"] = info.feature_bytes;
  out["index_bytes"] = info.index_bytes;
  return out;
}

std::shared_ptr<Table> load(const py::handle& path_obj) {
  const std::string path = path_arg(path_obj);
  eldr_table_t* table = nullptr;
  check(eldr_table_load(path.c_str(), &table));
  return std::make_shared<Table>(table);
}

void save(const Table& self, const py::handle& path_obj) {
  const std::string path = path_arg(path_obj);
  check(eldr_table_save(self.get(), path.c_str()));
}

IntArray<int16_t> footprint_arg(const py::handle& counts_obj) {
  return as_counts(counts_obj, 2, "counts");
}

py::array_t<float> signature(const Table& self, const py::handle& counts_obj) {
  const auto counts = footprint_arg(counts_obj);
  const uint64_t n = uint64_t{self.info().num_selected_layers} * self.info().experts;
  py::array_t<float> out(static_cast<py::ssize_t>(n));
  check(eldr_table_compute_signature(self.get(), counts.data(), extent_u32(counts, 0, "counts"),
                                     extent_u32(counts, 1, "counts"), out.mutable_data(), n));
  return out;
}

py::array_t<float> scores(const Table& self, const py::handle& counts_obj) {
  const auto counts = footprint_arg(counts_obj);
  const uint32_t n = self.info().num_workers;
  py::array_t<float> out(static_cast<py::ssize_t>(n));
  check(eldr_table_score(self.get(), counts.data(), extent_u32(counts, 0, "counts"),
                         extent_u32(counts, 1, "counts"), out.mutable_data(), n));
  return out;
}

py::array_t<int32_t> worker_ids(const Table& self) {
  require_numpy("Table.worker_ids", /*is_argument=*/false);
  const uint32_t n = self.info().num_workers;
  py::array_t<int32_t> out(static_cast<py::ssize_t>(n));
  check(eldr_table_get_worker_ids(self.get(), out.mutable_data(), n));
  return out;
}

}  // namespace

void bind_table(py::module_& m) {
  py::class_<Table, std::shared_ptr<Table>>(
      m, "Table",
      "Fitted cluster table (immutable): per decode worker, a centroid of request signatures.")
      .def_static("load", &load, py::arg("path"), "Loads and verifies a cluster table file.")
      .def("save", &save, py::arg("path"), "Writes the table atomically (temporary file + rename).")
      .def("signature", &signature, py::arg("counts"),
           "The request's unit-norm signature: float32 [num_selected_layers * experts].")
      .def("scores", &scores, py::arg("counts"),
           "Similarity to each cluster centroid: float32 [num_workers], in worker_ids order.")
      .def_property_readonly("layers", [](const Table& t) { return t.info().layers; })
      .def_property_readonly("experts", [](const Table& t) { return t.info().experts; })
      .def_property_readonly("top_k", [](const Table& t) { return t.info().top_k; })
      .def_property_readonly("num_workers", [](const Table& t) { return t.info().num_workers; })
      .def_property_readonly("num_selected_layers",
                             [](const Table& t) { return t.info().num_selected_layers; })
      .def_property_readonly("default_tau", [](const Table& t) { return t.info().default_tau; })
      .def_property_readonly("worker_ids", &worker_ids,
                             "Worker id owning each cluster: int32 [num_workers].")
      .def_property_readonly("predictor", &predictor_info,
                             "None, or the footprint predictor's {'prototypes', 'kinds', "
                             "'learned', 'demand_bytes', 'feature_bytes', 'index_bytes'}.")
      .def("__repr__", [](const Table& t) {
        const eldr_table_info_t& i = t.info();
        return "Table(layers=" + std::to_string(i.layers) +
               ", experts=" + std::to_string(i.experts) + ", top_k=" + std::to_string(i.top_k) +
               ", num_workers=" + std::to_string(i.num_workers) +
               ", num_selected_layers=" + std::to_string(i.num_selected_layers) + ")";
      });

  m.def("fit", &fit, py::arg("prefill_counts"), py::arg("num_workers"),
        py::arg("decode_counts") = py::none(), py::arg("seed") = 1, py::kw_only(),
        py::arg("top_k") = 0, py::arg("select_layers") = true, py::arg("max_iterations") = 50,
        py::arg("threads") = 0, py::arg("prompts") = py::none(), py::arg("predictor") = py::none(),
        "Fits a cluster table from calibration footprints int16 [requests][layers][experts]. "
        "prompts (one str, or 1-D token-id array, per request: the prompt that produced "
        "prefill_counts[i]) adds a footprint predictor, for Router.route_prompt; predictor: its "
        "options {'capacity', 'neighbours', 'bandwidth', 'max_features'} (None: defaults).");
}

}  // namespace eldr_py
