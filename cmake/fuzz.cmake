# Builds the libFuzzer targets (fuzz/) with clang as a nested project of this build, and runs
# each for SWITCHBOARD_FUZZ_SECONDS as a CTest test, so the test command fuzzes every parser of
# outside bytes a little on every run. Included when SWITCHBOARD_FUZZ_TARGETS is ON (the test
# command, scripts/test.sh, turns it on). Longer runs: docs/fuzzing.md.
include(ExternalProject)
include(${CMAKE_SOURCE_DIR}/fuzz/targets.cmake)

set(SWITCHBOARD_FUZZ_SECONDS 20 CACHE STRING "How long each fuzz target runs in the test suite")
set(fuzz_dir ${CMAKE_BINARY_DIR}/fuzz-build)

set(fuzz_byproducts)
foreach(name IN LISTS SWITCHBOARD_FUZZERS)
  list(APPEND fuzz_byproducts ${fuzz_dir}/fuzz/fuzz_${name})
endforeach()

ExternalProject_Add(switchboard_fuzz_build
  SOURCE_DIR ${CMAKE_SOURCE_DIR}
  BINARY_DIR ${fuzz_dir}
  CMAKE_GENERATOR Ninja
  CMAKE_ARGS
    -DCMAKE_CXX_COMPILER=${SWITCHBOARD_CLANGXX}
    -DCMAKE_BUILD_TYPE=Fuzz
    -DSWITCHBOARD_FUZZ=ON
    -DSWITCHBOARD_SANITIZE=address,undefined
    -DSWITCHBOARD_TESTS=OFF
    -DSWITCHBOARD_BENCH=OFF
    -DSWITCHBOARD_WEB=OFF
    -DSWITCHBOARD_EXAMPLES=OFF
  BUILD_COMMAND ${CMAKE_COMMAND} --build ${fuzz_dir} --target switchboard_fuzzers
  BUILD_ALWAYS ON
  BUILD_BYPRODUCTS ${fuzz_byproducts}
  INSTALL_COMMAND ""
  USES_TERMINAL_BUILD ON)

foreach(name IN LISTS SWITCHBOARD_FUZZERS)
  add_test(NAME fuzz_${name}
           COMMAND ${CMAKE_SOURCE_DIR}/fuzz/run.sh ${fuzz_dir}/fuzz/fuzz_${name}
                   ${CMAKE_SOURCE_DIR}/fuzz/corpus/${name} ${CMAKE_BINARY_DIR}/fuzz-runs/${name}
                   ${SWITCHBOARD_FUZZ_SECONDS})
  set_tests_properties(fuzz_${name} PROPERTIES TIMEOUT 300 LABELS fuzz)
endforeach()
# fuzz_http_server keeps one in-process server for the whole run and never tears it down (its
# io thread runs until the process exits), so what it holds at exit is not a leak.
set_tests_properties(fuzz_http_server PROPERTIES
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
