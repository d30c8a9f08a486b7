// SPDX-License-Identifier: Apache-2.0
/// @file plan/cost_model.hpp
/// @brief Alpha-beta models of ring, double-binary-tree and hierarchical allreduce on a
/// topology, the choice of the fastest (as NCCL's tuner chooses), and exposure after overlap.
///
/// The formulas follow NCCL's own tuning model (src/graph/tuning.cc, `ncclTopoTuneModel`):
/// a collective costs latency x steps plus bytes / bandwidth, the ring's bandwidth term is
/// 2(n-1)/n S/B, the tree's is 2 S/B (NCCL converts the tree's bus bandwidth to algorithm
/// bandwidth with the factor 0.5), and inter-node steps pay the network's latency. NCCL's
/// empirical corrections (protocol choice, per-channel caps, the tree's 0.9 and its size
/// correction table) are left out, so every figure here is a clean lower bound a measured
/// profile can be compared with. docs/ledger.md derives each formula.
#pragma once

#include <tutti/detail/number_format.hpp>
#include <tutti/error.hpp>
#include <tutti/plan/links.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace tutti {

/// An allreduce algorithm the cost model prices.
enum class allreduce_algorithm {
  none,          ///< one device: nothing to reduce
  ring,          ///< NCCL's ring: reduce-scatter then all-gather around all n devices
  tree,          ///< NCCL's double binary tree across nodes, a chain inside each node
  hierarchical,  ///< reduce-scatter in the node, allreduce of S/d across nodes, all-gather
};

/// The algorithm's name: "none", "ring", "tree" or "hierarchical".
inline const char* to_string(allreduce_algorithm a) noexcept {
  switch (a) {
    case allreduce_algorithm::ring:
      return "ring";
    case allreduce_algorithm::tree:
      return "tree";
    case allreduce_algorithm::hierarchical:
      return "hierarchical";
    case allreduce_algorithm::none:
      break;
  }
  return "none";
}

/// The predicted time of one allreduce, split into its latency and bandwidth terms.
struct allreduce_estimate {
  allreduce_algorithm algorithm = allreduce_algorithm::none;  ///< the algorithm priced
  double latency_s = 0;    ///< the alpha terms: steps x per-step latency
  double bandwidth_s = 0;  ///< the beta terms: bytes moved / bandwidth
  /// Total predicted seconds.
  double seconds() const noexcept { return latency_s + bandwidth_s; }
};

namespace detail::plan {

inline void check_bytes(double bytes, const char* fn) {
  TUTTI_EXPECTS(std::isfinite(bytes) && bytes >= 0, fn,
                "bytes = " + num(bytes) + "; expected a finite number >= 0");
}

// floor(log2(m)) for m >= 1: the depth of a balanced binary tree of m nodes (NCCL's log2i).
inline int tree_depth(int m) noexcept {
  int d = 0;
  while (m > 1) {
    m >>= 1;
    ++d;
  }
  return d;
}

// The bandwidth a device sees in a collective spanning the topology: its intra-node link, and
// once nodes are involved, its node's network ports (a ring or tree crosses each node boundary
// once per channel; NCCL runs one channel per port).
inline double spanning_bytes_per_s(const topology& t) noexcept {
  const double net = t.nics_per_node * t.inter.bytes_per_s();
  if (t.nodes() == 1) return t.intra.bytes_per_s();
  if (t.local_devices() == 1) return net;
  return std::min(t.intra.bytes_per_s(), net);
}

}  // namespace detail::plan

/// Ring allreduce of `bytes` over the topology: 2(n-1) steps, each moving S/n per device.
/// latency = (2(n-1) - 2(m-1)) alpha_intra + 2(m-1) alpha_inter for m nodes (NCCL's split of
/// the ring's steps into intra- and inter-node ones); bandwidth = 2(n-1)/n S / B, B the
/// slowest link the ring crosses. On one node: exactly 2(n-1) alpha + 2(n-1)/n S/B.
inline allreduce_estimate ring_allreduce(double bytes, const topology& t) {
  check_topology(t, "tutti::ring_allreduce");
  detail::plan::check_bytes(bytes, "tutti::ring_allreduce");
  const int n = t.devices;
  if (n == 1) return {allreduce_algorithm::none, 0, 0};
  const int m = t.nodes();
  const double steps = 2.0 * (n - 1);
  const double inter_steps = 2.0 * (m - 1);
  allreduce_estimate e{allreduce_algorithm::ring, 0, 0};
  e.latency_s = (steps - inter_steps) * t.intra.latency_s() + inter_steps * t.inter.latency_s();
  e.bandwidth_s = steps / n * bytes / detail::plan::spanning_bytes_per_s(t);
  return e;
}

/// Double-binary-tree allreduce (NCCL 2.4+): inside a node a chain of d devices, across m nodes
/// two complementary binary trees each carrying half the data, reduced up and broadcast down.
/// latency = 2((d-1) alpha_intra + floor(log2 m) alpha_inter); bandwidth = 2 S / B, since every
/// device sends and receives 2S in all (NCCL's tree algbw = busbw / 2). It loses to the ring on
/// bandwidth (2 vs 2(n-1)/n) and wins on latency once many nodes are involved.
inline allreduce_estimate tree_allreduce(double bytes, const topology& t) {
  check_topology(t, "tutti::tree_allreduce");
  detail::plan::check_bytes(bytes, "tutti::tree_allreduce");
  if (t.devices == 1) return {allreduce_algorithm::none, 0, 0};
  const int d = t.local_devices();
  const int m = t.nodes();
  allreduce_estimate e{allreduce_algorithm::tree, 0, 0};
  e.latency_s =
      2.0 * ((d - 1) * t.intra.latency_s() + detail::plan::tree_depth(m) * t.inter.latency_s());
  e.bandwidth_s = 2.0 * bytes / detail::plan::spanning_bytes_per_s(t);
  return e;
}

/// Hierarchical allreduce (Horovod's hierarchical mode, NCCL's CollNet idea without switch
/// offload): reduce-scatter over the d devices of a node, then d concurrent ring allreduces of
/// S/d across the m nodes sharing the node's ports, then all-gather in the node.
/// intra = 2(d-1) alpha_intra + 2(d-1)/d S / B_intra;
/// inter = 2(m-1) alpha_inter + 2(m-1)/m S / (nics B_inter).
/// With one node, or one device per node, it is the ring.
inline allreduce_estimate hierarchical_allreduce(double bytes, const topology& t) {
  check_topology(t, "tutti::hierarchical_allreduce");
  detail::plan::check_bytes(bytes, "tutti::hierarchical_allreduce");
  if (t.devices == 1) return {allreduce_algorithm::none, 0, 0};
  const int d = t.local_devices();
  const int m = t.nodes();
  allreduce_estimate e{allreduce_algorithm::hierarchical, 0, 0};
  e.latency_s = 2.0 * (d - 1) * t.intra.latency_s() + 2.0 * (m - 1) * t.inter.latency_s();
  e.bandwidth_s = 2.0 * (d - 1) / d * bytes / t.intra.bytes_per_s() +
                  2.0 * (m - 1) / m * bytes / (t.nics_per_node * t.inter.bytes_per_s());
  return e;
}

/// The fastest of ring, tree and (with several nodes of several devices) hierarchical for
/// `bytes` on `t`, as NCCL's tuner picks the algorithm of least predicted time per size. Ties
/// go to the ring, NCCL's default. One device: algorithm none, 0 s.
inline allreduce_estimate best_allreduce(double bytes, const topology& t) {
  const allreduce_estimate ring = ring_allreduce(bytes, t);
  if (t.devices == 1) return ring;
  allreduce_estimate best = ring;
  const allreduce_estimate tree = tree_allreduce(bytes, t);
  if (tree.seconds() < best.seconds()) best = tree;
  if (t.nodes() > 1 && t.local_devices() > 1) {
    const allreduce_estimate hier = hierarchical_allreduce(bytes, t);
    if (hier.seconds() < best.seconds()) best = hier;
  }
  return best;
}

/// Algorithm bandwidth in the nccl-tests convention: bytes / seconds (0 when seconds is 0).
inline double algbw_bytes_per_s(double bytes, double seconds) noexcept {
  return seconds > 0 ? bytes / seconds : 0.0;
}

/// Bus bandwidth of an allreduce in the nccl-tests convention: algbw x 2(n-1)/n, comparable
/// with the link's own bandwidth whatever n is.
inline double allreduce_busbw_bytes_per_s(double bytes, double seconds, int n) noexcept {
  return n > 1 ? algbw_bytes_per_s(bytes, seconds) * 2.0 * (n - 1) / n : 0.0;
}

/// The part of a reduce of `total_s` seconds the step waits for. A measured run says which
/// fraction of its reduce was exposed (`exposed_ratio` = exposed / total: 1 without overlap);
/// the same fraction is charged, but overlap cannot hide more than the `overlappable_s` seconds
/// of compute the reduce runs beside: exposed = max(total x ratio, total - overlappable).
inline double exposed_reduce_seconds(double total_s, double exposed_ratio, double overlappable_s) {
  TUTTI_EXPECTS(std::isfinite(exposed_ratio) && exposed_ratio >= 0 && exposed_ratio <= 1,
                "tutti::exposed_reduce_seconds",
                "exposed_ratio = " + detail::num(exposed_ratio) + "; expected 0 <= ratio <= 1");
  TUTTI_EXPECTS(total_s >= 0 && overlappable_s >= 0, "tutti::exposed_reduce_seconds",
                "total_s = " + detail::num(total_s) +
                    ", overlappable_s = " + detail::num(overlappable_s) + "; expected both >= 0");
  return std::max(total_s * exposed_ratio, total_s - overlappable_s);
}

}  // namespace tutti
