/* Routes one footprint through an installed libeldr.so: proves the exported
 * package and the pkg-config file carry what a C (or cgo) program needs. */
#include <eldr/eldr.h>
#include <stdint.h>
#include <stdio.h>

int main(void) {
  /* Two workers, one layer of four experts: worker 0 owns experts 0-1. */
  const int16_t calibration[4 * 4] = {3, 2, 0, 0, 2, 3, 0, 0, 0, 0, 3, 2, 0, 0, 2, 3};
  const int16_t request[4] = {0, 0, 4, 1};
  eldr_fit_options_t fit = ELDR_FIT_OPTIONS_INIT;
  eldr_table_t* table = NULL;
  eldr_router_t* router = NULL;
  float scores[2];
  uint8_t in_band[2];
  eldr_decision_t decision = ELDR_DECISION_INIT;
  int32_t worker;
  /* The paper's rule: on an idle fleet it picks the most similar worker. */
  eldr_router_options_t options = ELDR_ROUTER_OPTIONS_INIT;
  options.policy = ELDR_POLICY_ELDR;
  if (eldr_abi_version() != ELDR_ABI_VERSION) return 1;
  fit.num_workers = 2;
  fit.threads = 1;
  if (eldr_table_fit(calibration, NULL, 4, 1, 4, 2, &fit, &table) != ELDR_OK ||
      eldr_router_new(table, &options, &router) != ELDR_OK ||
      eldr_router_route(router, request, 1, 4, NULL, 0, &decision) != ELDR_OK ||
      eldr_router_score(router, request, 1, 4, scores, in_band, 2) != ELDR_OK) {
    fprintf(stderr, "c_consumer: %s\n", eldr_last_error_message());
    return 2;
  }
  /* The request uses the experts of the cluster the chosen worker owns. */
  worker = decision.worker;
  if (worker < 0 || worker > 1 || !(scores[worker] > scores[1 - worker])) return 3;
  printf("c_consumer: libeldr %s routed to worker %d\n", eldr_version_string(), (int)worker);
  eldr_router_free(router);
  eldr_table_free(table);
  return 0;
}
