/* Compiled alone as strict C11 (-std=c11 -Wall -Wextra -pedantic -Werror):
 * the build fails if eldr.h or eldr_prompt.h (which includes it) stops being
 * plain C. */
#include "eldr/eldr_prompt.h"

/* Every INIT macro is a valid initialiser. */
static const eldr_decision_t kDecision = ELDR_DECISION_INIT;
static const eldr_client_options_t kClient = ELDR_CLIENT_OPTIONS_INIT;
static const eldr_table_info_t kInfo = ELDR_TABLE_INFO_INIT;
static const eldr_fit_options_t kFit = ELDR_FIT_OPTIONS_INIT;
static const eldr_router_options_t kRouter = ELDR_ROUTER_OPTIONS_INIT;
static const eldr_predictor_options_t kPredictor = ELDR_PREDICTOR_OPTIONS_INIT;
static const eldr_predictor_info_t kPredictorInfo = ELDR_PREDICTOR_INFO_INIT;
static const eldr_prompt_stats_t kPromptStats = ELDR_PROMPT_STATS_INIT;
#if defined(ELDR_EXPERIMENTAL_GPU)
static const eldr_gpu_options_t kGpu = ELDR_GPU_OPTIONS_INIT;
#endif

int eldr_header_c11_versions(void);
int eldr_header_c11_versions(void) {
  int sum =
      (int)(kDecision.version + kClient.version + kInfo.version + kFit.version + kRouter.version +
            kPredictor.version + kPredictorInfo.version + kPromptStats.version);
#if defined(ELDR_EXPERIMENTAL_GPU)
  sum += (int)kGpu.version;
#endif
  return sum;
}
