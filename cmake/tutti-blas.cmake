# SPDX-License-Identifier: Apache-2.0
# A CBLAS, for the dense layers of neural_cf on the host (include/tutti/models/neural_cf.hpp and
# models/detail/blas.hpp): OpenBLAS from Debian's libopenblas-dev, found through pkg-config, or
# any library providing cblas_sgemm next to a cblas.h. Optional: without it neural_cf's tests
# compile to nothing (they test for <cblas.h> with __has_include). On the CUDA space neural_cf
# uses cuBLAS instead (CUDA::cublas, linked where the CUDA targets are built).
#
# Defines the imported target tutti::blas (link it wherever neural_cf.hpp is included) and
# TUTTI_BLAS (ON/OFF). tutti::tutti itself does not depend on it.
include_guard(GLOBAL)

if(NOT TARGET tutti::blas)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(OPENBLAS QUIET IMPORTED_TARGET GLOBAL openblas)
  endif()
  if(TARGET PkgConfig::OPENBLAS)
    add_library(tutti::blas INTERFACE IMPORTED GLOBAL)
    set_target_properties(tutti::blas PROPERTIES INTERFACE_LINK_LIBRARIES PkgConfig::OPENBLAS)
  else()
    # Without pkg-config, a plain search. The sources test for <cblas.h> with __has_include, so
    # wherever the header is found a library that really defines the CBLAS symbols must be
    # linked too (a reference libblas may or may not carry them): check that it links.
    find_path(TUTTI_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
    find_library(TUTTI_CBLAS_LIBRARY NAMES openblas cblas blas)
    if(TUTTI_CBLAS_INCLUDE_DIR AND TUTTI_CBLAS_LIBRARY)
      include(CheckCXXSymbolExists)
      include(CMakePushCheckState)
      cmake_push_check_state(RESET)
      set(CMAKE_REQUIRED_QUIET ON)
      set(CMAKE_REQUIRED_INCLUDES "${TUTTI_CBLAS_INCLUDE_DIR}")
      set(CMAKE_REQUIRED_LIBRARIES "${TUTTI_CBLAS_LIBRARY}")
      check_cxx_symbol_exists(cblas_dgemm cblas.h TUTTI_CBLAS_LINKS)
      cmake_pop_check_state()
      if(TUTTI_CBLAS_LINKS)
        add_library(tutti::blas UNKNOWN IMPORTED GLOBAL)
        set_target_properties(tutti::blas PROPERTIES
          IMPORTED_LOCATION "${TUTTI_CBLAS_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES "${TUTTI_CBLAS_INCLUDE_DIR}")
      endif()
    endif()
  endif()
endif()

if(TARGET tutti::blas)
  set(TUTTI_BLAS ON)
else()
  set(TUTTI_BLAS OFF)
endif()
if(NOT tutti_FIND_QUIETLY)
  message(STATUS "tutti: CBLAS (tutti::blas, neural_cf on the host): ${TUTTI_BLAS}")
endif()
