// libFuzzer target: arbitrary bytes as an .npy file. Every input must either
// parse into an array whose byte size matches its shape, or fail cleanly.
#include <cstdint>
#include <cstdlib>

#include "eldr/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto array = eldr::parse_npy({data, size});
  if (!array) return 0;
  const uint64_t width = eldr::npy_dtype_size(array->dtype);
  if (array->bytes.size() != array->count() * width) std::abort();
  (void)eldr::npy_to_int16(*array);
  (void)eldr::npy_to_float(*array);
  return 0;
}
