/* A plain C11 consumer of libeldr.so: fits a table from synthetic arrays,
 * routes both domains, checks the decisions and the error paths. Exit 0 on
 * success; any failure prints what and exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eldr/eldr.h"

#define LAYERS 3u
#define EXPERTS 16u
#define CELLS (LAYERS * EXPERTS)
#define PER_DOMAIN 16u

static int failures = 0;

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "c_smoke: %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              eldr_last_error_message());                                                 \
      ++failures;                                                                         \
    }                                                                                     \
  } while (0)

/* Domain d uses experts [d * EXPERTS / 2, (d + 1) * EXPERTS / 2) in every layer. */
static void footprint(unsigned domain, unsigned variant, int16_t* out) {
  unsigned l, e;
  memset(out, 0, CELLS * sizeof *out);
  for (l = 0; l < LAYERS; ++l)
    for (e = 0; e < EXPERTS / 2; ++e)
      out[l * EXPERTS + domain * (EXPERTS / 2) + e] = (int16_t)(1 + (e * 7 + variant) % 5);
}

/* eldr_router_route when only the worker id matters. */
static eldr_status_t route_worker(eldr_router_t* router, const int16_t* counts, uint32_t layers,
                                  uint32_t experts, int32_t* worker) {
  eldr_decision_t d = ELDR_DECISION_INIT;
  eldr_status_t s = eldr_router_route(router, counts, layers, experts, NULL, 0, &d);
  if (s == ELDR_OK) *worker = d.worker;
  return s;
}

int main(void) {
  static int16_t calibration[2 * PER_DOMAIN * CELLS];
  int16_t a[CELLS], b[CELLS];
  eldr_fit_options_t fit;
  eldr_table_t* table = NULL;
  eldr_router_t* router = NULL;
  eldr_table_info_t info = ELDR_TABLE_INFO_INIT;
  eldr_decision_t decision = ELDR_DECISION_INIT;
  eldr_router_options_t options = ELDR_ROUTER_OPTIONS_INIT;
  eldr_router_stats_t stats = ELDR_ROUTER_STATS_INIT;
  eldr_worker_report_t report = ELDR_WORKER_REPORT_INIT;
  int32_t wa = -1, wb = -1, untouched = -5;
  float scores[2] = {0.0f, 0.0f};
  uint8_t in_band[2] = {0, 0};
  unsigned i;

  CHECK(eldr_abi_version() == ELDR_ABI_VERSION);
  for (i = 0; i < 2 * PER_DOMAIN; ++i) footprint(i % 2, i / 2, calibration + (size_t)i * CELLS);
  eldr_fit_options_init(&fit);
  fit.num_workers = 2;
  fit.threads = 1;
  CHECK(eldr_table_fit(calibration, NULL, 2 * PER_DOMAIN, LAYERS, EXPERTS, 2, &fit, &table) ==
        ELDR_OK);
  if (table == NULL) return 1;
  CHECK(eldr_table_get_info(table, &info) == ELDR_OK);
  CHECK(info.layers == LAYERS && info.experts == EXPERTS && info.num_workers == 2);

  /* The locality band (the default is ELDR_POLICY_ELDR_COST). */
  CHECK(options.version == ELDR_ROUTER_OPTIONS_VERSION && options.policy == ELDR_POLICY_ELDR_COST);
  options.policy = ELDR_POLICY_ELDR;
  CHECK(eldr_router_new(table, &options, &router) == ELDR_OK);
  if (router == NULL) return 1;

  footprint(0, 3, a);
  footprint(1, 3, b);
  CHECK(route_worker(router, a, LAYERS, EXPERTS, &wa) == ELDR_OK);
  CHECK(route_worker(router, b, LAYERS, EXPERTS, &wb) == ELDR_OK);
  CHECK(wa >= 0 && wa < 2 && wb >= 0 && wb < 2 && wa != wb);
  CHECK(eldr_router_route(router, a, LAYERS, EXPERTS, NULL, 0, &decision) == ELDR_OK);
  CHECK(decision.worker == wa && decision.table_epoch == 1 && decision.band_size == 1);
  /* Disjoint experts: near-orthogonal to the other centroid. (Slots follow
   * the fitted worker ids 0 and 1.) */
  CHECK(eldr_router_score(router, a, LAYERS, EXPERTS, scores, in_band, 2) == ELDR_OK);
  CHECK(scores[wa] == decision.similarity && scores[wa] > 0.5f && scores[1 - wa] < 0.1f);
  CHECK(in_band[wa] == 1 && in_band[1 - wa] == 0);
  CHECK(eldr_router_complete_worker(router, wa) == ELDR_OK);
  CHECK(eldr_router_complete_worker(router, wa) == ELDR_OK);
  CHECK(eldr_router_complete_worker(router, wb) == ELDR_OK);
  CHECK(eldr_router_complete_worker(router, wb) == ELDR_E_STATE); /* never below zero */

  /* Errors come back as codes with a message; out-params stay untouched. */
  CHECK(route_worker(router, NULL, LAYERS, EXPERTS, &untouched) == ELDR_E_INVALID_ARGUMENT);
  CHECK(strstr(eldr_last_error_message(), "eldr_router_route") != NULL);
  CHECK(route_worker(router, a, EXPERTS, LAYERS, &untouched) == ELDR_E_SHAPE_MISMATCH);
  CHECK(untouched == -5);
  CHECK(strcmp(eldr_status_name(ELDR_E_SHAPE_MISMATCH), "ELDR_E_SHAPE_MISMATCH") == 0);

  eldr_router_free(router);

  /* The default policy with fixed step constants: requests by id, an
   * engine's report, the stats. */
  router = NULL;
  eldr_router_options_init(&options);
  options.t0_ms = 2.0;
  options.tseq_ms = 0.05;
  options.alpha_us = 1.5;
  options.fit_step_cost = 0;
  CHECK(eldr_router_new(table, &options, &router) == ELDR_OK);
  eldr_table_free(table); /* the router keeps its own reference */
  if (router == NULL) return 1;
  eldr_decision_init(&decision);
  CHECK(eldr_router_route_request(router, 41, a, LAYERS, EXPERTS, &decision) == ELDR_OK);
  CHECK(decision.policy == ELDR_POLICY_ELDR_COST && decision.worker >= 0 && decision.worker < 2);
  CHECK(eldr_router_route_request(router, 41, b, LAYERS, EXPERTS, &decision) == ELDR_E_STATE);
  CHECK(eldr_router_complete(router, 41) == ELDR_OK);
  CHECK(eldr_router_complete(router, 41) == ELDR_E_NOT_FOUND); /* counted only */
  eldr_worker_report_init(&report);
  report.worker = (uint32_t)decision.worker;
  report.batch_size = 3;
  report.step_ms = 4.5f;
  CHECK(eldr_router_report(router, &report) == ELDR_OK);
  report.step_ms = -1.0f;
  CHECK(eldr_router_report(router, &report) == ELDR_E_INVALID_ARGUMENT);
  CHECK(eldr_router_get_stats(router, &stats) == ELDR_OK);
  CHECK(stats.routed == 1 && stats.rejected == 1 && stats.completes_unknown == 1);
  CHECK(stats.t0_ms == 2.0 && stats.tseq_ms == 0.05 && stats.alpha_us == 1.5);
  CHECK(stats.step_samples == 0); /* fit_step_cost = 0 */
  eldr_router_free(router);

  /* A routed-expert payload from C: 2 rows x 2 hidden layers x top-2 uint8
   * ids, row 0 = {0,1 | 2,3}, row 1 = {1,2 | 3,0}, as base64. */
  {
    const char* b64 = "AAECAwECAwA="; /* bytes 00 01 02 03 01 02 03 00 */
    eldr_routed_experts_options_t ro = ELDR_ROUTED_EXPERTS_OPTIONS_INIT;
    eldr_routed_experts_info_t ri = ELDR_ROUTED_EXPERTS_INFO_INIT;
    int16_t fp[2 * 4];
    ro.num_experts = 4;
    ro.num_hidden_layers = 2;
    ro.top_k = 2;
    CHECK(eldr_routed_experts_decode_base64_ids(b64, strlen(b64), ELDR_DTYPE_UINT8, &ro, fp, 8,
                                                &ri) == ELDR_OK);
    /* layer 0 saw {0,1} and {1,2}; layer 1 saw {2,3} and {3,0} */
    CHECK(fp[0] == 1 && fp[1] == 2 && fp[2] == 1 && fp[3] == 0);
    CHECK(fp[4] == 1 && fp[5] == 0 && fp[6] == 1 && fp[7] == 2);
    CHECK(ri.rows_in_payload == 2 && ri.rows_counted == 2);
    CHECK(eldr_routed_experts_decode_base64_ids(b64, strlen(b64) - 1, ELDR_DTYPE_UINT8, &ro, fp, 8,
                                                &ri) == ELDR_E_CORRUPT);
  }
  if (failures != 0) return 1;
  printf("c_smoke: ok (domain 0 -> worker %d, domain 1 -> worker %d)\n", (int)wa, (int)wb);
  return 0;
}
