# Go builds in this tree (the binding in bindings/go, the gateway example):
# one offline environment and one way to build and test a package.
#
# eldr_go_env(VAR): the environment every go command runs in. Offline
# (GOPROXY=off, -mod=readonly): modules come from the module cache that
# scripts/install-deps.sh filled from the module proxy, exactly as go.sum pins
# them. The build cache lives in the build tree; cgo links this build's
# libeldr. ELDRD and ELDR_CLI name this build's daemon and CLI for the tests
# (generator expressions: tools/ may come later, they resolve at generation).
#
# eldr_go_package(TARGET <target> TEST <ctest name> TEST_BINARY <name>
#                 COMMENT <text> [BINARY <path>]):
# in the current source folder, `go vet`, `go build -o BINARY` when given, and
# `go test -c` into <current binary dir>/TEST_BINARY, as an ALL target after
# eldr_capi; with ELDR_BUILD_TESTS, ctest runs that test binary as TEST.
include_guard(GLOBAL)

function(eldr_go_env var)
  set(env
    GOCACHE=${CMAKE_BINARY_DIR}/go/cache
    "GOFLAGS=-buildvcs=false -mod=readonly"
    GOPROXY=off
    GO111MODULE=on
    CGO_ENABLED=1
    "CGO_LDFLAGS=-L${CMAKE_BINARY_DIR}/lib -Wl,-rpath,${CMAKE_BINARY_DIR}/lib")
  if(TARGET eldrd)
    list(APPEND env ELDRD=$<TARGET_FILE:eldrd>)
  endif()
  if(ELDR_BUILD_TOOLS)
    list(APPEND env ELDR_CLI=$<TARGET_FILE:eldr_cli>)
  endif()
  set(${var} "${env}" PARENT_SCOPE)
endfunction()

function(eldr_go_package)
  cmake_parse_arguments(arg "" "TARGET;TEST;TEST_BINARY;COMMENT;BINARY" "" ${ARGN})
  eldr_go_env(env)
  set(test_binary ${CMAKE_CURRENT_BINARY_DIR}/${arg_TEST_BINARY})
  set(build)
  if(arg_BINARY)
    set(build COMMAND ${CMAKE_COMMAND} -E env ${env} ${ELDR_GO} build -o ${arg_BINARY} .)
  endif()
  add_custom_target(${arg_TARGET} ALL
    COMMAND ${CMAKE_COMMAND} -E env ${env} ${ELDR_GO} vet .
    ${build}
    COMMAND ${CMAKE_COMMAND} -E env ${env} ${ELDR_GO} test -c -o ${test_binary} .
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
    COMMENT "${arg_COMMENT}"
    VERBATIM)
  add_dependencies(${arg_TARGET} eldr_capi)
  if(ELDR_BUILD_TESTS)
    add_test(NAME ${arg_TEST}
      COMMAND ${CMAKE_COMMAND} -E env ${env} ${test_binary} -test.count=1
      WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
endfunction()
