// eldr._GpuFootprints over eldr_gpu_* (experimental): the GPU footprint path
// for Python engines. Arrays arrive as raw device addresses with their sizes;
// eldr.GpuFootprints (eldr/_gpu.py) reads them from __cuda_array_interface__
// (PyTorch, CuPy, Numba) and checks dtypes and shapes first. Streams are
// cudaStream_t handles as integers (0: the legacy default stream).
#define ELDR_EXPERIMENTAL_GPU 1

#include <string>
#include <vector>

#include "py_common.hpp"

namespace eldr_py {
namespace {

void* as_pointer(uintptr_t address) { return reinterpret_cast<void*>(address); }

class GpuFootprints {
 public:
  GpuFootprints(uint32_t layers, uint32_t experts, uint32_t top_k, uint32_t block_size,
                uint32_t num_blocks, uint32_t max_requests_per_step, int32_t device) {
    eldr_gpu_options_t options = ELDR_GPU_OPTIONS_INIT;
    options.layers = layers;
    options.experts = experts;
    options.top_k = top_k;
    options.block_size = block_size;
    options.num_blocks = num_blocks;
    options.max_requests_per_step = max_requests_per_step;
    options.device = device;
    py::gil_scoped_release unlocked;
    check(eldr_gpu_footprints_new(&options, m_gpu.init_slot()));
  }

  void close() { m_gpu.close(); }
  bool closed() const { return m_gpu.closed(); }

  void update_blocks(uintptr_t expert_ids, uint32_t id_bytes, uint32_t tokens, int32_t layer,
                     uintptr_t slot_mapping, uintptr_t stream) {
    m_gpu.call([&](eldr_gpu_footprints_t* gpu) {
      return eldr_gpu_footprints_update_blocks(
          gpu, as_pointer(expert_ids), id_bytes, tokens, layer,
          static_cast<const int64_t*>(as_pointer(slot_mapping)), as_pointer(stream));
    });
  }

  void sum_requests(uintptr_t block_table, uint32_t max_blocks, uintptr_t num_blocks,
                    uint32_t requests, uintptr_t out, uintptr_t stream) {
    m_gpu.call([&](eldr_gpu_footprints_t* gpu) {
      return eldr_gpu_footprints_sum_requests(
          gpu, static_cast<const int32_t*>(as_pointer(block_table)), max_blocks,
          static_cast<const int32_t*>(as_pointer(num_blocks)), requests,
          static_cast<int16_t*>(as_pointer(out)), as_pointer(stream));
    });
  }

  void push_requests(const py::handle& client, const py::sequence& request_ids,
                     uintptr_t block_table, uint32_t max_blocks, uintptr_t num_blocks,
                     uintptr_t stream) {
    std::vector<std::string> ids;
    ids.reserve(request_ids.size());
    for (const py::handle id : request_ids) ids.push_back(request_id_arg(id));
    std::vector<const char*> pointers;
    pointers.reserve(ids.size());
    for (const std::string& id : ids) pointers.push_back(id.c_str());
    const auto requests = static_cast<uint32_t>(pointers.size());
    // Lock order: the client (call_with_client), then this object.
    call_with_client(client, [&](eldr_client_t* c) {
      return m_gpu.locked([&](eldr_gpu_footprints_t* gpu) {
        return eldr_gpu_footprints_push_requests(
            gpu, c, pointers.data(), static_cast<const int32_t*>(as_pointer(block_table)),
            max_blocks, static_cast<const int32_t*>(as_pointer(num_blocks)), requests,
            as_pointer(stream));
      });
    });
  }

  uint32_t take_errors(uintptr_t stream) {
    uint32_t flags = 0;
    m_gpu.call([&](eldr_gpu_footprints_t* gpu) {
      return eldr_gpu_footprints_take_errors(gpu, as_pointer(stream), &flags);
    });
    return flags;
  }

 private:
  // The C handle's calls must be ordered: one at a time.
  SharedHandle<eldr_gpu_footprints_t, eldr_gpu_footprints_free, true> m_gpu{"GpuFootprints"};
};

}  // namespace

void bind_gpu(py::module_& m) {
  py::class_<GpuFootprints>(m, "_GpuFootprints",
                            "eldr_gpu_* over raw device addresses; use eldr.GpuFootprints.")
      .def(py::init<uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, int32_t>(),
           py::arg("layers"), py::arg("experts"), py::arg("top_k"), py::arg("block_size"),
           py::arg("num_blocks"), py::arg("max_requests_per_step"), py::arg("device"))
      .def("update_blocks", &GpuFootprints::update_blocks, py::arg("expert_ids"),
           py::arg("id_bytes"), py::arg("tokens"), py::arg("layer"), py::arg("slot_mapping"),
           py::arg("stream"))
      .def("sum_requests", &GpuFootprints::sum_requests, py::arg("block_table"),
           py::arg("max_blocks"), py::arg("num_blocks"), py::arg("requests"), py::arg("out"),
           py::arg("stream"))
      .def("push_requests", &GpuFootprints::push_requests, py::arg("client"),
           py::arg("request_ids"), py::arg("block_table"), py::arg("max_blocks"),
           py::arg("num_blocks"), py::arg("stream"))
      .def("take_errors", &GpuFootprints::take_errors, py::arg("stream"))
      .def("close", &GpuFootprints::close)
      .def_property_readonly("closed", &GpuFootprints::closed);
  m.attr("GPU_ERR_EXPERT_ID") = ELDR_GPU_ERR_EXPERT_ID;
  m.attr("GPU_ERR_SLOT") = ELDR_GPU_ERR_SLOT;
  m.attr("GPU_ERR_BLOCK_ROW") = ELDR_GPU_ERR_BLOCK_ROW;
  m.attr("GPU_ERR_FOOTPRINT") = ELDR_GPU_ERR_FOOTPRINT;
  m.attr("GPU_ERR_BLOCK_ID") = ELDR_GPU_ERR_BLOCK_ID;
}

}  // namespace eldr_py
