# SPDX-License-Identifier: Apache-2.0
# The CUDA toolkit's libraries, for code that nvcc compiles with tutti's CUDA space
# (include/tutti/space/cuda.hpp; neural_cf's dense layers through cuBLAS). Finding the toolkit
# does not enable the CUDA language: a consumer does that itself (`enable_language(CUDA)` or
# `project(... LANGUAGES CXX CUDA)`) and compiles its `.cu` files with nvcc.
#
# Defines the imported target tutti::cuda (CUDA::cudart and CUDA::cublas; for nvcc translation
# units `-std=c++20`, which CMake 3.25 does not yet ask nvcc 13 for) and TUTTI_CUDA_TOOLKIT
# (ON/OFF). tutti::tutti itself does not depend on it.
include_guard(GLOBAL)

if(NOT TARGET tutti::cuda)
  # The toolkit's folders stay visible: tutti-nccl.cmake searches them.
  block(SCOPE_FOR VARIABLES PROPAGATE CUDAToolkit_INCLUDE_DIRS CUDAToolkit_LIBRARY_DIR)
    set(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL ON)
    if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT}
       AND EXISTS /usr/local/cuda/bin/nvcc)
      set(CUDAToolkit_ROOT /usr/local/cuda)
    endif()
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cudart AND TARGET CUDA::cublas)
      add_library(tutti::cuda INTERFACE IMPORTED GLOBAL)
      set_target_properties(tutti::cuda PROPERTIES
        INTERFACE_LINK_LIBRARIES "CUDA::cudart;CUDA::cublas"
        INTERFACE_COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>")
    endif()
  endblock()
endif()

if(TARGET tutti::cuda)
  set(TUTTI_CUDA_TOOLKIT ON)
else()
  set(TUTTI_CUDA_TOOLKIT OFF)
endif()
if(NOT tutti_FIND_QUIETLY)
  message(STATUS "tutti: CUDA toolkit (tutti::cuda, the CUDA space): ${TUTTI_CUDA_TOOLKIT}")
endif()
