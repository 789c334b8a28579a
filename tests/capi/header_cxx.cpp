// Compiled alone as C++17 (-Wall -Wextra -pedantic -Werror, plus -Wshadow):
// the build fails if eldr.h or eldr_prompt.h stops being usable from C++.
#include "eldr/eldr_prompt.h"

namespace {

constexpr eldr_decision_t kDecision = ELDR_DECISION_INIT;
constexpr eldr_client_options_t kClient = ELDR_CLIENT_OPTIONS_INIT;
constexpr eldr_table_info_t kInfo = ELDR_TABLE_INFO_INIT;
constexpr eldr_fit_options_t kFit = ELDR_FIT_OPTIONS_INIT;
constexpr eldr_router_options_t kRouter = ELDR_ROUTER_OPTIONS_INIT;
constexpr eldr_gpu_options_t kGpu = ELDR_GPU_OPTIONS_INIT;
constexpr eldr_predictor_options_t kPredictor = ELDR_PREDICTOR_OPTIONS_INIT;
constexpr eldr_prompt_stats_t kPromptStats = ELDR_PROMPT_STATS_INIT;

static_assert(kDecision.version == ELDR_DECISION_VERSION && kDecision.worker == -1);
static_assert(kClient.open_timeout_ms == 2000 && kInfo.version == ELDR_TABLE_INFO_VERSION);
static_assert(kFit.seed == 1 && kRouter.max_workers == 256 && kGpu.block_size == 16);
static_assert(kPredictor.neighbours == 16 && kPromptStats.version == ELDR_PROMPT_STATS_VERSION);
// Decision version 2 took its confidence from `reserved`: the size is ABI 2's.
static_assert(sizeof(eldr_decision_t) == 72 && kDecision.confidence == 1.0f);
// The layout bindings rely on: the version first, 64-bit fields aligned.
static_assert(offsetof(eldr_decision_t, version) == 0 && sizeof(eldr_decision_t) % 8 == 0);
static_assert(offsetof(eldr_router_options_t, seed) % 8 == 0);

}  // namespace
