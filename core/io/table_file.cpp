// The cluster table's file codec: FlatBuffers (core/schema/cluster_table.fbs),
// verified, then validate()d; save_table writes atomically.
#include <cstdint>
#include <cstring>
#include <new>

#include "eldr/cluster_table.hpp"
#include "eldr/cluster_table_generated.h"
#include "eldr/internal/file_io.hpp"

namespace eldr {

namespace {

// Far above any real table (K=1024 workers at L=48, E=128 is ~25 MB) and well
// inside FlatBuffers' 2 GiB limit, whose breach is an assert, not an error.
constexpr uint64_t kMaxTableBytes = uint64_t{1} << 30;

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
  std::vector<uint8_t> predictor_bytes;
  if (t.predictor) predictor_bytes = t.predictor->encode();
  estimate += predictor_bytes.size();
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
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> predictor = 0;
  if (t.predictor) predictor = fbb.CreateVector(predictor_bytes);
  auto root = fb::CreateClusterTable(fbb, t.schema_version, model, &geometry, mask, idf, centroids,
                                     worker_ids, t.default_tau, fit, domains, step_cost, predictor);
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
  if (const auto* pred = root->predictor()) {
    if (Status st = t.geometry.validate(); !st) return Status{Errc::corrupt, st.message()};
    auto p = Predictor::decode(t.geometry, {pred->data(), pred->size()});
    if (!p) return p.status();
    t.predictor = std::move(*p);
  }
  return t;
}

}  // namespace

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

}  // namespace eldr
