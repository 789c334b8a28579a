#include "eldr/cluster_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>

#include "eldr/cluster_table_generated.h"
#include "eldr/internal/checked_math.hpp"
#include "eldr/internal/file_io.hpp"

namespace eldr {

namespace {

// Far above any real table (K=1024 workers at L=48, E=128 is ~25 MB) and well
// inside FlatBuffers' 2 GiB limit, whose breach is an assert, not an error.
constexpr uint64_t kMaxTableBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxJsonBytes = uint64_t{1} << 30;
constexpr double kUnitTolerance = 1e-3;
// Scores are cosines of non-negative vectors, so τ >= 1 already admits every
// worker; 2 leaves room for callers that think in the full [-1, 1] range.
constexpr float kMaxTau = 2.0f;

Status invalid(const std::string& what) { return {Errc::invalid_argument, what}; }
Status mismatch(const std::string& what) { return {Errc::shape_mismatch, what}; }

Status with_path(const std::string& path, const Status& s) {
  if (s.is_ok()) return s;
  return {s.code(), path + ": " + s.message()};
}

// memcpy rather than element access: the verifier only guarantees 4-byte
// alignment of a vector, so a crafted file can misalign 8-byte elements.
template <class T>
std::vector<T> copy_vector(const flatbuffers::Vector<T>* v) {
  if (!v) return {};
  std::vector<T> out(v->size());
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
  return out;
}

std::string str_or_empty(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

std::vector<uint8_t> encode_unchecked(const ClusterTable& t) {
  // Builder sizes are uoffset_t; stay well clear of the 2 GiB assert.
  uint64_t estimate = 1024 + t.model.size() + t.fit.calibration_hash.size() + t.fit.source.size();
  estimate +=
      4 * (t.layer_mask.size() + t.idf.size() + t.centroids.size() + t.worker_ids.size() +
           t.fit.rho_curve.size() + t.fit.cluster_sizes.size() + t.domains.worker_domain.size());
  estimate += 8 * t.domains.counts.size();
  for (const auto& n : t.domains.names) estimate += 8 + n.size();
  if (estimate > kMaxTableBytes) return {};

  flatbuffers::FlatBufferBuilder fbb(static_cast<size_t>(estimate));
  // Written explicitly so a reader never depends on a schema default (default_tau
  // has one) that could drift from the C++ constant.
  fbb.ForceDefaults(true);

  // One statement per child object: argument evaluation order is unspecified,
  // and the same table should encode to the same bytes whatever the compiler.
  auto rho_curve = fbb.CreateVector(t.fit.rho_curve);
  auto calibration_hash = fbb.CreateString(t.fit.calibration_hash);
  auto cluster_sizes = fbb.CreateVector(t.fit.cluster_sizes);
  auto source = fbb.CreateString(t.fit.source);
  auto fit = fb::CreateFitInfo(fbb, t.fit.n_requests, t.fit.seed, t.fit.peak_rho, rho_curve,
                               calibration_hash, t.fit.created_unix, t.fit.iterations,
                               cluster_sizes, source);
  std::vector<flatbuffers::Offset<flatbuffers::String>> names;
  names.reserve(t.domains.names.size());
  for (const auto& n : t.domains.names) names.push_back(fbb.CreateString(n));
  auto name_vector = fbb.CreateVector(names);
  auto counts = fbb.CreateVector(t.domains.counts);
  auto worker_domain = fbb.CreateVector(t.domains.worker_domain);
  auto domains = fb::CreateDomainPools(fbb, name_vector, counts, worker_domain);
  auto model = fbb.CreateString(t.model);
  auto mask = fbb.CreateVector(t.layer_mask);
  auto idf = fbb.CreateVector(t.idf);
  auto centroids = fbb.CreateVector(t.centroids);
  auto worker_ids = fbb.CreateVector(t.worker_ids);
  const fb::Geometry geometry(t.geometry.layers, t.geometry.experts, t.geometry.top_k);
  flatbuffers::Offset<fb::StepCost> step_cost = 0;
  if (t.step_cost)
    step_cost = fb::CreateStepCost(fbb, t.step_cost->t0_ms, t.step_cost->tseq_ms,
                                   t.step_cost->alpha_us, t.step_cost->max_batch);
  auto root = fb::CreateClusterTable(fbb, t.schema_version, model, &geometry, mask, idf, centroids,
                                     worker_ids, t.default_tau, fit, domains, step_cost);
  fb::FinishClusterTableBuffer(fbb, root);
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

Result<ClusterTable> decode_unchecked(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8)
    return Status{Errc::corrupt,
                  "cluster table truncated (" + std::to_string(bytes.size()) + " bytes)"};
  if (bytes.size() > kMaxTableBytes)
    return Status{Errc::corrupt, "cluster table of " + std::to_string(bytes.size()) +
                                     " bytes exceeds the " + std::to_string(kMaxTableBytes) +
                                     "-byte limit"};
  // FlatBuffers reads scalars in place, so the buffer itself must be 8-aligned
  // for the verifier's (offset-relative) alignment checks to mean anything.
  std::vector<uint8_t> aligned_copy;
  const uint8_t* data = bytes.data();
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned_copy.assign(bytes.begin(), bytes.end());
    data = aligned_copy.data();
  }
  if (!fb::ClusterTableBufferHasIdentifier(data))
    return Status{Errc::corrupt, "not an eldr cluster table (file identifier is not \"" +
                                     std::string(fb::ClusterTableIdentifier()) + "\")"};
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 8;    // root -> fit/domains -> vectors -> strings
  opts.max_tables = 16;  // the schema has three tables
  flatbuffers::Verifier verifier(data, bytes.size(), opts);
  if (!fb::VerifyClusterTableBuffer(verifier))
    return Status{Errc::corrupt, "cluster table failed FlatBuffers verification"};

  const fb::ClusterTable* root = fb::GetClusterTable(data);
  if (root->schema_version() != kTableSchemaVersion)
    return Status{Errc::unsupported,
                  "cluster table schema version " + std::to_string(root->schema_version()) +
                      " (this build reads version " + std::to_string(kTableSchemaVersion) + ")"};
  if (!root->geometry()) return Status{Errc::corrupt, "cluster table has no geometry"};

  ClusterTable t;
  t.schema_version = root->schema_version();
  t.model = str_or_empty(root->model());
  t.geometry = {root->geometry()->layers(), root->geometry()->experts(), root->geometry()->top_k()};
  t.layer_mask = copy_vector(root->layer_mask());
  t.idf = copy_vector(root->idf());
  t.centroids = copy_vector(root->centroids());
  t.worker_ids = copy_vector(root->worker_ids());
  t.default_tau = root->default_tau();
  if (const fb::FitInfo* fit = root->fit()) {
    t.fit.n_requests = fit->n_requests();
    t.fit.seed = fit->seed();
    t.fit.peak_rho = fit->peak_rho();
    t.fit.rho_curve = copy_vector(fit->rho_curve());
    t.fit.calibration_hash = str_or_empty(fit->calibration_hash());
    t.fit.created_unix = fit->created_unix();
    t.fit.iterations = fit->iterations();
    t.fit.cluster_sizes = copy_vector(fit->cluster_sizes());
    t.fit.source = str_or_empty(fit->source());
  }
  if (const fb::DomainPools* domains = root->domains()) {
    if (const auto* names = domains->names()) {
      t.domains.names.reserve(names->size());
      for (const flatbuffers::String* n : *names) t.domains.names.push_back(str_or_empty(n));
    }
    t.domains.counts = copy_vector(domains->counts());
    t.domains.worker_domain = copy_vector(domains->worker_domain());
  }
  if (const fb::StepCost* cost = root->step_cost())
    t.step_cost = StepCost{cost->t0_ms(), cost->tseq_ms(), cost->alpha_us(), cost->max_batch()};
  return t;
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

Status ClusterTable::validate() const {
  try {
    return [&]() -> Status {
      if (schema_version != kTableSchemaVersion)
        return invalid("schema_version is " + std::to_string(schema_version) + ", expected " +
                       std::to_string(kTableSchemaVersion));
      ELDR_TRY(geometry.validate());

      if (layer_mask.empty()) return invalid("layer_mask is empty");
      for (size_t i = 0; i < layer_mask.size(); ++i) {
        if (layer_mask[i] >= geometry.layers)
          return invalid("layer_mask[" + std::to_string(i) +
                         "] = " + std::to_string(layer_mask[i]) +
                         " is not below L = " + std::to_string(geometry.layers));
        if (i > 0 && layer_mask[i] <= layer_mask[i - 1])
          return invalid("layer_mask must be sorted and unique (layer " +
                         std::to_string(layer_mask[i]) + " at position " + std::to_string(i) + ")");
      }
      const size_t d = dim();

      if (idf.size() != d)
        return mismatch("idf has " + std::to_string(idf.size()) +
                        " values, expected |mask| * E = " + std::to_string(d));
      for (size_t i = 0; i < idf.size(); ++i)
        if (!std::isfinite(idf[i]) || idf[i] < 0.0f)
          return invalid("idf[" + std::to_string(i) + "] = " + std::to_string(idf[i]) +
                         " is not a finite value >= 0");

      const size_t k = worker_ids.size();
      if (k == 0) return invalid("cluster table has no centroids (K = 0)");
      if (k > UINT32_MAX) return invalid("too many centroids");
      uint64_t need = 0;
      if (!checked_mul(k, d, &need) || centroids.size() != need)
        return mismatch("centroids has " + std::to_string(centroids.size()) +
                        " values, expected K * dim = " + std::to_string(k) + " * " +
                        std::to_string(d));
      for (size_t c = 0; c < k; ++c) {
        double sq = 0.0;
        for (size_t i = 0; i < d; ++i) {
          const float x = centroids[c * d + i];
          if (!std::isfinite(x))
            return invalid("centroid " + std::to_string(c) + " has a non-finite value at " +
                           std::to_string(i));
          sq += static_cast<double>(x) * x;
        }
        // sq == 0 only when every element is exactly zero (squares of float
        // denormals are still positive doubles).
        const double norm = std::sqrt(sq);
        if (sq != 0.0 && std::fabs(norm - 1.0) > kUnitTolerance)
          return invalid("centroid " + std::to_string(c) + " has L2 norm " + std::to_string(norm) +
                         " (must be 1 or 0)");
      }

      std::vector<int32_t> ids(worker_ids);
      std::sort(ids.begin(), ids.end());
      if (ids.front() < 0)
        return invalid("worker id " + std::to_string(ids.front()) + " is negative");
      if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end())
        return invalid("worker id " + std::to_string(*dup) + " appears more than once");

      if (!std::isfinite(default_tau) || default_tau < 0.0f || default_tau > kMaxTau)
        return invalid("default_tau " + std::to_string(default_tau) + " is not in [0, 2]");
      if (step_cost)
        if (Status s = step_cost->validate(); !s) return invalid("step_cost: " + s.message());

      if (!fit.cluster_sizes.empty() && fit.cluster_sizes.size() != k)
        return mismatch("fit.cluster_sizes has " + std::to_string(fit.cluster_sizes.size()) +
                        " entries, expected K = " + std::to_string(k));

      if (domains.names.empty()) {
        if (!domains.counts.empty() || !domains.worker_domain.empty())
          return mismatch("domains has counts or worker_domain but no names");
      } else {
        if (domains.counts.size() != domains.names.size())
          return mismatch("domains.counts has " + std::to_string(domains.counts.size()) +
                          " entries for " + std::to_string(domains.names.size()) + " names");
        if (domains.worker_domain.size() != k)
          return mismatch("domains.worker_domain has " +
                          std::to_string(domains.worker_domain.size()) +
                          " entries, expected K = " + std::to_string(k));
        const auto n_names = static_cast<int64_t>(domains.names.size());
        for (size_t c = 0; c < k; ++c) {
          const int32_t v = domains.worker_domain[c];
          if (v < -1 || v >= n_names)
            return invalid("domains.worker_domain[" + std::to_string(c) + "] = " +
                           std::to_string(v) + " is not in [-1, " + std::to_string(n_names) + ")");
        }
      }
      return Status::ok();
    }();
  } catch (const std::exception& e) {
    return Status{Errc::internal, std::string("validate: ") + e.what()};
  }
}

std::vector<uint8_t> encode_table(const ClusterTable& table) {
  // The signature cannot carry an error; an empty vector (never a valid
  // encoding) reports "too large" or out of memory, and save_table turns it
  // into a Status.
  try {
    return encode_unchecked(table);
  } catch (const std::exception&) {
    return {};
  }
}

Result<ClusterTable> decode_table(std::span<const uint8_t> bytes) {
  try {
    auto table = decode_unchecked(bytes);
    if (!table) return table;
    if (Status st = table->validate(); !st)
      return Status{Errc::corrupt, "cluster table: " + st.message()};
    return table;
  } catch (const std::bad_alloc&) {
    return Status{Errc::internal, "out of memory decoding the cluster table"};
  } catch (const std::exception& e) {
    return Status{Errc::internal, std::string("decoding the cluster table: ") + e.what()};
  }
}

Status save_table(const ClusterTable& table, const std::string& path) {
  if (Status st = table.validate(); !st) return {st.code(), path + ": " + st.message()};
  std::vector<uint8_t> bytes;
  try {
    bytes = encode_unchecked(table);
  } catch (const std::exception& e) {
    return {Errc::internal, path + ": encoding the cluster table: " + e.what()};
  }
  if (bytes.empty())
    return {Errc::invalid_argument,
            path + ": cluster table exceeds " + std::to_string(kMaxTableBytes) + " bytes"};
  return write_atomically(path, bytes);
}

Result<ClusterTable> load_table(const std::string& path) {
  try {
    auto bytes = read_file(path, kMaxTableBytes);
    if (!bytes) return bytes.status();
    auto table = decode_table(*bytes);
    if (!table) return with_path(path, table.status());
    return table;
  } catch (const std::exception& e) {
    return Status{Errc::internal, path + ": " + e.what()};
  }
}

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
