/* eldr C engine example: an engine process that, for each request's prefill
 * footprint, asks the node's eldrd which decode worker should take it.
 *
 *   eldr_c_engine --instance NAME --footprints prefill.npy [--timeout-ms 1000]
 *                 [--open-timeout-ms 2000] [--prefix ID_PREFIX] [--limit N]
 *
 * Footprints come from an int16 (N, L, E) .npy file (e.g. `eldr synth`). Each
 * is pushed and its decision awaited with eldr_client_route; one line per request:
 *   <request id> -> worker <w> similarity <s> band <b>
 * The decode is assumed done at once, so each request is completed right away
 * (a real engine calls eldr_client_complete when the decode finishes).
 * Exit status: 0 if every request was routed, 1 otherwise, 2 on bad usage. */
#include <eldr/eldr.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy_reader.h"

#if ELDR_ABI_VERSION != 2
#error "this example is written for ELDR_ABI_VERSION 2"
#endif

typedef struct options {
  const char* instance;
  const char* footprints;
  const char* prefix;
  uint32_t timeout_ms;
  uint32_t open_timeout_ms;
  uint64_t limit;
} options;

static void usage(FILE* out) {
  fprintf(out,
          "usage: eldr_c_engine --instance NAME --footprints FILE.npy [--timeout-ms MS]\n"
          "                     [--open-timeout-ms MS] [--prefix ID_PREFIX] [--limit N]\n");
}

static int parse_u64(const char* text, uint64_t max, uint64_t* out) {
  if (text == NULL || *text < '0' || *text > '9') return -1;
  errno = 0;
  char* end = NULL;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v > max) return -1;
  *out = v;
  return 0;
}

static int parse_args(int argc, char** argv, options* o) {
  static char default_prefix[32];
  snprintf(default_prefix, sizeof default_prefix, "c%ld", (long)getpid());
  *o = (options){NULL, NULL, default_prefix, 1000, 2000, UINT64_MAX};
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : NULL;
    uint64_t n = 0;
    if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (value == NULL) {
      fprintf(stderr, "eldr_c_engine: %s needs a value\n", flag);
      return -1;
    } else if (strcmp(flag, "--instance") == 0) {
      o->instance = value;
    } else if (strcmp(flag, "--footprints") == 0) {
      o->footprints = value;
    } else if (strcmp(flag, "--prefix") == 0) {
      o->prefix = value;
    } else if (strcmp(flag, "--timeout-ms") == 0 && parse_u64(value, UINT32_MAX, &n) == 0) {
      o->timeout_ms = (uint32_t)n;
    } else if (strcmp(flag, "--open-timeout-ms") == 0 && parse_u64(value, UINT32_MAX, &n) == 0) {
      o->open_timeout_ms = (uint32_t)n;
    } else if (strcmp(flag, "--limit") == 0 && parse_u64(value, UINT64_MAX, &n) == 0) {
      o->limit = n;
    } else {
      fprintf(stderr, "eldr_c_engine: bad option %s %s\n", flag, value);
      return -1;
    }
    ++i;
  }
  if (o->instance == NULL || o->footprints == NULL) {
    fprintf(stderr, "eldr_c_engine: --instance and --footprints are required\n");
    return -1;
  }
  /* The id is "<prefix>-<index>": leave room for the index in 128 bytes. */
  if (strlen(o->prefix) == 0 || strlen(o->prefix) > 100) {
    fprintf(stderr, "eldr_c_engine: --prefix must be 1..100 bytes\n");
    return -1;
  }
  return 0;
}

/* Prints a failed call with its status name and the thread's detail message
 * (read right after the call, before any other eldr call). */
static void report_error(const char* what, eldr_status_t status) {
  fprintf(stderr, "eldr_c_engine: %s: %s: %s\n", what, eldr_status_name(status),
          eldr_last_error_message());
}

int main(int argc, char** argv) {
  options o;
  if (parse_args(argc, argv, &o) != 0) {
    usage(stderr);
    return 2;
  }
  if (eldr_abi_version() != ELDR_ABI_VERSION) {
    fprintf(stderr, "eldr_c_engine: libeldr ABI %" PRIu32 ", built for %d\n", eldr_abi_version(),
            ELDR_ABI_VERSION);
    return 1;
  }

  footprint_file file;
  char error[512];
  if (footprint_file_read(o.footprints, &file, error, sizeof error) != 0) {
    fprintf(stderr, "eldr_c_engine: %s\n", error);
    return 1;
  }

  eldr_client_options_t client_options = ELDR_CLIENT_OPTIONS_INIT;
  client_options.open_timeout_ms = o.open_timeout_ms;
  eldr_client_t* client = NULL;
  eldr_status_t s = eldr_client_open(o.instance, &client_options, &client);
  if (s != ELDR_OK) {
    report_error("open", s);
    footprint_file_free(&file);
    return 1;
  }

  const size_t cells = (size_t)file.layers * file.experts;
  const uint64_t n = file.requests < o.limit ? file.requests : o.limit;
  uint64_t failed = 0;
  for (uint64_t i = 0; i < n; ++i) {
    char request_id[129];
    snprintf(request_id, sizeof request_id, "%s-%" PRIu64, o.prefix, i);
    eldr_decision_t decision = ELDR_DECISION_INIT;
    s = eldr_client_route(client, request_id, file.counts + i * cells, file.layers, file.experts,
                          o.timeout_ms, &decision);
    if (s == ELDR_OK && decision.status != ELDR_OK) {
      fprintf(stderr, "eldr_c_engine: %s: rejected by eldrd: %s\n", request_id,
              eldr_status_name(decision.status));
      ++failed;
      continue;
    }
    if (s != ELDR_OK) {
      report_error(request_id, s);
      ++failed;
      continue;
    }
    printf("%s -> worker %" PRId32 " similarity %.4f band %" PRIu32 "\n", request_id,
           decision.worker, (double)decision.similarity, decision.band_size);
    s = eldr_client_complete(client, request_id, 0);
    if (s != ELDR_OK) {
      report_error("complete", s);
      ++failed;
    }
  }
  fflush(stdout);
  eldr_client_free(client);
  footprint_file_free(&file);
  if (failed != 0) {
    fprintf(stderr, "eldr_c_engine: %" PRIu64 " of %" PRIu64 " requests failed\n", failed, n);
    return 1;
  }
  return 0;
}
