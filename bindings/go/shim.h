/* C side of the Go binding, included by the cgo preamble of each Go file.
 *
 * eldr_last_error_message() is per OS thread, and a goroutine may move to
 * another thread between two cgo calls. So every wrapper below makes the API
 * call AND copies the message in one C call, returning both by value (no Go
 * pointer escapes on the success path: zero allocations per route).
 */
#ifndef ELDRGO_SHIM_H
#define ELDRGO_SHIM_H

#include <eldr/eldr.h>
#include <eldr/eldr_prompt.h>
#include <stdlib.h>
#include <string.h>

#if ELDR_ABI_VERSION != 2
#error "bindings/go is written for ELDR_ABI_VERSION 2: update it for the new eldr.h"
#endif

#define ELDRGO_MAX_REQUEST_ID 128

/* status, and on failure a malloc'd copy of the detail message (Go frees it). */
typedef struct eldrgo_err {
  int32_t status;
  char* message;
} eldrgo_err;

static inline eldrgo_err eldrgo_check(eldr_status_t status) {
  eldrgo_err r = {status, NULL};
  if (status != ELDR_OK) {
    const char* m = eldr_last_error_message();
    r.message = strdup(m ? m : "");
  }
  return r;
}

static inline eldrgo_err eldrgo_fail(eldr_status_t status, const char* message) {
  eldrgo_err r = {status, strdup(message)};
  return r;
}

/* A Go string as a NUL-terminated request id, or the error a wrapper
 * returns (status nonzero). The Go side validates first; this guards the
 * copy. */
typedef struct eldrgo_request_id {
  eldrgo_err err;
  char id[ELDRGO_MAX_REQUEST_ID + 1];
} eldrgo_request_id;

static inline eldrgo_request_id eldrgo_request_id_of(_GoString_ id) {
  eldrgo_request_id r;
  r.err.status = ELDR_OK;
  r.err.message = NULL;
  size_t n = _GoStringLen(id);
  if (n > 0 && n <= ELDRGO_MAX_REQUEST_ID) {
    memcpy(r.id, _GoStringPtr(id), n);
    r.id[n] = '\0';
    if (strlen(r.id) == n) return r; /* no embedded NUL */
  }
  r.err = eldrgo_fail(ELDR_E_INVALID_ARGUMENT, "bad request id");
  return r;
}

/* A call's error and the decision it filled. */
typedef struct eldrgo_decision_result {
  eldrgo_err err;
  eldr_decision_t decision;
} eldrgo_decision_result;

static inline eldrgo_decision_result eldrgo_decision_result_new(void) {
  eldrgo_decision_result r;
  r.err.status = ELDR_OK;
  r.err.message = NULL;
  eldr_decision_init(&r.decision);
  return r;
}

#endif /* ELDRGO_SHIM_H */
