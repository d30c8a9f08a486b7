# SPDX-License-Identifier: Apache-2.0
# MPI, for `tutti::mpi_allreduce` (include/tutti/reducers/mpi.hpp: one rank per process under
# mpirun) and for NCCL's unique id over MPI (reducers/nccl_mpi.hpp). Only MPI's C interface is
# used. Optional: configure with -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON to leave it out.
#
# Defines the imported target tutti::mpi (MPI::MPI_CXX, and TUTTI_HAS_MPI=1 for the consumer's
# own `#if`s) and TUTTI_MPI (ON/OFF). tutti::tutti itself does not depend on it.
include_guard(GLOBAL)

if(NOT TARGET tutti::mpi)
  block(SCOPE_FOR VARIABLES)
    set(MPI_CXX_SKIP_MPICXX ON)
    # The targets must be seen from every directory: a FetchContent consumer links tutti::mpi
    # outside the folder that found MPI.
    set(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL ON)
    find_package(MPI QUIET COMPONENTS CXX)
    if(MPI_CXX_FOUND)
      add_library(tutti::mpi INTERFACE IMPORTED GLOBAL)
      set_target_properties(tutti::mpi PROPERTIES
        INTERFACE_LINK_LIBRARIES MPI::MPI_CXX
        INTERFACE_COMPILE_DEFINITIONS TUTTI_HAS_MPI=1)
    endif()
  endblock()
endif()

if(TARGET tutti::mpi)
  set(TUTTI_MPI ON)
else()
  set(TUTTI_MPI OFF)
endif()
if(NOT tutti_FIND_QUIETLY)
  message(STATUS "tutti: MPI (tutti::mpi, mpi_allreduce under mpirun): ${TUTTI_MPI}")
endif()
