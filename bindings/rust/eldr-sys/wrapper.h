/* What bindgen reads for eldr-sys (scripts/check-bindgen.sh): the stable C API,
 * eldr.h, and routing from the prompt, eldr_prompt.h. */
#include "eldr/eldr.h"
#include "eldr/eldr_prompt.h"
