// eldr.Router over eldr_router_*: the embedded router, no daemon. Calls do not
// release the GIL: a route takes microseconds, less than a GIL hand-off.
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "py_table.hpp"

namespace eldr_py {
namespace {

struct RouterFree {
  void operator()(eldr_router_t* router) const noexcept { eldr_router_free(router); }
};

uint32_t policy_arg(const py::handle& policy) {
  if (PyLong_Check(policy.ptr())) {
    const auto id = policy.cast<long long>();
    if (id >= 0 && id <= UINT32_MAX && eldr_policy_name(static_cast<uint32_t>(id)) != nullptr)
      return static_cast<uint32_t>(id);
    raise_status(ELDR_E_INVALID_ARGUMENT, "unknown policy id " + std::to_string(id));
  }
  if (!PyUnicode_Check(policy.ptr()))
    throw py::type_error("policy must be a policy name (str) or id (int)");
  const auto name = policy.cast<std::string>();
  std::string known;
  for (uint32_t id = 0; const char* candidate = eldr_policy_name(id); ++id) {
    if (name == candidate) return id;
    known += (id == 0 ? "" : ", ") + std::string(candidate);
  }
  raise_status(ELDR_E_INVALID_ARGUMENT, "unknown policy '" + name + "' (known: " + known + ")");
}

const char* worker_state_name(uint32_t state) {
  switch (state) {
    case ELDR_WORKER_STATE_ACTIVE:
      return "active";
    case ELDR_WORKER_STATE_DRAINING:
      return "draining";
    case ELDR_WORKER_STATE_REMOVED:
      return "removed";
    default:
      return "unknown";
  }
}

// A step constant: None = unset (-1 in eldr.h), else >= 0.
double step_constant(std::optional<double> value, const char* name) {
  if (!value) return -1.0;
  if (!(*value >= 0.0))
    raise_status(ELDR_E_INVALID_ARGUMENT,
                 std::string(name) + " must be >= 0 (None: the table's constants)");
  return *value;
}

// The step model's constants and the request records of a router.
struct StepOptions {
  std::optional<double> t0_ms, tseq_ms, alpha_us;
  std::optional<uint32_t> max_batch, max_inflight;
  bool fit_step_cost = true;
};

class Router {
 public:
  Router(std::shared_ptr<Table> table, const py::handle& policy, std::optional<float> tau,
         uint64_t seed, bool min2_band, uint32_t max_workers, const StepOptions& step)
      : m_table(std::move(table)) {
    if (!m_table) raise_status(ELDR_E_INVALID_ARGUMENT, "table is None");
    eldr_router_options_t options;
    eldr_router_options_init(&options);
    options.policy = policy_arg(policy);
    options.tau = tau.value_or(-1.0f);  // < 0: the table's default_tau
    options.seed = seed;
    options.min2_band = min2_band ? 1 : 0;
    options.max_workers = max_workers;
    // All three or none (the library refuses a mix); max_batch goes with them.
    options.t0_ms = step_constant(step.t0_ms, "t0_ms");
    options.tseq_ms = step_constant(step.tseq_ms, "tseq_ms");
    options.alpha_us = step_constant(step.alpha_us, "alpha_us");
    if (step.max_batch) {
      if (*step.max_batch == 0) raise_status(ELDR_E_INVALID_ARGUMENT, "max_batch must be >= 1");
      options.max_batch = *step.max_batch;
    }
    if (step.max_inflight) {
      if (*step.max_inflight == 0)
        raise_status(ELDR_E_INVALID_ARGUMENT, "max_inflight must be >= 1 (None: 8192)");
      options.max_inflight = *step.max_inflight;
    }
    options.fit_step_cost = step.fit_step_cost ? 1 : 0;
    eldr_router_t* router = nullptr;
    check(eldr_router_new(m_table->get(), &options, &router));
    m_router.reset(router);
  }

  eldr_router_t* get() const noexcept { return m_router.get(); }
  const std::shared_ptr<Table>& table() const noexcept { return m_table; }

  Decision route(const py::handle& counts_obj, const py::handle& loads_obj,
                 std::optional<uint64_t> request_id) {
    const auto counts = as_counts(counts_obj, 2, "counts");
    const uint32_t layers = extent_u32(counts, 0, "counts");
    const uint32_t experts = extent_u32(counts, 1, "counts");
    eldr_decision_t decision;
    eldr_decision_init(&decision);
    if (request_id) {
      if (!loads_obj.is_none())
        raise_status(ELDR_E_INVALID_ARGUMENT,
                     "request_id needs the router's own in-flight counts: not with loads");
      check(eldr_router_route_request(m_router.get(), *request_id, counts.data(), layers, experts,
                                      &decision));
      return Decision::from_c(decision);
    }
    IntArray<uint32_t> loads;
    const uint32_t* loads_data = nullptr;
    uint32_t n_loads = 0;
    if (!loads_obj.is_none()) {
      loads = as_int_array<uint32_t>(loads_obj, 1, "loads");
      loads_data = loads.data();
      n_loads = extent_u32(loads, 0, "loads");
    }
    check(eldr_router_route(m_router.get(), counts.data(), layers, experts, loads_data, n_loads,
                            &decision));
    return Decision::from_c(decision);
  }

  Decision route_prompt(const py::handle& prompt_obj, std::optional<uint64_t> request_id,
                        std::optional<std::vector<int32_t>> workers) {
    const PromptArg prompt = prompt_arg(prompt_obj, "prompt");
    const eldr_prompt_t p = prompt.view();
    const uint64_t* id = request_id ? &*request_id : nullptr;
    eldr_decision_t decision;
    eldr_decision_init(&decision);
    if (workers) {
      static const int32_t none = 0;  // an empty list is a set of no workers, not "any"
      check(eldr_router_route_prompt_among(m_router.get(), &p, id,
                                           workers->empty() ? &none : workers->data(),
                                           static_cast<uint32_t>(workers->size()), &decision));
    } else {
      check(p.text ? eldr_router_route_text(m_router.get(), p.text, p.text_len, id, &decision)
                   : eldr_router_route_tokens(m_router.get(), p.tokens, p.n_tokens, id, &decision));
    }
    return Decision::from_c(decision);
  }

  void learn(uint64_t request_id, const py::handle& counts_obj) {
    const auto counts = as_counts(counts_obj, 2, "footprint");
    check(eldr_router_learn(m_router.get(), request_id, counts.data(),
                            extent_u32(counts, 0, "footprint"),
                            extent_u32(counts, 1, "footprint")));
  }

  void complete(uint64_t request_id) { check(eldr_router_complete(m_router.get(), request_id)); }

  // None and 0 are both "not reported" (eldr.h).
  void report(int32_t worker, std::optional<uint32_t> batch_size, std::optional<float> step_ms) {
    eldr_worker_report_t report;
    eldr_worker_report_init(&report);
    report.worker = worker;
    report.batch_size = batch_size.value_or(0);
    report.step_ms = step_ms.value_or(0.0f);
    check(eldr_router_report(m_router.get(), &report));
  }

  py::dict stats() const {
    eldr_router_stats_t st = ELDR_ROUTER_STATS_INIT;
    check(eldr_router_get_stats(m_router.get(), &st));
    py::dict out;
    out["routed"] = st.routed;
    out["rejected"] = st.rejected;
    out["completes_rejected"] = st.completes_rejected;
    out["completes_unknown"] = st.completes_unknown;
    out["untracked"] = st.untracked;
    out["step_samples"] = st.step_samples;
    out["t0_ms"] = st.t0_ms;
    out["tseq_ms"] = st.tseq_ms;
    out["alpha_us"] = st.alpha_us;
    eldr_prompt_stats_t ps = ELDR_PROMPT_STATS_INIT;
    check(eldr_router_get_prompt_stats(m_router.get(), &ps));
    out["prompts_routed"] = ps.routed;
    out["prompts_rejected"] = ps.rejected;
    out["learned"] = ps.learned;
    out["learn_rejected"] = ps.learn_rejected;
    out["prompts_dropped"] = ps.dropped;
    return out;
  }

  // Per worker slot (see workers()): similarity and band membership.
  py::tuple scores(const py::handle& counts_obj) {
    const auto counts = as_counts(counts_obj, 2, "counts");
    const uint32_t layers = extent_u32(counts, 0, "counts");
    const uint32_t experts = extent_u32(counts, 1, "counts");
    static_assert(sizeof(bool) == sizeof(uint8_t));
    for (;;) {  // again if a concurrent add_worker changed the slot count
      const uint32_t n = worker_slots();
      py::array_t<float> scores(static_cast<py::ssize_t>(n));
      py::array_t<bool> in_band(static_cast<py::ssize_t>(n));
      const eldr_status_t status =
          eldr_router_score(m_router.get(), counts.data(), layers, experts, scores.mutable_data(),
                            reinterpret_cast<uint8_t*>(in_band.mutable_data()), n);
      if (status == ELDR_E_INVALID_ARGUMENT && worker_slots() != n) continue;
      check(status);
      return py::make_tuple(std::move(scores), std::move(in_band));
    }
  }

  uint32_t worker_slots() const {
    uint32_t n = 0;
    check(eldr_router_get_worker_slots(m_router.get(), &n));
    return n;
  }

  // One dict per slot, in slot order (the order of loads and scores).
  py::list workers() const {
    for (;;) {
      const uint32_t n = worker_slots();
      std::vector<int32_t> ids(n);
      std::vector<uint32_t> states(n);
      std::vector<uint32_t> inflight(n);
      const eldr_status_t status =
          eldr_router_get_workers(m_router.get(), ids.data(), states.data(), inflight.data(), n);
      if (status == ELDR_E_INVALID_ARGUMENT && worker_slots() != n) continue;
      check(status);
      py::list out;
      for (uint32_t i = 0; i < n; ++i) {
        py::dict worker;
        worker["id"] = ids[i];
        worker["state"] = worker_state_name(states[i]);
        worker["inflight"] = inflight[i];
        out.append(std::move(worker));
      }
      return out;
    }
  }

  void swap_table(std::shared_ptr<Table> table) {
    if (!table) raise_status(ELDR_E_INVALID_ARGUMENT, "table is None");
    check(eldr_router_swap_table(m_router.get(), table->get()));
    m_table = std::move(table);
  }

 private:
  std::shared_ptr<Table> m_table;
  std::unique_ptr<eldr_router_t, RouterFree> m_router;
};

// The C side of the binding-overhead benchmark: median over `rounds` of the
// mean time of one eldr_router_route call in a tight C++ loop.
double bench_c_route(Router& router, const py::handle& counts_obj, uint32_t iterations,
                     uint32_t rounds) {
  if (iterations == 0 || rounds == 0)
    raise_status(ELDR_E_INVALID_ARGUMENT, "iterations and rounds must be positive");
  const auto counts = as_counts(counts_obj, 2, "counts");
  const uint32_t layers = extent_u32(counts, 0, "counts");
  const uint32_t experts = extent_u32(counts, 1, "counts");
  std::vector<double> per_call_ns(rounds);
  for (auto& sample : per_call_ns) {
    eldr_status_t status = ELDR_OK;
    eldr_decision_t decision;
    eldr_decision_init(&decision);
    const auto start = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < iterations && status == ELDR_OK; ++i)
      status =
          eldr_router_route(router.get(), counts.data(), layers, experts, nullptr, 0, &decision);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    check(status);
    sample = std::chrono::duration<double, std::nano>(elapsed).count() / iterations;
  }
  std::nth_element(per_call_ns.begin(), per_call_ns.begin() + rounds / 2, per_call_ns.end());
  return per_call_ns[rounds / 2];
}

}  // namespace

void bind_router(py::module_& m) {
  using WorkerCall = eldr_status_t (*)(eldr_router_t*, int32_t);
  const auto worker_method = [](WorkerCall call) {
    return [call](Router& self, int32_t worker) { check(call(self.get(), worker)); };
  };
  py::class_<Router>(m, "Router",
                     "The embedded router (no daemon): footprint -> decode worker. Thread-safe.")
      .def(
          py::init([](std::shared_ptr<Table> table, const py::handle& policy,
                      std::optional<float> tau, uint64_t seed, bool min2_band, uint32_t max_workers,
                      std::optional<double> t0_ms, std::optional<double> tseq_ms,
                      std::optional<double> alpha_us, std::optional<uint32_t> max_batch,
                      std::optional<uint32_t> max_inflight, bool fit_step_cost) {
            const StepOptions step{t0_ms,     tseq_ms,      alpha_us,
                                   max_batch, max_inflight, fit_step_cost};
            return std::make_unique<Router>(std::move(table), policy, tau, seed, min2_band,
                                            max_workers, step);
          }),
          py::arg("table"), py::arg("policy") = "eldr_cost", py::arg("tau") = 0.1,
          py::arg("seed") = 0, py::kw_only(), py::arg("min2_band") = false,
          py::arg("max_workers") = 256, py::arg("t0_ms") = py::none(),
          py::arg("tseq_ms") = py::none(), py::arg("alpha_us") = py::none(),
          py::arg("max_batch") = py::none(), py::arg("max_inflight") = py::none(),
          py::arg("fit_step_cost") = true,
          "policy: a name of policy_names() or its id (default 'eldr_cost'). tau: the band "
          "width of the band policies (None: the table's). t0_ms, tseq_ms, alpha_us: the step "
          "constants of 'eldr_cost', all three or none (None: the table's, else the preset of "
          "its geometry), max_batch with them (None: 64). fit_step_cost: refine them from "
          "report() step times. max_inflight: request records for request ids (None: 8192).")
      .def("route", &Router::route, py::arg("counts"), py::arg("loads") = py::none(),
           py::arg("request_id") = py::none(),
           "Routes one request and returns its Decision (.worker is the worker id). Without "
           "loads the pick is counted in flight on its worker (complete_worker(worker) ends "
           "it); loads (uint32 per worker slot, workers() order) override the in-flight counts "
           "for this decision only and nothing is counted. request_id (an int not in flight, "
           "not with loads): complete(request_id) ends it.")
      .def("route_prompt", &Router::route_prompt, py::arg("prompt"),
           py::arg("request_id") = py::none(), py::arg("workers") = py::none(),
           "Routes one request from its prompt (str, or a 1-D array of token ids < 2^20) with "
           "the table's footprint predictor, before any footprint exists (decode picked before "
           "prefill), and returns its Decision (.confidence: how sure the prediction was). "
           "request_id: as route(); the prompt is also kept until learn(request_id, footprint). "
           "workers (worker ids): choose only among them, a gateway's candidates (ids not active "
           "are skipped; NoWorker when none is left). "
           "Unsupported: the table has no predictor (fit it with prompts=).")
      .def("learn", &Router::learn, py::arg("request_id"), py::arg("footprint"),
           "The real footprint (int16 [layers][experts]) of a request routed with "
           "route_prompt(..., request_id=...), e.g. from the engine after prefill: the "
           "predictor learns from it (later predictions use it; Table.save writes it). "
           "NotFound: no prompt kept for the id.")
      .def(
          "complete_request",
          [](Router& self, uint64_t request_id) {
            if (PyErr_WarnEx(PyExc_DeprecationWarning,
                             "Router.complete_request is Router.complete since ABI 2", 1) < 0)
              throw py::error_already_set();
            self.complete(request_id);
          },
          py::arg("request_id"), "Deprecated: Router.complete.")
      .def("complete", &Router::complete, py::arg("request_id"),
           "The request routed with request_id finished: its worker's in-flight count drops by "
           "one and its experts leave that worker's batch. NotFound for an id not in flight "
           "(unknown, or completed already): counted in stats(), nothing else changes.")
      .def("report", &Router::report, py::arg("worker"), py::arg("batch_size") = py::none(),
           py::arg("step_ms") = py::none(),
           "A decode engine's report about worker: batch_size (requests running and waiting) "
           "replaces its in-flight count; step_ms (its last step, with batch_size requests) is "
           "a sample for the step-constant fit. None or 0: not reported (use set_load(worker, "
           "0) for an idle worker).")
      .def("stats", &Router::stats,
           "{'routed', 'rejected', 'completes_rejected', 'completes_unknown', 'untracked', "
           "'step_samples', 't0_ms', 'tseq_ms', 'alpha_us', 'prompts_routed', "
           "'prompts_rejected', 'learned', 'learn_rejected', 'prompts_dropped'}: counters since "
           "creation and the step constants in force.")
      .def("scores", &Router::scores, py::arg("counts"),
           "(scores float32 [slots], in_band bool [slots]) per worker slot (workers() order; "
           "without membership changes: the table's cluster order). Counts nothing in flight.")
      .def_property_readonly("worker_slots", &Router::worker_slots,
                             "Worker slots: the length of loads and scores.")
      .def("workers", &Router::workers,
           "Per slot: {'id', 'state' ('active' | 'draining' | 'removed'), 'inflight'}.")
      .def("complete_worker", worker_method(&eldr_router_complete_worker), py::arg("worker"),
           "The oldest request still in flight on worker finished: its in-flight count drops "
           "by one.")
      .def(
          "set_load",
          [](Router& self, int32_t worker, uint32_t inflight) {
            check(eldr_router_set_load(self.get(), worker, inflight));
          },
          py::arg("worker"), py::arg("inflight"))
      .def("add_worker", worker_method(&eldr_router_add_worker), py::arg("worker"))
      .def("drain_worker", worker_method(&eldr_router_drain_worker), py::arg("worker"))
      .def("remove_worker", worker_method(&eldr_router_remove_worker), py::arg("worker"))
      .def("swap_table", &Router::swap_table, py::arg("table"),
           "Hot swap: routing continues; later decisions carry the new epoch.")
      .def_property_readonly("table", &Router::table);

  m.def("_bench_c_route", &bench_c_route, py::arg("router"), py::arg("counts"),
        py::arg("iterations") = 10000, py::arg("rounds") = 21,
        "Median ns of one eldr_router_route call looped in C++ (benchmark baseline).");
}

}  // namespace eldr_py
