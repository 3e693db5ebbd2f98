# Project-wide compile settings and the two helpers every folder's CMakeLists.txt uses.

# Warnings for C++ and for the host side of CUDA files; -Werror with RZ_WERROR (CI).
set(RZ_WARNINGS -Wall -Wextra)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND RZ_WARNINGS -Wno-restrict)  # GCC 12 false positives inside std::string (PR 105651)
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${RZ_WARNINGS}>")
if(RZ_CUDA)
  add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>")
endif()
if(RZ_WERROR)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-Werror>")
  if(RZ_CUDA)
    add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror>")
  endif()
endif()

# Sanitizers (host code): -DRZ_SANITIZE=address,undefined or -DRZ_SANITIZE=thread.
if(RZ_SANITIZE)
  set(rz_san -fsanitize=${RZ_SANITIZE} -fno-omit-frame-pointer)
  if(RZ_SANITIZE MATCHES "undefined")
    list(APPEND rz_san -fno-sanitize-recover=undefined)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${rz_san}>")
  add_link_options(${rz_san})
  message(STATUS "rz: sanitizers ${RZ_SANITIZE}")
endif()

# Fuzzing (-DRZ_FUZZ=ON, clang only; scripts/fuzz.sh): everything compiled for libFuzzer's
# coverage and with ASan + UBSan; tests/fuzz/ adds the targets.
if(RZ_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "RZ_FUZZ needs clang (CXX=clang++): libFuzzer is clang's")
  endif()
  set(rz_fuzz_flags -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${rz_fuzz_flags}>")
  add_link_options(-fsanitize=address,undefined)
  message(STATUS "rz: fuzz targets ON (libFuzzer, ASan, UBSan)")
endif()

# rz_library(NAME [GLOBS pattern...] DEPS target...): one static library of the calling folder's
# sources (default: *.cpp and *.cu in it), with the repository root on the include path.
function(rz_library name)
  cmake_parse_arguments(ARG "" "" "GLOBS;DEPS" ${ARGN})
  if(NOT ARG_GLOBS)
    set(ARG_GLOBS *.cpp *.cu)
  endif()
  set(srcs)
  foreach(g ${ARG_GLOBS})
    file(GLOB part CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${g})
    list(APPEND srcs ${part})
  endforeach()
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${RZ_CPU_ARCH_FLAGS}>)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# rz_test(NAME GLOBS pattern... DEPS target...): one GoogleTest executable from tests/<folder>.
function(rz_test name)
  cmake_parse_arguments(ARG "" "" "GLOBS;DEPS" ${ARGN})
  set(srcs)
  foreach(g ${ARG_GLOBS})
    file(GLOB part CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${g})
    list(APPEND srcs ${part})
  endforeach()
  if(NOT srcs)
    return()
  endif()
  add_executable(${name} ${srcs})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${RZ_CPU_ARCH_FLAGS})
  # RZ_BIN is the rz binary's path as a plain string: tests that run it depend on it explicitly,
  # the others do not wait for it to link.
  target_compile_definitions(${name} PRIVATE RZ_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    RZ_BINARY_DIR="${PROJECT_BINARY_DIR}" RZ_BIN="${PROJECT_BINARY_DIR}/rz")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "RZ_SOURCE_DIR=${PROJECT_SOURCE_DIR};RZ_BIN=${PROJECT_BINARY_DIR}/rz")
endfunction()
