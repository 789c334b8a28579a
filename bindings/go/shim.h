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
#include <stdlib.h>
#include <string.h>

#if ELDR_ABI_VERSION != 1
#error "bindings/go is written for ELDR_ABI_VERSION 1: update it for the new eldr.h"
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

/* A Go string as a NUL-terminated request id in `buf` (ELDRGO_MAX_REQUEST_ID + 1
 * bytes). The Go side validates first; this guards the copy. */
static inline int eldrgo_request_id(_GoString_ id, char* buf) {
  size_t n = _GoStringLen(id);
  if (n == 0 || n > ELDRGO_MAX_REQUEST_ID) return 0;
  memcpy(buf, _GoStringPtr(id), n);
  buf[n] = '\0';
  return strlen(buf) == n; /* no embedded NUL */
}

#endif /* ELDRGO_SHIM_H */
