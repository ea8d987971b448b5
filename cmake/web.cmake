# Builds web/ (Vite + TypeScript, pinned in web/package-lock.json) and embeds web/dist in the
# server binary as the library switchboard_web. With SWITCHBOARD_WEB=OFF the library holds no
# files and the server answers / with a note that the page was left out of this build.

set(web_dir ${CMAKE_SOURCE_DIR}/web)
set(web_dist ${CMAKE_BINARY_DIR}/web/dist)
set(web_cpp ${CMAKE_BINARY_DIR}/generated/web_assets.cpp)
set(web_min_node 20.19)  # Vite 7's floor

if(SWITCHBOARD_WEB)
  find_program(NODE_PROGRAM node)
  find_program(NPM_PROGRAM npm)
  if(NODE_PROGRAM)
    execute_process(COMMAND ${NODE_PROGRAM} --version OUTPUT_VARIABLE node_version
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    string(REGEX REPLACE "^v" "" node_version "${node_version}")
  endif()
  if(NOT NODE_PROGRAM OR NOT NPM_PROGRAM OR node_version VERSION_LESS web_min_node)
    message(FATAL_ERROR
      "The web page needs Node.js ${web_min_node}+ and npm to build "
      "(found node: '${NODE_PROGRAM}' ${node_version}, npm: '${NPM_PROGRAM}').\n"
      "Run scripts/setup.sh, or configure with -DSWITCHBOARD_WEB=OFF for a server without the page.")
  endif()

  # npm ci when the lockfile changes (the script's stamp records the lockfile it installed).
  set(web_installed ${web_dir}/node_modules/.package-lock.sha256)
  add_custom_command(
    OUTPUT ${web_installed}
    COMMAND ${CMAKE_SOURCE_DIR}/scripts/npm-deps.sh web
    DEPENDS ${web_dir}/package-lock.json ${web_dir}/package.json
    COMMENT "Installing the web page's toolchain (npm ci in web/)"
    VERBATIM)

  file(GLOB_RECURSE web_sources CONFIGURE_DEPENDS
    ${web_dir}/src/*
    ${CMAKE_SOURCE_DIR}/sdk/js/src/*)
  add_custom_command(
    OUTPUT ${web_cpp}
    COMMAND ${NPM_PROGRAM} run --silent build -- --outDir ${web_dist} --emptyOutDir --logLevel warn
    COMMAND ${CMAKE_COMMAND} -DDIST=${web_dist} -DOUTPUT=${web_cpp}
            -P ${CMAKE_SOURCE_DIR}/cmake/embed_web_assets.cmake
    WORKING_DIRECTORY ${web_dir}
    DEPENDS ${web_sources} ${web_installed} ${web_dir}/index.html ${web_dir}/vite.config.ts
            ${web_dir}/tsconfig.json ${CMAKE_SOURCE_DIR}/cmake/embed_web_assets.cmake
    COMMENT "Building the web page (tsc + vite) and embedding it"
    VERBATIM)
else()
  add_custom_command(
    OUTPUT ${web_cpp}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${web_cpp} -P ${CMAKE_SOURCE_DIR}/cmake/embed_web_assets.cmake
    DEPENDS ${CMAKE_SOURCE_DIR}/cmake/embed_web_assets.cmake
    COMMENT "Embedding no web page (SWITCHBOARD_WEB=OFF)"
    VERBATIM)
endif()

add_library(switchboard_web STATIC ${web_cpp})
target_include_directories(switchboard_web PUBLIC src)

# End-to-end tests of the page: Debian's Chromium driven by playwright-core against the server
# built here (web/e2e, Node's test runner). Registered when the page is built and a Chromium is
# installed (scripts/setup.sh installs Debian's `chromium`).
if(SWITCHBOARD_WEB AND SWITCHBOARD_TESTS)
  find_program(CHROMIUM_PROGRAM NAMES chromium chromium-browser)
  if(CHROMIUM_PROGRAM)
    add_test(NAME web_e2e
             COMMAND ${NODE_PROGRAM} --test --test-concurrency=1 --test-reporter=spec e2e/
             WORKING_DIRECTORY ${web_dir})
    set_tests_properties(web_e2e PROPERTIES
      ENVIRONMENT "SWITCHBOARD_BIN=$<TARGET_FILE:switchboard>;CHROMIUM_BIN=${CHROMIUM_PROGRAM}"
      TIMEOUT 300)
  else()
    message(STATUS "chromium not found: the web page's end-to-end tests are not registered")
  endif()
endif()
