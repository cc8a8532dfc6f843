# Compiles a one-line file, `#include "HEADER"`, the way layer LAYER compiles its sources (its
# include view <build>/layers/LAYER/ and the public headers, nothing else), and checks the
# outcome: EXPECT=found (it compiles) or EXPECT=missing (the compiler cannot find HEADER).
#
#   cmake -DCXX=... -DBUILD_DIR=... -DSOURCE_DIR=... -DLAYER=core -DHEADER=memory/x.h
#         -DEXPECT=missing -P tests/layering/try_include.cmake
#
# Run by ctest (tests/CMakeLists.txt, LayeringTest.*) with the same header from a layer below
# (missing) and from the layer that owns it (found), so a pass means the view made the difference.
foreach(var CXX BUILD_DIR SOURCE_DIR LAYER HEADER EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "try_include.cmake: -D${var}=... is required")
  endif()
endforeach()
set(view ${BUILD_DIR}/layers/${LAYER})
if(NOT IS_DIRECTORY ${view})
  message(FATAL_ERROR "no include view for layer '${LAYER}' (${view}): configure the build first")
endif()
string(MAKE_C_IDENTIFIER "${LAYER}_${HEADER}" probe_name)
set(probe ${BUILD_DIR}/layering-probes/${probe_name}.cc)
file(WRITE ${probe} "#include \"${HEADER}\"\n")
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${view} -I${SOURCE_DIR}/include
                        ${probe}
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
# gcc: "No such file or directory"; clang: "file not found".
string(REGEX MATCH "No such file or directory|file not found" not_found "${err}")
if(EXPECT STREQUAL "missing")
  if(rc EQUAL 0)
    message(FATAL_ERROR "layer '${LAYER}' could include '${HEADER}': the build does not reject "
                        "this upward include")
  elseif(NOT not_found)
    message(FATAL_ERROR "'${HEADER}' from layer '${LAYER}' failed for another reason:\n${err}")
  endif()
  message(STATUS "layer '${LAYER}' cannot include '${HEADER}', as it should")
elseif(EXPECT STREQUAL "found")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "layer '${LAYER}' cannot compile '#include \"${HEADER}\"':\n${err}")
  endif()
  message(STATUS "layer '${LAYER}' includes '${HEADER}'")
else()
  message(FATAL_ERROR "EXPECT must be 'found' or 'missing', not '${EXPECT}'")
endif()
