// Policy and worker-state names, and the one switch from a Policy to its pick
// function (policies/policies.hpp).
#include "eldr/router.hpp"
#include "policies/policies.hpp"

namespace eldr {

const char* policy_name(Policy policy) noexcept {
  switch (policy) {
    case Policy::eldr:
      return "eldr";
    case Policy::round_robin:
      return "round_robin";
    case Policy::random:
      return "random";
    case Policy::jsq:
      return "jsq";
    case Policy::p2c:
      return "p2c";
    case Policy::domain:
      return "domain";
    case Policy::eldr_guard:
      return "eldr_guard";
    case Policy::eldr_cost:
      return "eldr_cost";
  }
  return "unknown";
}

std::optional<Policy> parse_policy(std::string_view name) noexcept {
  if (name == "rr") return Policy::round_robin;
  for (Policy p : kAllPolicies)
    if (name == policy_name(p)) return p;
  return std::nullopt;
}

const char* worker_state_name(WorkerState state) noexcept {
  switch (state) {
    case WorkerState::active:
      return "active";
    case WorkerState::draining:
      return "draining";
    case WorkerState::removed:
      return "removed";
  }
  return "unknown";
}

namespace detail {

Pick pick(Policy policy, const Candidates& c, PickContext& ctx) {
  switch (policy) {
    case Policy::eldr:
      return pick_eldr(c, ctx);
    case Policy::eldr_guard:
      return pick_eldr_guard(c, ctx);
    case Policy::eldr_cost:
      return pick_eldr_cost(c, ctx);
    case Policy::round_robin:
      return pick_round_robin(c, ctx);
    case Policy::random:
      return pick_random(c, ctx);
    case Policy::jsq:
      return pick_jsq(c, ctx);
    case Policy::p2c:
      return pick_p2c(c, ctx);
    case Policy::domain:
      return pick_domain(c, ctx);
  }
  return pick_jsq(c, ctx);  // unreachable: every Policy is listed above
}

bool reads_scores(Policy policy) noexcept {
  return policy == Policy::eldr || policy == Policy::eldr_guard;
}

bool reads_batches(Policy policy) noexcept { return policy == Policy::eldr_cost; }

}  // namespace detail

}  // namespace eldr
