// SPDX-License-Identifier: Apache-2.0
/// @file reducers/mpi_shared_arena.hpp
/// @brief `tutti::mpi_allreduce`'s shared-memory gradient arena: the definitions of
/// `shared_gradient_arena` and of the in-place mean of a span inside it, declared (and documented)
/// in reducers/mpi.hpp.
///
/// reducers/mpi.hpp includes this file after the class, so programs include that header only.
#pragma once

#include <tutti/detail/host_simd.hpp>
#include <tutti/error.hpp>
#include <tutti/reducers/mpi.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

namespace tutti {

inline std::span<float> mpi_allreduce::shared_gradient_arena(std::size_t count) {
  static constexpr const char* name = "tutti::mpi_allreduce::shared_gradient_arena";
  TUTTI_EXPECTS(m_win == MPI_WIN_NULL, name,
                "this reducer already has a shared arena of " + std::to_string(m_arena_size) +
                    " values; expected one call per reducer (one trainer per reducer)");
  agree(name, op_code::shared_gradient_arena, sizeof(float), count, 0, 0,
        m_options.shared_arena ? 1 : 0);
  if (!m_options.shared_arena || count == 0) return {};
  MPI_Comm node = MPI_COMM_NULL;
  if (m_options.emulated_hosts > 0) {
    const int hosts = std::min(m_options.emulated_hosts, m_world);
    const int color = static_cast<int>(static_cast<long long>(m_rank) * hosts / m_world);
    TUTTI_MPI_CHECK(MPI_Comm_split(m_comm, color, m_rank, &node));
  } else {
    TUTTI_MPI_CHECK(
        MPI_Comm_split_type(m_comm, MPI_COMM_TYPE_SHARED, m_rank, MPI_INFO_NULL, &node));
  }
  int local = 0, local_size = 1;
  int code = MPI_Comm_rank(node, &local);
  if (code == MPI_SUCCESS) code = MPI_Comm_size(node, &local_size);
  // Every host must hold the same number of ranks, at least 2 (one rank per host has nothing
  // to share): the maximum and minus the minimum over all ranks.
  long long sizes[2] = {local_size, -static_cast<long long>(local_size)};
  MPI_Request req = MPI_REQUEST_NULL;
  if (code == MPI_SUCCESS)
    code = MPI_Iallreduce(MPI_IN_PLACE, sizes, 2, MPI_LONG_LONG, MPI_MAX, m_comm, &req);
  if (code != MPI_SUCCESS) {
    MPI_Comm_free(&node);
    detail::throw_mpi(code, "MPI_Comm_rank / MPI_Comm_size / MPI_Iallreduce (host sizes)", __FILE__,
                      __LINE__);
  }
  try {
    complete(req, "shared_gradient_arena");
  } catch (...) {
    MPI_Comm_free(&node);
    throw;
  }
  if (sizes[0] != -sizes[1] || local_size < 2) {
    MPI_Comm_free(&node);
    return {};
  }
  m_local = local;
  m_hosts = m_world / local_size;
  if (m_hosts > 1) {
    // The ranks of the same local number on every host: they sum each host's chunk.
    code = MPI_Comm_split(m_comm, m_local, m_rank, &m_cross);
    if (code == MPI_SUCCESS) code = MPI_Comm_set_errhandler(m_cross, MPI_ERRORS_RETURN);
    if (code != MPI_SUCCESS) {
      MPI_Comm_free(&node);
      if (m_cross != MPI_COMM_NULL) MPI_Comm_free(&m_cross);
      detail::throw_mpi(code, "MPI_Comm_split (ranks of one local number)", __FILE__, __LINE__);
    }
  }
  m_node = node;
  TUTTI_MPI_CHECK(MPI_Comm_set_errhandler(m_node, MPI_ERRORS_RETURN));
  // Each rank's arena in its own pages (first touched by its owner), not one block.
  MPI_Info info = MPI_INFO_NULL;
  TUTTI_MPI_CHECK(MPI_Info_create(&info));
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  float* mine = nullptr;
  const int made =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(count * sizeof(float)),
                              static_cast<int>(sizeof(float)), info, m_node, &mine, &m_win);
  MPI_Info_free(&info);
  TUTTI_MPI_CHECK(made);
  try {
    TUTTI_MPI_CHECK(MPI_Win_set_errhandler(m_win, MPI_ERRORS_RETURN));
    m_arenas.assign(static_cast<std::size_t>(local_size), nullptr);
    for (int k = 0; k < local_size; ++k) {
      MPI_Aint bytes = 0;
      int unit = 0;
      void* base = nullptr;
      TUTTI_MPI_CHECK(MPI_Win_shared_query(m_win, k, &bytes, &unit, &base));
      // Open MPI reports the size rounded up to whole pages.
      TUTTI_EXPECTS(static_cast<std::size_t>(bytes) >= count * sizeof(float), name,
                    "local rank " + std::to_string(k) + "'s arena has " + std::to_string(bytes) +
                        " bytes; expected at least " + std::to_string(count * sizeof(float)));
      m_arenas[static_cast<std::size_t>(k)] = static_cast<float*>(base);
    }
    // One passive-target epoch for the window's life, so MPI_Win_sync may order the loads
    // and stores around each collective (MPI's unified memory model).
    TUTTI_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, m_win));
  } catch (...) {
    MPI_Win_free(&m_win);
    m_win = MPI_WIN_NULL;
    m_arenas.clear();
    throw;
  }
  m_arena_size = count;
  std::memset(mine, 0, count * sizeof(float));
  return {mine, count};
}

inline std::optional<std::size_t> mpi_allreduce::arena_offset(std::span<const float> grads) const {
  if (m_arenas.empty() || grads.empty()) return std::nullopt;
  const float* base = m_arenas[static_cast<std::size_t>(m_local)];
  // Compared as integers: pointers into different objects have no order in C++.
  const auto p = reinterpret_cast<std::uintptr_t>(grads.data());
  const auto b = reinterpret_cast<std::uintptr_t>(base);
  if (p < b || p >= b + m_arena_size * sizeof(float)) return std::nullopt;
  const std::size_t offset = (p - b) / sizeof(float);
  TUTTI_EXPECTS(grads.size() <= m_arena_size - offset, "tutti::mpi_allreduce::all_reduce_mean",
                "the span starts inside the shared arena at " + std::to_string(offset) +
                    " but runs past its end (" + std::to_string(m_arena_size) +
                    " values); expected a span inside the arena or outside it");
  return offset;
}

inline void mpi_allreduce::shared_mean(std::span<float> grads, std::size_t offset) {
  static constexpr const char* name = "tutti::mpi_allreduce::all_reduce_mean";
  // Publish this rank's stores before the collective that tells the others they may read.
  TUTTI_MPI_CHECK(MPI_Win_sync(m_win));
  agree(name, op_code::all_reduce_mean, sizeof(float), grads.size(), 0, 0, offset);
  TUTTI_MPI_CHECK(MPI_Win_sync(m_win));
  const std::size_t local = m_arenas.size();  // ranks on this host
  const std::size_t l = static_cast<std::size_t>(m_local);
  const std::size_t n = grads.size();
  const float divisor = static_cast<float>(m_world);
  const std::size_t b = n * l / local, e = n * (l + 1) / local;
  // In blocks that stay in the cache. Only this rank touches chunk l, in every arena of the
  // host: it sums the chunk over the host's arenas in local-rank order; with one host that is
  // the total, divided and copied into every arena; with several the host's sum goes into this
  // rank's arena, MPI sums it with the same chunk of the other hosts in place, and the total is
  // divided and copied out.
  constexpr std::size_t block = 2048;
  float acc[block];
  const auto host_sum = [&](std::size_t lo, std::size_t m) {
    std::memcpy(acc, m_arenas[0] + offset + lo, m * sizeof(float));
    for (std::size_t k = 1; k < local; ++k) detail::add_into(acc, m_arenas[k] + offset + lo, m);
  };
  const auto mean_out = [&](std::size_t lo, std::size_t m) {
    if (m_world > 1) detail::divide_by(acc, divisor, m);
    for (std::size_t k = 0; k < local; ++k)
      std::memcpy(m_arenas[k] + offset + lo, acc, m * sizeof(float));
  };
  if (m_hosts == 1) {
    for (std::size_t lo = b; lo < e; lo += block) {
      const std::size_t m = std::min(block, e - lo);
      host_sum(lo, m);
      mean_out(lo, m);
    }
  } else {
    float* chunk = m_arenas[l] + offset;
    for (std::size_t lo = b; lo < e; lo += block) {
      const std::size_t m = std::min(block, e - lo);
      host_sum(lo, m);
      std::memcpy(chunk + lo, acc, m * sizeof(float));
    }
    reduce_pieces(chunk + b, e - b, MPI_FLOAT, MPI_SUM, "all_reduce_mean", m_cross);
    for (std::size_t lo = b; lo < e; lo += block) {
      const std::size_t m = std::min(block, e - lo);
      std::memcpy(acc, chunk + lo, m * sizeof(float));
      mean_out(lo, m);
    }
  }
  TUTTI_MPI_CHECK(MPI_Win_sync(m_win));
  // No rank of the host may read its arena as finished, or write the next step's gradients
  // into it, before every rank of the host has written its chunk.
  MPI_Request req = MPI_REQUEST_NULL;
  TUTTI_MPI_CHECK(MPI_Ibarrier(m_node, &req));
  complete(req, "all_reduce_mean");
  TUTTI_MPI_CHECK(MPI_Win_sync(m_win));
  m_bytes += grads.size_bytes();
}

}  // namespace tutti
