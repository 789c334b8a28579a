// The prompt side of the Service (docs/design.md §8): a prompt record routed
// from the table's footprint predictor, its rejections, a pool peer's prompt,
// and learning when the request's real footprint arrives later. service.cpp
// holds the footprint and complete paths and the tables.
#include <bit>
#include <string>

#include "log.hpp"
#include "service.hpp"

namespace eldr::sidecar {

void Service::on_prompt(const shm::PromptIn& p) {
  // A long prompt came cut to one record: its head and tail, all the
  // predictor reads. Its length limit applies to the whole prompt.
  if (p.cut()) m_metrics.count_prompt_cut();
  const bool tokens = p.prompt.kind == PromptKind::tokens;
  const uint64_t limit = tokens ? kMaxPromptTokens : kMaxPromptBytes;
  if (p.prompt_units > limit) {
    reject_prompt(p.request_id, PromptRejection::too_long,
                  {Errc::invalid_argument, "the prompt has " + std::to_string(p.prompt_units) +
                                               (tokens ? " tokens" : " bytes") + ", more than " +
                                               std::to_string(limit)});
    return;
  }
  place(p.request_id, p.client_pid, p.seen_ns, {}, &p.prompt);
}

void Service::learn(std::string_view request_id, const RequestMap::Held& held,
                    std::span<const int16_t> counts) {
  // Learned once: a later footprint of the id is a retry, routed anew.
  (void)m_requests.set_awaiting(request_id, false);
  const Status s = m_router->learn(held.key, counts);
  m_metrics.count_learned(s.is_ok());
  if (!s)
    ELDR_LOG(debug, "request '%.*s': not learned from: %s", static_cast<int>(request_id.size()),
             request_id.data(), s.to_string().c_str());
  if (m_refit) m_refit->keep(counts);
}

void Service::reject_prompt(std::string_view request_id, PromptRejection why,
                            const Status& status) {
  m_metrics.count_prompt_rejected(why);
  if (std::has_single_bit(++m_rejections_logged))
    ELDR_LOG(warn, "rejected the prompt of request '%.*s' (%s): %s [%llu rejections so far]",
             static_cast<int>(request_id.size()), request_id.data(), prompt_rejection_name(why),
             status.to_string().c_str(), static_cast<unsigned long long>(m_rejections_logged));
  publish_rejection(request_id, status);
}

shm::DecisionIn Service::route_remote(const shm::PromptIn& prompt) {
  shm::DecisionIn out;
  out.status = static_cast<int32_t>(Errc::internal);  // overwritten by every path
  m_capture = &out;
  on_prompt(prompt);
  m_capture = nullptr;
  return out;
}

}  // namespace eldr::sidecar
