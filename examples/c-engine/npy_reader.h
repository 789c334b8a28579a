/* A small, strict reader for the footprint files the C engine example
 * consumes: NumPy .npy, little-endian int16, C order, shape (N, L, E). */
#ifndef ELDR_EXAMPLE_NPY_READER_H
#define ELDR_EXAMPLE_NPY_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct footprint_file {
  uint64_t requests; /* N */
  uint32_t layers;   /* L */
  uint32_t experts;  /* E */
  int16_t* counts;   /* N * L * E values, row-major; free with footprint_file_free */
} footprint_file;

/* Reads `path`. Returns 0 on success; otherwise -1 with a one-line reason in
 * `error` (error_size bytes) and `out` left empty. */
int footprint_file_read(const char* path, footprint_file* out, char* error, size_t error_size);
void footprint_file_free(footprint_file* file);

#endif /* ELDR_EXAMPLE_NPY_READER_H */
