# SPDX-License-Identifier: Apache-2.0
# Checks that every C++/CUDA source of the project is formatted by the repository's
# .clang-format, and lists the files that are not.
#
#   cmake -DSOURCE_DIR=<checkout> [-DCLANG_FORMAT=<path>] -P check_format.cmake
#
# The files are found when the test runs, so sources added after configuring are checked too.
# Without clang-format the check prints "tutti format check skipped" (the test's
# SKIP_REGULAR_EXPRESSION) and reports itself skipped rather than passed.
cmake_minimum_required(VERSION 3.25)

if(NOT SOURCE_DIR)
  message(FATAL_ERROR "check_format.cmake: -DSOURCE_DIR=<checkout> is required")
endif()
if(NOT CLANG_FORMAT OR NOT EXISTS "${CLANG_FORMAT}")
  unset(CLANG_FORMAT)
  find_program(CLANG_FORMAT NAMES clang-format clang-format-19 clang-format-18 clang-format-17
                                  clang-format-16 clang-format-15 clang-format-14)
endif()
if(NOT CLANG_FORMAT)
  message("tutti format check skipped: clang-format is not installed "
          "(scripts/deps.sh installs it)")
  return()
endif()

set(files)
foreach(dir IN ITEMS include tests examples benchmarks)
  foreach(ext IN ITEMS hpp cpp cu cuh)
    file(GLOB_RECURSE found LIST_DIRECTORIES false "${SOURCE_DIR}/${dir}/*.${ext}")
    list(APPEND files ${found})
  endforeach()
endforeach()
# Build trees made inside a source folder hold CMake's and fetched sources, not ours.
list(FILTER files EXCLUDE REGEX "/(CMakeFiles|_deps)/")
list(SORT files)
list(LENGTH files count)
if(count EQUAL 0)
  message(FATAL_ERROR "tutti format check: no sources found under ${SOURCE_DIR}; "
                      "expected include/, tests/, examples/ and benchmarks/ to hold some")
endif()

set(unformatted)
foreach(file IN LISTS files)
  execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${file}
                  WORKING_DIRECTORY ${SOURCE_DIR}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    file(RELATIVE_PATH relative "${SOURCE_DIR}" "${file}")
    list(APPEND unformatted "${relative}")
  endif()
endforeach()

execute_process(COMMAND ${CLANG_FORMAT} --version OUTPUT_VARIABLE version
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(unformatted)
  list(LENGTH unformatted bad)
  list(JOIN unformatted "\n  " listed)
  list(JOIN unformatted " " joined)
  message(FATAL_ERROR "tutti format check: ${bad} of ${count} files differ from .clang-format "
                      "(${version}):\n  ${listed}\nFix with:\n  cd ${SOURCE_DIR} && "
                      "${CLANG_FORMAT} -i ${joined}")
endif()
message(STATUS "tutti format check: ${count} files formatted (${version})")
