// Prompts in the simulator's workloads (routing from the prompt,
// docs/simulator.md): synthetic prompts whose words depend on the request's
// domain and subtopic, a trace's prompts from its tokens.jsonl.gz, and what
// the simulator needs around them.
#include "sim_prompts.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>

#include "eldr/lab/text_file.hpp"
#include "eldr/predictor.hpp"
#include "eldr/random.hpp"

namespace eldr {

bool SimWorkload::has_prompts() const noexcept {
  if (requests.empty() || prompt_tokens.size() != prompt_texts.size()) return false;
  return std::all_of(requests.begin(), requests.end(),
                     [&](const SimRequest& r) { return r.prompt < prompt_tokens.size(); });
}

const char* route_from_name(RouteFrom from) noexcept {
  switch (from) {
    case RouteFrom::footprint:
      return "footprint";
    case RouteFrom::prompt:
      return "prompt";
    case RouteFrom::text:
      return "text";
  }
  return "unknown";
}

Result<RouteFrom> parse_route_from(std::string_view name) {
  for (RouteFrom f : {RouteFrom::footprint, RouteFrom::prompt, RouteFrom::text})
    if (name == route_from_name(f)) return f;
  return Status{Errc::invalid_argument,
                "unknown route-from '" + std::string(name) + "' (footprint|prompt|text)"};
}

std::shared_ptr<ClusterTable> with_own_predictor(const ClusterTable& table) {
  auto copy = std::make_shared<ClusterTable>(table);
  if (table.predictor) {
    auto p = Predictor::decode(table.geometry, table.predictor->encode());
    copy->predictor = p ? std::move(*p) : nullptr;
  }
  return copy;
}

namespace detail {

namespace {

// A Zipf distribution (weights 1 / rank) over the given ids.
struct Zipf {
  std::vector<uint32_t> ids;
  std::vector<double> cum;
  void set(std::vector<uint32_t> v) {
    ids = std::move(v);
    cum.resize(ids.size());
    double s = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) cum[i] = s += 1.0 / static_cast<double>(i + 1);
  }
  uint32_t draw(Rng& rng) const {
    const double u = rng.uniform() * cum.back();
    const size_t i = std::upper_bound(cum.begin(), cum.end(), u) - cum.begin();
    return ids[std::min(i, ids.size() - 1)];
  }
};

// `n` distinct ids drawn from [lo, hi).
std::vector<uint32_t> distinct_ids(Rng& rng, uint32_t n, uint32_t lo, uint32_t hi) {
  std::vector<uint32_t> out;
  n = std::min(n, hi - lo);
  while (out.size() < n) {
    const uint32_t id = lo + static_cast<uint32_t>(rng.below(hi - lo));
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

}  // namespace

Status synthetic_prompts(const SyntheticSimOptions& o, uint32_t domains, uint64_t seed,
                         std::span<const uint32_t> lengths, SimWorkload& w) {
  if (o.prompt_vocabulary < 1024 || o.prompt_vocabulary > kMaxVocabulary)
    return {Errc::invalid_argument, "prompt_vocabulary must be in [1024, 2^20]"};
  if (!(o.prompt_domain_share >= 0 && o.prompt_subtopic_share >= 0 &&
        o.prompt_domain_share + o.prompt_subtopic_share <= 1.0))
    return {Errc::invalid_argument, "prompt shares must be >= 0 and sum to at most 1"};
  // The vocabulary (the "language" of the workload, from model_seed): a
  // general quarter, and per domain and subtopic words of their own above it.
  Rng model(o.model_seed ^ 0x70726f6d707473ULL);
  const uint32_t V = o.prompt_vocabulary, general_size = V / 4;
  Zipf general;
  std::vector<uint32_t> ids(general_size);
  std::iota(ids.begin(), ids.end(), 0u);
  general.set(ids);
  std::vector<uint32_t> boilerplate(o.prompt_boilerplate);
  for (auto& t : boilerplate) t = general.draw(model);
  const uint32_t S = o.subtopics;
  std::vector<Zipf> domain(domains), subtopic(size_t{domains} * S);
  for (uint32_t d = 0; d < domains; ++d) {
    domain[d].set(distinct_ids(model, 256, general_size, V));
    for (uint32_t s = 0; s < S; ++s)
      subtopic[size_t{d} * S + s].set(distinct_ids(model, 64, general_size, V));
  }
  Rng rng(seed ^ 0x3c6ef372fe94f82bULL);
  w.prompt_tokens.assign(w.requests.size(), {});
  w.prompt_texts.assign(w.requests.size(), {});
  for (size_t r = 0; r < w.requests.size(); ++r) {
    SimRequest& req = w.requests[r];
    const uint32_t d = req.domain, s = req.profile % S;
    std::vector<uint32_t>& t = w.prompt_tokens[r];
    t = boilerplate;
    t.reserve(boilerplate.size() + lengths[r]);
    for (uint32_t i = 0; i < lengths[r]; ++i) {
      const double u = rng.uniform();
      t.push_back(u < o.prompt_subtopic_share ? subtopic[size_t{d} * S + s].draw(rng)
                  : u < o.prompt_subtopic_share + o.prompt_domain_share ? domain[d].draw(rng)
                                                                        : general.draw(rng));
    }
    std::string& text = w.prompt_texts[r];
    text.reserve(t.size() * 7);
    for (size_t i = 0; i < t.size(); ++i) {
      if (i) text += ' ';
      text += 'w';
      text += std::to_string(t[i]);
    }
    req.prompt = static_cast<uint32_t>(r);
  }
  return {};
}

}  // namespace detail

Status load_trace_prompts(const std::string& path, SimWorkload& w) {
  auto data = read_text_file(path);
  if (!data) return data.status();
  std::vector<std::vector<uint32_t>> tokens;
  std::vector<std::string> texts;
  std::unordered_map<std::string, uint32_t> vocabulary;
  size_t pos = 0;
  while (pos < data->size()) {
    size_t end = data->find('\n', pos);
    if (end == std::string::npos) end = data->size();
    const std::string_view line(data->data() + pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = path + ": line " + std::to_string(tokens.size() + 1);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return {Errc::corrupt, where + " is not a JSON object"};
    const auto it = j.find("prompt");
    if (it == j.end() || !it->is_array())
      return {Errc::corrupt, where + " has no \"prompt\" list of token strings"};
    std::vector<uint32_t> ids;
    std::string text;
    for (const auto& s : *it) {
      if (!s.is_string()) return {Errc::corrupt, where + ": a prompt token is not a string"};
      const std::string& str = s.get_ref<const std::string&>();
      const auto [v, added] = vocabulary.try_emplace(str, static_cast<uint32_t>(vocabulary.size()));
      if (vocabulary.size() > kMaxVocabulary)
        return {Errc::out_of_range, path + ": more than 2^20 distinct token strings"};
      ids.push_back(v->second);
      text += str;
    }
    if (ids.empty()) return {Errc::corrupt, where + " has an empty prompt"};
    tokens.push_back(std::move(ids));
    texts.push_back(std::move(text));
  }
  if (tokens.size() != w.requests.size())
    return {Errc::shape_mismatch, path + " has " + std::to_string(tokens.size()) +
                                      " prompts, the trace " + std::to_string(w.requests.size()) +
                                      " requests"};
  w.prompt_tokens = std::move(tokens);
  w.prompt_texts = std::move(texts);
  for (size_t r = 0; r < w.requests.size(); ++r) w.requests[r].prompt = static_cast<uint32_t>(r);
  return {};
}

}  // namespace eldr
