// Routing from the prompt (docs/design.md §5.6): predict the footprint, route
// it; learn from the real footprint when it arrives.
#include <algorithm>
#include <string>

#include "eldr/router.hpp"
#include "prompt_memory.hpp"
#include "scoring.hpp"

namespace eldr {

namespace {
struct PromptScratch {
  PromptFeatures features, kept;
  std::vector<int16_t> counts;
};
thread_local PromptScratch t_prompt;
}  // namespace

Result<Decision> Router::route_prompt(const Prompt& prompt, const RouteHints& hints) {
  return route_prompt(prompt, hints, {});
}

Result<Decision> Router::route_prompt(const Prompt& prompt, const RouteHints& hints,
                                      std::span<int16_t> out_counts) {
  const std::shared_ptr<const Scoring> scoring = m_scoring.load(std::memory_order_acquire);
  const ClusterTable& table = *scoring->table;
  auto reject = [&](Status s) {
    m_prompts_rejected.fetch_add(1, std::memory_order_relaxed);
    return s;
  };
  if (!table.predictor)
    return reject(
        {Errc::unsupported, "the cluster table has no footprint predictor: fit it with prompts"});
  PromptScratch& t = t_prompt;
  if (Status s = extract_features(prompt, t.features); !s) return reject(s);
  t.counts.resize(table.geometry.cells());
  auto predicted =
      table.predictor->predict(t.features, t.counts, hints.request_id ? &t.kept : nullptr);
  if (!predicted) return reject(predicted.status());
  if (!out_counts.empty() && out_counts.size() != t.counts.size())
    return reject(Status{Errc::shape_mismatch, "the predicted footprint's buffer has " +
                                                   std::to_string(out_counts.size()) +
                                                   " cells, the table " +
                                                   std::to_string(t.counts.size())});
  auto decision = route(t.counts, hints);
  if (!decision) return reject(decision.status());
  if (!out_counts.empty()) std::copy(t.counts.begin(), t.counts.end(), out_counts.begin());
  decision->confidence = predicted->confidence;
  m_prompts_routed.fetch_add(1, std::memory_order_relaxed);
  if (hints.request_id) {
    std::lock_guard lock(m_prompt_mutex);
    m_prompts->remember(*hints.request_id, t.kept);
  }
  return decision;
}

Status Router::learn(uint64_t request_id, std::span<const int16_t> counts) {
  const std::shared_ptr<const Scoring> scoring = m_scoring.load(std::memory_order_acquire);
  const ClusterTable& table = *scoring->table;
  std::optional<PromptFeatures> f;
  {
    std::lock_guard lock(m_prompt_mutex);
    f = m_prompts->take(request_id);
  }
  Status s =
      !f ? Status{Errc::not_found, "no prompt remembered for request " + std::to_string(request_id)}
      : !table.predictor ? Status{Errc::unsupported, "the cluster table has no footprint predictor"}
                         : table.predictor->learn(*f, counts);
  (s ? m_learned : m_learn_rejected).fetch_add(1, std::memory_order_relaxed);
  return s;
}

}  // namespace eldr
