// The research prototype's centroid JSON -> ClusterTable (docs/design.md §4.4).
#include <cmath>
#include <cstdint>
#include <new>
#include <nlohmann/json.hpp>

#include "eldr/cluster_table.hpp"
#include "eldr/internal/file_io.hpp"

namespace eldr {

namespace {

constexpr uint64_t kMaxJsonBytes = uint64_t{1} << 30;
// The bound ClusterTable::validate() puts on tau.
// Scores are cosines of non-negative vectors, so τ >= 1 already admits every
// worker; 2 leaves room for callers that think in the full [-1, 1] range.
constexpr float kMaxTau = 2.0f;

Status with_path(const std::string& path, const Status& s) {
  if (s.is_ok()) return s;
  return {s.code(), path + ": " + s.message()};
}

// ---- prototype JSON ----------------------------------------------------------

using nlohmann::json;

Status field_error(const std::string& name, const std::string& what) {
  return {Errc::corrupt, "prototype JSON: field '" + name + "' " + what};
}

// nullptr when absent; the caller decides whether that is an error.
const json* find_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() ? nullptr : &*it;
}

Result<const json*> require(const json& obj, const char* name) {
  const json* v = find_field(obj, name);
  if (!v) return field_error(name, "is missing");
  return v;
}

Result<uint64_t> as_uint(const json& v, const char* name, uint64_t max) {
  if (!v.is_number_unsigned()) return field_error(name, "must be a non-negative integer");
  const uint64_t x = v.get<uint64_t>();
  if (x > max)
    return field_error(name, "is " + std::to_string(x) + ", above " + std::to_string(max));
  return x;
}

Result<std::string> as_string(const json& v, const char* name) {
  if (!v.is_string()) return field_error(name, "must be a string");
  return v.get<std::string>();
}

Result<double> as_number(const json& v, const char* name) {
  if (!v.is_number()) return field_error(name, "must be a number");
  return v.get<double>();
}

Result<std::vector<float>> as_float_array(const json& v, const std::string& name) {
  if (!v.is_array()) return field_error(name, "must be an array of numbers");
  std::vector<float> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number())
      return field_error(name, "element " + std::to_string(i) + " is not a number");
    out.push_back(static_cast<float>(v[i].get<double>()));
  }
  return out;
}

#define ELDR_JSON_ASSIGN(var, expr)      \
  auto var##_r = (expr);                 \
  if (!var##_r) return var##_r.status(); \
  auto var = std::move(*var##_r)

Result<ClusterTable> import_json_value(const json& j, const JsonImportOptions& options) {
  if (!j.is_object()) return Status{Errc::corrupt, "prototype JSON: top level is not an object"};

  ELDR_JSON_ASSIGN(model_v, require(j, "model"));
  ELDR_JSON_ASSIGN(model, as_string(*model_v, "model"));
  ELDR_JSON_ASSIGN(algo_v, require(j, "algo"));
  ELDR_JSON_ASSIGN(algo, as_string(*algo_v, "algo"));
  if (algo != "kmbal")
    return Status{Errc::unsupported, "prototype JSON: algo '" + algo + "' (only \"kmbal\")"};
  ELDR_JSON_ASSIGN(variant_v, require(j, "variant"));
  ELDR_JSON_ASSIGN(variant, as_string(*variant_v, "variant"));
  if (variant != "count_idf")
    return Status{Errc::unsupported,
                  "prototype JSON: variant '" + variant + "' (only \"count_idf\")"};
  ELDR_JSON_ASSIGN(dtype_v, require(j, "sig_dtype"));
  ELDR_JSON_ASSIGN(sig_dtype, as_string(*dtype_v, "sig_dtype"));
  if (sig_dtype != "<i2")
    return Status{Errc::unsupported,
                  "prototype JSON: sig_dtype '" + sig_dtype + "' (only \"<i2\")"};

  ELDR_JSON_ASSIGN(k_v, require(j, "k"));
  ELDR_JSON_ASSIGN(k, as_uint(*k_v, "k", INT32_MAX));
  ELDR_JSON_ASSIGN(l_v, require(j, "L"));
  ELDR_JSON_ASSIGN(layers, as_uint(*l_v, "L", kMaxLayers));
  ELDR_JSON_ASSIGN(e_v, require(j, "e"));
  ELDR_JSON_ASSIGN(experts, as_uint(*e_v, "e", kMaxExperts));
  ELDR_JSON_ASSIGN(n_fit_v, require(j, "n_fit"));
  ELDR_JSON_ASSIGN(n_fit, as_uint(*n_fit_v, "n_fit", UINT64_MAX));
  ELDR_JSON_ASSIGN(seed_v, require(j, "seed"));
  ELDR_JSON_ASSIGN(seed, as_uint(*seed_v, "seed", UINT64_MAX));
  ELDR_JSON_ASSIGN(rho_v, require(j, "fit_peak_rho"));
  ELDR_JSON_ASSIGN(peak_rho, as_number(*rho_v, "fit_peak_rho"));
  ELDR_JSON_ASSIGN(sha_v, require(j, "training_sha256"));
  ELDR_JSON_ASSIGN(sha, as_string(*sha_v, "training_sha256"));
  // Informational only, but a wrong type still says the file is not what we think.
  if (const json* m = find_field(j, "m")) {
    ELDR_JSON_ASSIGN(m_value, as_uint(*m, "m", UINT64_MAX));
    (void)m_value;
  }
  if (const json* sel = find_field(j, "layer_select")) {
    ELDR_JSON_ASSIGN(sel_value, as_string(*sel, "layer_select"));
    (void)sel_value;
  }

  // Option errors are the caller's, not the file's: report them as such rather
  // than letting validate() call the JSON corrupt.
  if (options.top_k > kMaxTopK || options.top_k > experts)
    return Status{Errc::invalid_argument, "import option top_k " + std::to_string(options.top_k) +
                                              " exceeds min(e, " + std::to_string(kMaxTopK) + ")"};
  if (!std::isfinite(options.default_tau) || options.default_tau < 0.0f ||
      options.default_tau > kMaxTau)
    return Status{
        Errc::invalid_argument,
        "import option default_tau " + std::to_string(options.default_tau) + " is not in [0, 2]"};

  ClusterTable t;
  t.model = model;
  t.geometry.layers = static_cast<uint32_t>(layers);
  t.geometry.experts = static_cast<uint32_t>(experts);
  if (options.top_k != 0) {
    t.geometry.top_k = options.top_k;
  } else if (auto preset = find_preset(model); preset && preset->layers == t.geometry.layers &&
                                               preset->experts == t.geometry.experts) {
    // A preset whose L/E disagree with the file is a different model variant;
    // its k would be a guess, and 0 (unknown) is the honest answer.
    t.geometry.top_k = preset->top_k;
  }

  ELDR_JSON_ASSIGN(mask_v, require(j, "layer_mask"));
  if (!mask_v->is_array()) return field_error("layer_mask", "must be an array of integers");
  for (size_t i = 0; i < mask_v->size(); ++i) {
    const std::string name = "layer_mask[" + std::to_string(i) + "]";
    ELDR_JSON_ASSIGN(layer, as_uint((*mask_v)[i], name.c_str(), UINT32_MAX));
    t.layer_mask.push_back(static_cast<uint32_t>(layer));
  }
  const size_t dim = t.layer_mask.size() * t.geometry.experts;

  ELDR_JSON_ASSIGN(idf_v, require(j, "sig_idf"));
  ELDR_JSON_ASSIGN(idf, as_float_array(*idf_v, "sig_idf"));
  if (idf.size() != dim)
    return field_error("sig_idf",
                       "has " + std::to_string(idf.size()) +
                           " values, expected |layer_mask| * e = " + std::to_string(dim));
  t.idf = std::move(idf);

  ELDR_JSON_ASSIGN(cent_v, require(j, "centroids"));
  if (!cent_v->is_array()) return field_error("centroids", "must be an array of arrays");
  if (cent_v->size() != k)
    return field_error("centroids", "has " + std::to_string(cent_v->size()) + " rows but k is " +
                                        std::to_string(k));
  for (size_t c = 0; c < cent_v->size(); ++c) {
    const std::string name = "centroids[" + std::to_string(c) + "]";
    ELDR_JSON_ASSIGN(row, as_float_array((*cent_v)[c], name));
    if (row.size() != dim)
      return field_error(name, "has " + std::to_string(row.size()) +
                                   " values, expected |layer_mask| * e = " + std::to_string(dim));
    // The prototype normalises in float64 and serialises decimals; after the
    // float32 round trip a row is only approximately unit, so renormalise here.
    double sq = 0.0;
    for (float x : row) sq += static_cast<double>(x) * x;
    if (sq > 0.0 && std::isfinite(sq)) {
      const double inv = 1.0 / std::sqrt(sq);
      for (float& x : row) x = static_cast<float>(x * inv);
    }
    t.centroids.insert(t.centroids.end(), row.begin(), row.end());
    t.worker_ids.push_back(static_cast<int32_t>(c));
  }

  t.default_tau = options.default_tau;
  t.fit.source = "prototype-json";
  t.fit.calibration_hash = sha;
  t.fit.n_requests = n_fit;
  t.fit.seed = seed;
  t.fit.peak_rho = static_cast<float>(peak_rho);
  // created_unix stays 0 (unknown): the file does not record it, and stamping
  // the import time would make the same JSON produce different tables.

  if (Status st = t.validate(); !st)
    return Status{Errc::corrupt, "prototype JSON: " + st.message()};
  return t;
}

#undef ELDR_JSON_ASSIGN

}  // namespace

Result<ClusterTable> import_prototype_json(std::string_view json_text,
                                           const JsonImportOptions& options) {
  try {
    json j = json::parse(json_text.begin(), json_text.end());
    return import_json_value(j, options);
  } catch (const json::parse_error& e) {
    return Status{Errc::corrupt, std::string("prototype JSON: parse error: ") + e.what()};
  } catch (const json::exception& e) {
    return Status{Errc::corrupt, std::string("prototype JSON: ") + e.what()};
  } catch (const std::bad_alloc&) {
    return Status{Errc::internal, "out of memory importing prototype JSON"};
  } catch (const std::exception& e) {
    return Status{Errc::internal, std::string("importing prototype JSON: ") + e.what()};
  }
}

Result<ClusterTable> import_prototype_json_file(const std::string& path,
                                                const JsonImportOptions& options) {
  try {
    return [&]() -> Result<ClusterTable> {
      auto bytes = read_file(path, kMaxJsonBytes);
      if (!bytes) return bytes.status();
      auto table = import_prototype_json(
          std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()), options);
      if (!table) return with_path(path, table.status());
      return table;
    }();
  } catch (const std::exception& e) {
    return Status{Errc::internal, std::string("import_prototype_json_file: ") + e.what()};
  }
}

}  // namespace eldr
