# Writes OUT (a header with DSV4_GIT_COMMIT) from `git describe` of SRC, rewriting it only when the
# commit changed, so that `dsv4 --version` names the commit it was built from without rebuilding on
# every build. Run at build time by the dsv4_version target (src/CMakeLists.txt).
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "#define DSV4_GIT_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUT}" "${text}")
endif()
