/* eldr_gpu.h: experimental GPU footprint collection, for engines that run
 * the router's top-k on the GPU. Included by eldr.h when ELDR_EXPERIMENTAL_GPU
 * is defined before it; not meant to be included on its own.
 *
 * Not part of the stable ABI: the eldr_gpu_footprints_* calls are exported
 * under their own symbol version (ELDR_EXPERIMENTAL_GPU_0, capi/src/eldr.map)
 * and may change in any release without an ABI bump. They need a library
 * built with CUDA (eldr_gpu_available() returns true); in other builds each
 * returns ELDR_E_UNSUPPORTED. Streams are cudaStream_t passed as void*; device
 * pointers are marked [device]. Not thread-safe: the calls on one handle must
 * be ordered, one at a time (its rows and scratch are shared state).
 */
#ifndef ELDR_ELDR_GPU_H
#define ELDR_ELDR_GPU_H

#include "eldr.h"

/* clang-format off */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eldr_gpu_footprints eldr_gpu_footprints_t;

#define ELDR_GPU_OPTIONS_VERSION 1

typedef struct eldr_gpu_options {
  uint32_t version; /* ELDR_GPU_OPTIONS_VERSION */
  uint32_t layers;
  uint32_t experts;
  uint32_t top_k;
  uint32_t block_size;             /* KV block size in tokens, 1..255 */
  uint32_t num_blocks;             /* physical KV blocks: rows [num_blocks][layers][experts] */
  uint32_t max_requests_per_step;  /* bound for eldr_gpu_footprints_sum_requests */
  int32_t device;                  /* CUDA device ordinal */
  uint64_t reserved[4];
} eldr_gpu_options_t;

#define ELDR_GPU_OPTIONS_INIT {ELDR_GPU_OPTIONS_VERSION, 0, 0, 0, 16, 0, 256, 0, {0, 0, 0, 0}}

/* Overflow flags, sticky until read with eldr_gpu_footprints_take_errors. */
#define ELDR_GPU_ERR_EXPERT_ID 1u   /* an expert id < 0 or >= experts */
#define ELDR_GPU_ERR_SLOT 2u        /* a slot outside num_blocks * block_size */
#define ELDR_GPU_ERR_BLOCK_ROW 4u   /* a block row cell would pass block_size (<= 255) */
#define ELDR_GPU_ERR_FOOTPRINT 8u   /* a request sum would pass 32767 */
#define ELDR_GPU_ERR_BLOCK_ID 16u   /* a block table entry outside num_blocks */

ELDR_API eldr_status_t eldr_gpu_footprints_new(const eldr_gpu_options_t* opts,
                                               eldr_gpu_footprints_t** out);
ELDR_API void eldr_gpu_footprints_free(eldr_gpu_footprints_t* gpu);

/* One engine step: expert_ids [device] is [tokens][layers][top_k] (layer < 0)
 * or [tokens][top_k] for one layer (layer >= 0), int32 (id_bytes 4) or int64
 * (id_bytes 8); slot_mapping [device] is int64 [tokens] (physical KV slot per
 * token; negative = padding, skipped). The token at block offset 0 resets its
 * block's row first; partial blocks accumulate across steps. */
ELDR_API eldr_status_t eldr_gpu_footprints_update_blocks(eldr_gpu_footprints_t* gpu, const void* expert_ids,
                                                         uint32_t id_bytes, uint32_t tokens, int32_t layer,
                                                         const int64_t* slot_mapping, void* stream);

/* For requests whose prefill ends this step: block_table [device] int32
 * [requests][max_blocks], num_blocks [device] int32 [requests]; out int16
 * [requests][layers][experts] in device or pinned host memory. */
ELDR_API eldr_status_t eldr_gpu_footprints_sum_requests(eldr_gpu_footprints_t* gpu, const int32_t* block_table,
                                                        uint32_t max_blocks, const int32_t* num_blocks,
                                                        uint32_t requests, int16_t* out, void* stream);

/* As eldr_gpu_footprints_sum_requests, then the footprints go straight into the client's
 * ring from the GPU (payload, system fence, commit), one record per request id,
 * without a host round trip: the call only enqueues work on `stream`. The ring
 * space of every request is claimed on the host first: RING_FULL means nothing
 * was enqueued (retry later), CAPACITY that the step cannot fit the client's
 * ring at all. Records are committed in call order, also across streams (each
 * sum or push waits on the GPU for the previous one). Never
 * push inside CUDA graph capture (STATE), and give the GPU path a client of
 * its own: while hand-offs are in flight, the client's CPU pushes return
 * STATE. A client closed meanwhile keeps its slot until its last hand-off has
 * committed. The first push of an attachment page-locks the client's own ring
 * for the device (4 KiB plus the ring size), not the rest of the segment. */
ELDR_API eldr_status_t eldr_gpu_footprints_push_requests(eldr_gpu_footprints_t* gpu, eldr_client_t* client,
                                                         const char* const* request_ids,
                                                         const int32_t* block_table, uint32_t max_blocks,
                                                         const int32_t* num_blocks, uint32_t requests,
                                                         void* stream);

/* Reads and clears the sticky ELDR_GPU_ERR_* flags (synchronises the stream). */
ELDR_API eldr_status_t eldr_gpu_footprints_take_errors(eldr_gpu_footprints_t* gpu, void* stream,
                                                       uint32_t* out);


#ifdef __cplusplus
} /* extern "C" */
#endif

/* clang-format on */

#endif /* ELDR_ELDR_GPU_H */
