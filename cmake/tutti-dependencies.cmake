# SPDX-License-Identifier: Apache-2.0
# Finds what tutti::tutti needs; shared by the build tree and the installed package config.
#
# Thrust/CUB come from the CUDA toolkit's CCCL (/usr/local/cuda/include/cccl), or from any
# directory holding thrust/version.h (Debian's libthrust-dev puts it in /usr/include). Set
# TUTTI_CCCL_INCLUDE_DIR to choose one explicitly.
include_guard(GLOBAL)

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
# zlib's crc32 checksums checkpoint files (include/tutti/checkpoint.hpp).
find_package(ZLIB REQUIRED)
# The JSON the library writes (the trainer's records, the plan, link profiles): nlohmann-json
# (Debian's nlohmann-json3-dev), header-only.
find_package(nlohmann_json 3 CONFIG QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  message(FATAL_ERROR
    "tutti: nlohmann-json 3 not found. Install it (Debian: nlohmann-json3-dev) or add it to the "
    "project before tutti (its CMake package, nlohmann_json::nlohmann_json).")
endif()

if(NOT TARGET tutti::cccl)
  set(_tutti_cccl_hints)
  if(DEFINED ENV{CUDA_HOME})
    list(APPEND _tutti_cccl_hints "$ENV{CUDA_HOME}/include/cccl" "$ENV{CUDA_HOME}/include")
  endif()
  if(DEFINED CUDAToolkit_INCLUDE_DIRS)
    foreach(_d IN LISTS CUDAToolkit_INCLUDE_DIRS)
      list(APPEND _tutti_cccl_hints "${_d}/cccl" "${_d}")
    endforeach()
  endif()
  list(APPEND _tutti_cccl_hints /usr/local/cuda/include/cccl /usr/local/cuda/include /usr/include)
  find_path(TUTTI_CCCL_INCLUDE_DIR thrust/version.h
            HINTS ${_tutti_cccl_hints}
            DOC "Directory holding thrust/ and cub/ (the CUDA toolkit's CCCL or libthrust-dev)")
  if(NOT TUTTI_CCCL_INCLUDE_DIR)
    message(FATAL_ERROR
      "tutti: Thrust headers not found. Install the CUDA toolkit (CCCL under "
      "/usr/local/cuda/include/cccl) or Debian's libthrust-dev and libcub-dev, or set "
      "TUTTI_CCCL_INCLUDE_DIR to the directory holding thrust/version.h.")
  endif()
  add_library(tutti::cccl INTERFACE IMPORTED)
  # SYSTEM: CCCL's own warnings are not ours to fix.
  set_target_properties(tutti::cccl PROPERTIES
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${TUTTI_CCCL_INCLUDE_DIR}"
    INTERFACE_INCLUDE_DIRECTORIES "${TUTTI_CCCL_INCLUDE_DIR}")
endif()
