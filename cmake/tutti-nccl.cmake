# SPDX-License-Identifier: Apache-2.0
# NCCL, for `tutti::nccl_ring` (include/tutti/reducers/nccl_ring.hpp: gradients averaged across
# GPUs, compiled by nvcc). NCCL ships with the CUDA toolkit on some machines, or with PyTorch's
# nvidia-nccl wheel, or as Debian's libnccl-dev; set TUTTI_NCCL_INCLUDE_DIR and
# TUTTI_NCCL_LIBRARY to choose one.
#
# Defines the imported target tutti::nccl (the library, its header folder, tutti::cuda, and
# TUTTI_HAS_NCCL=1) and TUTTI_NCCL (ON/OFF). tutti::tutti itself does not depend on it.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/tutti-cuda.cmake)

if(NOT TARGET tutti::nccl AND TARGET tutti::cuda)
  set(_tutti_nccl_hints)
  foreach(_d IN LISTS CUDAToolkit_INCLUDE_DIRS CUDAToolkit_LIBRARY_DIR)
    list(APPEND _tutti_nccl_hints "${_d}")
  endforeach()
  find_path(TUTTI_NCCL_INCLUDE_DIR nccl.h HINTS ${_tutti_nccl_hints} /usr/local/cuda/include
            DOC "Directory holding nccl.h")
  find_library(TUTTI_NCCL_LIBRARY nccl HINTS ${_tutti_nccl_hints} /usr/local/cuda/lib64
               DOC "The NCCL library")
  unset(_tutti_nccl_hints)
  if(TUTTI_NCCL_INCLUDE_DIR AND TUTTI_NCCL_LIBRARY)
    add_library(tutti::nccl UNKNOWN IMPORTED GLOBAL)
    set_target_properties(tutti::nccl PROPERTIES
      IMPORTED_LOCATION "${TUTTI_NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${TUTTI_NCCL_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES tutti::cuda
      INTERFACE_COMPILE_DEFINITIONS TUTTI_HAS_NCCL=1)
  endif()
endif()

if(TARGET tutti::nccl)
  set(TUTTI_NCCL ON)
else()
  set(TUTTI_NCCL OFF)
endif()
if(NOT tutti_FIND_QUIETLY)
  message(STATUS "tutti: NCCL (tutti::nccl, nccl_ring): ${TUTTI_NCCL}")
endif()
