/* Strict .npy reader: every header field is checked and the payload size must
 * match the shape exactly, so a truncated or foreign file is an error message,
 * never a crash or a silent partial read. */
#include "npy_reader.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMaxHeaderBytes = 1 << 16 };

static int fail(char* error, size_t size, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(error, size, fmt, args);
  va_end(args);
  return -1;
}

static int host_is_little_endian(void) {
  const uint16_t probe = 1;
  return *(const uint8_t*)&probe == 1;
}

/* The text after `'key':` in the header dict, spaces skipped; NULL if absent. */
static const char* dict_value(const char* header, const char* key) {
  char quoted[64];
  snprintf(quoted, sizeof quoted, "'%s'", key);
  const char* at = strstr(header, quoted);
  if (at == NULL) return NULL;
  at += strlen(quoted);
  while (*at == ' ') ++at;
  if (*at != ':') return NULL;
  ++at;
  while (*at == ' ') ++at;
  return at;
}

/* Parses "(N, L, E)" (exactly three positive integers). */
static int parse_shape(const char* text, uint64_t dims[3]) {
  if (*text != '(') return -1;
  ++text;
  for (int i = 0; i < 3; ++i) {
    while (*text == ' ') ++text;
    if (*text < '0' || *text > '9') return -1;
    errno = 0;
    char* end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || v == 0) return -1;
    dims[i] = v;
    text = end;
    while (*text == ' ') ++text;
    if (i < 2) {
      if (*text != ',') return -1;
      ++text;
    }
  }
  if (*text == ',') ++text; /* tolerate a trailing comma */
  while (*text == ' ') ++text;
  return *text == ')' ? 0 : -1;
}

static int parse_header(const char* header, uint64_t dims[3], char* error, size_t size) {
  const char* descr = dict_value(header, "descr");
  if (descr == NULL) return fail(error, size, "header has no 'descr'");
  if (strncmp(descr, "'<i2'", 5) != 0) {
    return fail(error, size, "dtype must be little-endian int16 ('<i2')");
  }
  const char* order = dict_value(header, "fortran_order");
  if (order == NULL || strncmp(order, "False", 5) != 0) {
    return fail(error, size, "array must be in C order (fortran_order False)");
  }
  const char* shape = dict_value(header, "shape");
  if (shape == NULL || parse_shape(shape, dims) != 0) {
    return fail(error, size, "shape must be three positive integers (N, L, E)");
  }
  if (dims[1] > UINT32_MAX || dims[2] > UINT32_MAX) {
    return fail(error, size, "layers or experts out of range");
  }
  return 0;
}

int footprint_file_read(const char* path, footprint_file* out, char* error, size_t size) {
  memset(out, 0, sizeof *out);
  if (!host_is_little_endian()) return fail(error, size, "this reader needs a little-endian host");
  FILE* f = fopen(path, "rb");
  if (f == NULL) return fail(error, size, "%s: %s", path, strerror(errno));

  int rc = -1;
  char* header = NULL;
  unsigned char prefix[12];
  if (fread(prefix, 1, 10, f) != 10 || memcmp(prefix, "\x93NUMPY", 6) != 0) {
    fail(error, size, "%s: not a .npy file (bad magic)", path);
    goto done;
  }
  const unsigned major = prefix[6];
  uint64_t header_len = 0;
  long data_offset = 0;
  if (major == 1) {
    header_len = (uint64_t)prefix[8] | ((uint64_t)prefix[9] << 8);
    data_offset = 10;
  } else if (major == 2 || major == 3) {
    if (fread(prefix + 10, 1, 2, f) != 2) {
      fail(error, size, "%s: truncated header", path);
      goto done;
    }
    header_len = (uint64_t)prefix[8] | ((uint64_t)prefix[9] << 8) | ((uint64_t)prefix[10] << 16) |
                 ((uint64_t)prefix[11] << 24);
    data_offset = 12;
  } else {
    fail(error, size, "%s: unsupported .npy version %u", path, major);
    goto done;
  }
  if (header_len == 0 || header_len > kMaxHeaderBytes) {
    fail(error, size, "%s: header length %" PRIu64 " out of range", path, header_len);
    goto done;
  }
  header = malloc(header_len + 1);
  if (header == NULL || fread(header, 1, header_len, f) != header_len) {
    fail(error, size, "%s: truncated header", path);
    goto done;
  }
  header[header_len] = '\0';
  if (memchr(header, '\0', header_len) != NULL) {
    fail(error, size, "%s: NUL byte in header", path);
    goto done;
  }
  data_offset += (long)header_len;

  uint64_t dims[3];
  char why[128];
  if (parse_header(header, dims, why, sizeof why) != 0) {
    fail(error, size, "%s: %s", path, why);
    goto done;
  }
  /* Payload must be exactly N*L*E int16: no overflow, no short or long file. */
  const uint64_t cells_per_request = dims[1] * dims[2];
  if (dims[0] > UINT64_MAX / cells_per_request ||
      dims[0] * cells_per_request > (uint64_t)SIZE_MAX / sizeof(int16_t)) {
    fail(error, size, "%s: shape too large", path);
    goto done;
  }
  const uint64_t cells = dims[0] * cells_per_request;
  if (fseek(f, 0, SEEK_END) != 0) {
    fail(error, size, "%s: cannot seek: %s", path, strerror(errno));
    goto done;
  }
  const long file_size = ftell(f);
  if (file_size < data_offset || (uint64_t)(file_size - data_offset) != cells * sizeof(int16_t)) {
    fail(error, size,
         "%s: payload is %ld bytes, shape (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ") needs %" PRIu64,
         path, file_size - data_offset, dims[0], dims[1], dims[2],
         cells * (uint64_t)sizeof(int16_t));
    goto done;
  }
  if (fseek(f, data_offset, SEEK_SET) != 0) {
    fail(error, size, "%s: cannot seek: %s", path, strerror(errno));
    goto done;
  }
  int16_t* counts = malloc((size_t)cells * sizeof(int16_t));
  if (counts == NULL) {
    fail(error, size, "%s: out of memory for %" PRIu64 " counts", path, cells);
    goto done;
  }
  if (fread(counts, sizeof(int16_t), (size_t)cells, f) != (size_t)cells) {
    free(counts);
    fail(error, size, "%s: short read", path);
    goto done;
  }
  out->requests = dims[0];
  out->layers = (uint32_t)dims[1];
  out->experts = (uint32_t)dims[2];
  out->counts = counts;
  rc = 0;
done:
  free(header);
  fclose(f);
  return rc;
}

void footprint_file_free(footprint_file* file) {
  if (file == NULL) return;
  free(file->counts);
  memset(file, 0, sizeof *file);
}
