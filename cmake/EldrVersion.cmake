# The version and ABI, read from the C API header, the one place they are
# written: sets ELDR_VERSION (MAJOR.MINOR.PATCH) and ELDR_ABI_VERSION.
# Usable before project().
set(eldr_header ${CMAKE_CURRENT_LIST_DIR}/../capi/include/eldr/eldr.h)
file(STRINGS ${eldr_header} eldr_version_lines
     REGEX "^#define ELDR_(VERSION_MAJOR|VERSION_MINOR|VERSION_PATCH|ABI_VERSION) [0-9]+$")
foreach(name VERSION_MAJOR VERSION_MINOR VERSION_PATCH ABI_VERSION)
  string(REGEX MATCH "ELDR_${name} ([0-9]+)" eldr_match "${eldr_version_lines}")
  if(NOT eldr_match)
    message(FATAL_ERROR "eldr: ELDR_${name} not found in ${eldr_header}")
  endif()
  set(ELDR_${name} ${CMAKE_MATCH_1})
endforeach()
set(ELDR_VERSION ${ELDR_VERSION_MAJOR}.${ELDR_VERSION_MINOR}.${ELDR_VERSION_PATCH})
unset(eldr_header)
unset(eldr_version_lines)
unset(eldr_match)
