// eldr.Client over eldr_client_*: talks to the node's eldrd. Every call
// releases the GIL (the C client serialises calls itself and may block), and
// a reader/writer lock keeps close() from freeing the handle under a call
// running on another thread.
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>

#include "py_common.hpp"

namespace eldr_py {
namespace {

// Long waits run in slices so that Ctrl-C (and other signal handlers) get a
// chance between them; a decision that arrives mid-slice returns at once.
constexpr uint32_t kSignalCheckMs = 100;

class Client {
 public:
  Client(const std::string& instance, uint32_t open_timeout_ms, uint32_t daemon_stale_ms,
         bool reattach)
      : m_instance(instance) {
    eldr_client_options_t options;
    eldr_client_options_init(&options);
    options.open_timeout_ms = open_timeout_ms;
    options.daemon_stale_ms = daemon_stale_ms;
    options.reattach = reattach ? 1 : 0;
    eldr_status_t status;
    {
      py::gil_scoped_release unlocked;
      status = eldr_client_open(instance.c_str(), &options, m_client.init_slot());
      if (status != ELDR_OK) check(status);  // message read on this thread, before anything else
    }
  }

  void close() { m_client.close(); }
  bool closed() const { return m_client.closed(); }
  const std::string& instance() const noexcept { return m_instance; }

  void push(const py::handle& request_id_obj, const py::handle& counts_obj) {
    const std::string id = request_id_arg(request_id_obj);
    const auto counts = as_counts(counts_obj, 2, "counts");
    const uint32_t layers = extent_u32(counts, 0, "counts");
    const uint32_t experts = extent_u32(counts, 1, "counts");
    call([&](eldr_client_t* client) {
      return eldr_client_push(client, id.c_str(), counts.data(), layers, experts);
    });
  }

  void push_prompt(const py::handle& request_id_obj, const py::handle& prompt_obj) {
    const std::string id = request_id_arg(request_id_obj);
    const PromptArg prompt = prompt_arg(prompt_obj, "prompt");
    const eldr_prompt_t p = prompt.view();
    call([&](eldr_client_t* client) {
      return p.text ? eldr_client_push_text(client, id.c_str(), p.text, p.text_len)
                    : eldr_client_push_tokens(client, id.c_str(), p.tokens, p.n_tokens);
    });
  }

  Decision route_prompt(const py::handle& request_id_obj, const py::handle& prompt_obj,
                        uint32_t timeout_ms) {
    push_prompt(request_id_obj, prompt_obj);
    return wait_for(request_id_arg(request_id_obj), timeout_ms);
  }

  Decision wait(const py::handle& request_id_obj, uint32_t timeout_ms) {
    return wait_for(request_id_arg(request_id_obj), timeout_ms);
  }

  // Push, then the same sliced wait as wait(): one call for the caller.
  Decision route(const py::handle& request_id_obj, const py::handle& counts_obj,
                 uint32_t timeout_ms) {
    push(request_id_obj, counts_obj);
    return wait_for(request_id_arg(request_id_obj), timeout_ms);
  }

  void complete(const py::handle& request_id_obj, uint64_t token) {
    const std::string id = request_id_arg(request_id_obj);
    call([&](eldr_client_t* client) { return eldr_client_complete(client, id.c_str(), token); });
  }

  // eldr_client_report: without batch_size and step_ms it sends the plain
  // report (which every eldrd reads).
  void report(int32_t worker, uint32_t running, float kv_usage, uint32_t batch_size,
              float step_ms) {
    eldr_worker_report_t r = ELDR_WORKER_REPORT_INIT;
    r.worker = worker;
    r.running = running;
    r.kv_usage = kv_usage;
    r.batch_size = batch_size;
    r.step_ms = step_ms;
    call([&](eldr_client_t* client) { return eldr_client_report(client, &r); });
  }

  using WorkerCall = eldr_status_t (*)(eldr_client_t*, int32_t);
  void control(WorkerCall op, int32_t worker) {
    call([&](eldr_client_t* client) { return op(client, worker); });
  }

  // One C call without the GIL (SharedHandle::call).
  template <typename Fn>
  void call(Fn&& fn) {
    m_client.call(std::forward<Fn>(fn));
  }

 private:
  Decision wait_for(const std::string& id, uint32_t timeout_ms) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    eldr_decision_t decision;
    eldr_decision_init(&decision);
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      const auto slice =
          static_cast<uint32_t>(std::clamp<int64_t>(left.count(), 0, kSignalCheckMs));
      eldr_status_t status = ELDR_OK;
      call([&](eldr_client_t* client) {
        status = eldr_client_wait(client, id.c_str(), slice, &decision);
        return status == ELDR_E_TIMEOUT ? ELDR_OK : status;
      });
      if (status == ELDR_OK) break;
      if (slice == 0 || Clock::now() >= deadline)
        raise_status(ELDR_E_TIMEOUT, "no decision for request '" + id + "' within " +
                                         std::to_string(timeout_ms) + " ms");
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    const Decision result = Decision::from_c(decision);
    if (result.status != ELDR_OK) raise_rejected(id, result);
    return result;
  }

  // The daemon answered with an error decision (the footprint was rejected):
  // raise its status, with the decision attached as `.decision`.
  [[noreturn]] static void raise_rejected(const std::string& id, const Decision& decision) {
    py::object exc =
        py::module_::import("eldr._errors")
            .attr("_from_status")(decision.status, "eldrd rejected request '" + id +
                                                       "': " + eldr_status_string(decision.status));
    exc.attr("decision") = py::cast(decision);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
  }

  std::string m_instance;
  SharedHandle<eldr_client_t, eldr_client_free> m_client{"client"};
};

}  // namespace

void call_with_client(const py::handle& client,
                      const std::function<eldr_status_t(eldr_client_t*)>& fn) {
  py::cast<Client&>(client).call(fn);
}

void bind_client(py::module_& m) {
  py::class_<Client>(m, "Client",
                     "A connection to the node's eldrd (instance name). Thread-safe; use as a "
                     "context manager or call close().")
      .def(py::init<const std::string&, uint32_t, uint32_t, bool>(), py::arg("instance"),
           py::arg("open_timeout_ms") = 2000, py::kw_only(), py::arg("daemon_stale_ms") = 3000,
           py::arg("reattach") = true)
      .def("push", &Client::push, py::arg("request_id"), py::arg("counts"),
           "Pushes a footprint int16 [layers][experts]; returns once it is in the ring.")
      .def("wait", &Client::wait, py::arg("request_id"), py::arg("timeout_ms") = 1000,
           "Waits for the decision for request_id (pushed by any client of this daemon).")
      .def("push_prompt", &Client::push_prompt, py::arg("request_id"), py::arg("prompt"),
           "Pushes the request's prompt (str, or token ids < 2^20) for the daemon to route "
           "from, before prefill; a prompt longer than a ring record keeps its head and tail "
           "(what the predictor reads). A later push(request_id, footprint) of the same id "
           "teaches the daemon's predictor instead of routing again.")
      .def("route_prompt", &Client::route_prompt, py::arg("request_id"), py::arg("prompt"),
           py::arg("timeout_ms") = 1000,
           "push_prompt then wait; the daemon's verdict raises like route's (Unsupported: "
           "its table has no predictor).")
      .def("route", &Client::route, py::arg("request_id"), py::arg("counts"),
           py::arg("timeout_ms") = 1000,
           "push then wait. A footprint the daemon rejected raises its eldr.Error subclass "
           "(e.g. eldr.ShapeMismatch) with the decision attached as .decision.")
      .def("complete", &Client::complete, py::arg("request_id"), py::arg("token") = 0,
           "The request's decode finished: its worker's in-flight count drops by one. token: "
           "the decision's completion_token; without it (0) the daemon accepts the complete "
           "only from the process that pushed the footprint.")
      .def("report", &Client::report, py::arg("worker"), py::arg("running"), py::arg("kv_usage"),
           py::kw_only(), py::arg("batch_size") = 0, py::arg("step_ms") = 0.0f,
           "Load report from a decode worker (kv_usage in [0, 1]). batch_size: requests in its "
           "last decode step, which replaces the daemon's in-flight count; step_ms: that step's "
           "duration, a sample for the online fit of the step constants (0 = not reported).")
      .def(
          "add_worker", [](Client& c, int32_t w) { c.control(&eldr_client_add_worker, w); },
          py::arg("worker"), "Admin: the worker is routable again.")
      .def(
          "drain_worker", [](Client& c, int32_t w) { c.control(&eldr_client_drain_worker, w); },
          py::arg("worker"), "Admin: no new requests for the worker.")
      .def(
          "remove_worker", [](Client& c, int32_t w) { c.control(&eldr_client_remove_worker, w); },
          py::arg("worker"), "Admin: the worker leaves routing.")
      .def("close", &Client::close, "Unregisters from the daemon. Idempotent.")
      .def_property_readonly("closed", &Client::closed)
      .def_property_readonly("instance", &Client::instance)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Client& c, const py::args&) { c.close(); });
}

}  // namespace eldr_py
