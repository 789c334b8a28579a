// eldr.Pool over eldr_pool_*: route through any eldrd node of a pool over
// NATS, for a gateway without a local sidecar. Calls release the GIL; the
// handle is shared like Client's (close() waits for calls in flight).
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "py_common.hpp"

namespace eldr_py {
namespace {

class Pool {
 public:
  // The auth arguments are file paths (eldr_nats_auth_t), and the inbox
  // prefix; None: not used.
  using File = std::optional<std::string>;
  Pool(const std::string& nats, const std::string& pool, uint32_t timeout_ms, const File& ca_file,
       const File& cert_file, const File& key_file, const File& creds_file, const File& user,
       const File& password_file, const File& token_file, const File& inbox_prefix)
      : m_pool_name(pool) {
    const auto c = [](const File& f) { return f ? f->c_str() : nullptr; };
    eldr_nats_auth_t auth = ELDR_NATS_AUTH_INIT;
    auth.ca_file = c(ca_file);
    auth.cert_file = c(cert_file);
    auth.key_file = c(key_file);
    auth.creds_file = c(creds_file);
    auth.user = c(user);
    auth.password_file = c(password_file);
    auth.token_file = c(token_file);
    auth.inbox_prefix = c(inbox_prefix);
    py::gil_scoped_release unlocked;
    const eldr_status_t status =
        eldr_pool_open_auth(nats.c_str(), pool.c_str(), &auth, timeout_ms, m_pool.init_slot());
    if (status != ELDR_OK) check(status);
  }

  Decision route(const py::handle& request_id_obj, const py::handle& counts_obj,
                 uint32_t timeout_ms) {
    const std::string id = request_id_arg(request_id_obj);
    const auto counts = as_counts(counts_obj, 2, "counts");
    const uint32_t layers = extent_u32(counts, 0, "counts");
    const uint32_t experts = extent_u32(counts, 1, "counts");
    eldr_decision_t decision;
    eldr_decision_init(&decision);
    m_pool.call([&](eldr_pool_t* pool) {
      return eldr_pool_route(pool, id.c_str(), counts.data(), layers, experts, timeout_ms,
                             &decision);
    });
    return Decision::from_c(decision);
  }

  Decision route_prompt(const py::handle& request_id_obj, const py::handle& prompt_obj,
                        uint32_t timeout_ms) {
    const std::string id = request_id_arg(request_id_obj);
    const PromptArg prompt = prompt_arg(prompt_obj, "prompt");
    const eldr_prompt_t p = prompt.view();
    eldr_decision_t decision;
    eldr_decision_init(&decision);
    m_pool.call([&](eldr_pool_t* pool) {
      return p.text
                 ? eldr_pool_route_text(pool, id.c_str(), p.text, p.text_len, timeout_ms, &decision)
                 : eldr_pool_route_tokens(pool, id.c_str(), p.tokens, p.n_tokens, timeout_ms,
                                          &decision);
    });
    return Decision::from_c(decision);
  }

  void complete(const py::handle& request_id_obj, uint64_t token) {
    const std::string id = request_id_arg(request_id_obj);
    m_pool.call([&](eldr_pool_t* pool) { return eldr_pool_complete(pool, id.c_str(), token); });
  }

  void close() { m_pool.close(); }
  bool closed() const { return m_pool.closed(); }
  const std::string& name() const noexcept { return m_pool_name; }

 private:
  std::string m_pool_name;
  SharedHandle<eldr_pool_t, eldr_pool_free> m_pool{"pool"};
};

}  // namespace

void bind_pool(py::module_& m) {
  py::class_<Pool>(m, "Pool",
                   "Routing through any eldrd node of a pool over NATS (eldrd --nats ... --pool "
                   "NAME), for a gateway with no eldrd on its node. Thread-safe; use as a "
                   "context manager or call close().")
      .def(py::init<const std::string&, const std::string&, uint32_t, const Pool::File&,
                    const Pool::File&, const Pool::File&, const Pool::File&, const Pool::File&,
                    const Pool::File&, const Pool::File&, const Pool::File&>(),
           py::arg("nats"), py::arg("pool") = "default", py::arg("timeout_ms") = 2000,
           py::kw_only(), py::arg("ca_file") = py::none(), py::arg("cert_file") = py::none(),
           py::arg("key_file") = py::none(), py::arg("creds_file") = py::none(),
           py::arg("user") = py::none(), py::arg("password_file") = py::none(),
           py::arg("token_file") = py::none(), py::arg("inbox_prefix") = py::none(),
           "TLS and credentials for a secured pool, by file (eldr_nats_auth_t): ca_file turns "
           "TLS on; cert_file with key_file; then creds_file, or user with password_file, or "
           "token_file. inbox_prefix (default _INBOX): where the answers come; one per gateway "
           "user, which alone may subscribe to it.")
      .def("route_prompt", &Pool::route_prompt, py::arg("request_id"), py::arg("prompt"),
           py::arg("timeout_ms") = 2000,
           "Routes from the prompt (str, or token ids) through any node of the pool.")
      .def("route", &Pool::route, py::arg("request_id"), py::arg("counts"),
           py::arg("timeout_ms") = 2000,
           "Routes a footprint int16 [layers][experts] through one node of the pool; its "
           "Decision (worker, similarity, table_epoch, completion_token).")
      .def("complete", &Pool::complete, py::arg("request_id"), py::arg("token"),
           "The request finished: tells the node that routed it (token: the decision's).")
      .def_property_readonly("name", &Pool::name)
      .def_property_readonly("closed", &Pool::closed)
      .def("close", &Pool::close,
           "Disconnects; the nodes release at once the requests routed through it and not "
           "completed. Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Pool& p, const py::args&) { p.close(); });
}

}  // namespace eldr_py
