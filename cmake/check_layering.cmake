# The layering test: cmake -DGRAPH=<build>/module-includes/graph.cmake -DCXX=<compiler>
#   -DWORK=<scratch dir> -P check_layering.cmake
# For every module M and every other module N, preprocesses a file holding only
# `#include "kvserve/N/<first header of N>"` against M's include root (what M's sources and M's
# users see). It must fail with "No such file" exactly when N is not among M's allowed
# dependencies; M's own first header must preprocess (so a failure is about visibility, not a
# broken command). Allowed includes other than M's own are proven by the build itself.
cmake_minimum_required(VERSION 3.25)
include(${GRAPH})
file(MAKE_DIRECTORY ${WORK})
set(failures 0)
set(checked 0)
foreach(m IN LISTS KVSERVE_MODULES)
  foreach(n IN LISTS KVSERVE_MODULES)
    file(GLOB headers RELATIVE ${KVSERVE_SOURCE_ROOT}/${n} ${KVSERVE_SOURCE_ROOT}/${n}/*.h)
    list(SORT headers)
    list(LENGTH headers count)
    if(count EQUAL 0)
      continue()
    endif()
    list(GET headers 0 header)
    set(allowed OFF)
    if(n STREQUAL m)
      set(allowed ON)
    elseif(n IN_LIST KVSERVE_MODULE_DEPS_${m})
      continue()  # allowed: the build compiles such includes already
    endif()
    set(probe ${WORK}/${m}_sees_${n}.cpp)
    file(WRITE ${probe} "#include \"kvserve/${n}/${header}\"\n")
    execute_process(
      COMMAND ${CXX} -std=c++20 -E -o /dev/null -I${KVSERVE_MODULE_INCLUDES}/${m}
              -I${KVSERVE_GENERATED_INCLUDES} ${probe}
      RESULT_VARIABLE rc ERROR_VARIABLE err)
    math(EXPR checked "${checked} + 1")
    if(allowed AND NOT rc EQUAL 0)
      message(SEND_ERROR "${m} cannot include its own kvserve/${n}/${header}:\n${err}")
      math(EXPR failures "${failures} + 1")
    elseif(NOT allowed)
      if(rc EQUAL 0)
        message(SEND_ERROR "${m} may not use ${n}, yet kvserve/${n}/${header} preprocessed")
        math(EXPR failures "${failures} + 1")
      elseif(NOT err MATCHES "kvserve/${n}/${header}: No such file")
        message(SEND_ERROR "${m} including kvserve/${n}/${header} failed, but not as missing:\n${err}")
        math(EXPR failures "${failures} + 1")
      endif()
    endif()
  endforeach()
endforeach()
if(failures GREATER 0)
  message(FATAL_ERROR "layering: ${failures} of ${checked} checks failed")
endif()
message(STATUS "layering: ${checked} checks passed (each module sees itself; no module sees one outside its allowed dependencies)")
