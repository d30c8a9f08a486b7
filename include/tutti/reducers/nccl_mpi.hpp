// SPDX-License-Identifier: Apache-2.0
/// @file reducers/nccl_mpi.hpp
/// @brief One process per GPU under `mpirun`: an `nccl_ring` bootstrapped over MPI.
///
/// Compiled only by nvcc, linked with NCCL and MPI.
#pragma once

#include <tutti/reducers/nccl_ring.hpp>

#include <mpi.h>

#include <string>

namespace tutti {

/// Rank 0 of `comm` creates an NCCL unique id and broadcasts it over MPI; collective on `comm`.
inline ncclUniqueId nccl_unique_id_from_mpi(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  ncclUniqueId id{};
  if (rank == 0) TUTTI_NCCL_CHECK(ncclGetUniqueId(&id));
  const int rc = MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
  if (rc != MPI_SUCCESS)
    throw error("tutti::nccl_unique_id_from_mpi(): MPI_Bcast of the NCCL unique id failed (code " +
                std::to_string(rc) + ")");
  return id;
}

/// The process's rank among the processes of `comm` on the same host; selects its GPU.
inline int mpi_local_rank(MPI_Comm comm) {
  MPI_Comm local;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int rank = 0;
  MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  return rank;
}

/// Selects this process's GPU (local rank modulo the visible devices) and joins an NCCL ring of
/// all processes of `comm`. Build the model on `ring.space()`. Collective on `comm`.
inline nccl_ring make_nccl_ring_mpi(MPI_Comm comm = MPI_COMM_WORLD, nccl_options options = {}) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const int devices = cuda_device_count();
  TUTTI_EXPECTS(devices > 0, "tutti::make_nccl_ring_mpi",
                "rank " + std::to_string(rank) + " sees no CUDA device; expected one per process");
  TUTTI_CUDA_CHECK(cudaSetDevice(mpi_local_rank(comm) % devices));
  detail::default_nccl_algo();  // before NCCL reads the environment
  const ncclUniqueId id = nccl_unique_id_from_mpi(comm);
  cudaStream_t stream;
  TUTTI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // The stream lives as long as the process: the ring and the model built on it may outlive
  // this call's caller's scope, and a stream costs nothing while idle.
  return nccl_ring(id, world, rank, cuda_space(stream), options);
}

}  // namespace tutti
