# CLI11::CLI11 for the command-line programs (eldrd in sidecar/, eldr in
# tools/): CLI11's CMake package when installed, else its header-only include
# directory. Include it in each
# folder that links CLI11::CLI11: an imported target is seen only in the folder
# that made it and below, so this file has no include guard and each folder
# looks once.
if(NOT TARGET CLI11::CLI11)
  find_package(CLI11 CONFIG QUIET)
  if(NOT CLI11_FOUND)
    find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
    add_library(CLI11::CLI11 INTERFACE IMPORTED)
    target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
  endif()
endif()
