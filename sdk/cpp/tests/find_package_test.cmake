# Follows docs/sdk-cpp.md as a user would: runs the commands of its "Installed, with
# `find_package`" block (the standalone build of sdk/cpp and its install) from the repository's
# root, then configures and builds the consumer project against the install with
# find_package(switchboard_client), together with the page's first example, and runs the consumer.
# The commands are read from the page and run as written, but for the build directory and the
# prefix, which go to WORK_DIR: a page whose commands or example stop working fails this test.
#
# Inputs: SOURCE_DIR (the repository), DOC (docs/sdk-cpp.md), CONSUMER_DIR, WORK_DIR; GENERATOR
# and LAUNCHER, passed through the environment (CMAKE_GENERATOR, CMAKE_CXX_COMPILER_LAUNCHER) so
# that the commands stay as written and still build in parallel and from the compiler cache.
file(REMOVE_RECURSE ${WORK_DIR})
set(build_dir ${WORK_DIR}/sdk-build)
set(prefix ${WORK_DIR}/prefix)
if(GENERATOR)
  set(ENV{CMAKE_GENERATOR} ${GENERATOR})
endif()
if(LAUNCHER)
  set(ENV{CMAKE_CXX_COMPILER_LAUNCHER} ${LAUNCHER})
endif()

function(step)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${SOURCE_DIR}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
endfunction()

# The text between `opening` (which starts a fenced block) and the fence that closes it.
function(fenced_block doc opening out)
  string(FIND "${doc}" "${opening}" start)
  if(start EQUAL -1)
    message(FATAL_ERROR "${DOC} has no block starting with: ${opening}")
  endif()
  string(FIND "${opening}" "\n" first_line_end)
  math(EXPR start "${start} + ${first_line_end} + 1")
  string(SUBSTRING "${doc}" ${start} -1 rest)
  string(FIND "${rest}" "\n```" end)
  math(EXPR end "${end} + 1")
  string(SUBSTRING "${rest}" 0 ${end} block)
  set(${out} "${block}" PARENT_SCOPE)
endfunction()

file(READ ${DOC} doc)

# The install commands, one a line.
fenced_block("${doc}" "```sh\ncmake -S sdk/cpp" commands)
string(REPLACE "\n" ";" lines "${commands}")
set(count 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  separate_arguments(args UNIX_COMMAND "${line}")
  list(POP_FRONT args program)
  if(NOT program STREQUAL "cmake")
    message(FATAL_ERROR "${DOC}: the install block runs \"${program}\", expected cmake only")
  endif()
  list(TRANSFORM args REPLACE "^build/sdk$" "${build_dir}")
  list(TRANSFORM args REPLACE "^/opt/switchboard$" "${prefix}")
  message(STATUS "${line}")
  step(${CMAKE_COMMAND} ${args})
  math(EXPR count "${count} + 1")
endforeach()
if(NOT count EQUAL 3)
  message(FATAL_ERROR "${DOC}: expected configure, build and install commands, found ${count}")
endif()

# The page's first example, compiled in the consumer project.
fenced_block("${doc}" "```cpp\n" example)
file(WRITE ${WORK_DIR}/doc_example.cpp "${example}")

step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer
  -DCMAKE_PREFIX_PATH=${prefix} -DDOC_EXAMPLE=${WORK_DIR}/doc_example.cpp)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
step(${WORK_DIR}/consumer/consumer)
message(STATUS "the documented build installed switchboard::client; the consumer and the "
               "page's first example built against it, and the consumer ran")
