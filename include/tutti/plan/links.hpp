// SPDX-License-Identifier: Apache-2.0
/// @file plan/links.hpp
/// @brief Named interconnects (PCIe, NVLink, InfiniBand, Ethernet) with the bandwidth and latency
/// the cost model prices, and the topology of nodes x devices per node they join.
#pragma once

#include <tutti/detail/json.hpp>
#include <tutti/detail/number_format.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tutti {

/// An interconnect as an alpha-beta model sees it: the bandwidth one device can push in one
/// direction and the latency of one step of a collective.
struct link_profile {
  std::string name;       ///< "pcie4", "nvlink4", ... or a user's name ("custom", "measured")
  double gb_per_s = 0;    ///< per-direction bandwidth one device can push, GB/s (1e9 bytes/s)
  double latency_us = 0;  ///< alpha: latency of one step of a collective, microseconds
  std::string source;     ///< where the two figures come from

  /// Bandwidth in bytes per second.
  double bytes_per_s() const noexcept { return gb_per_s * 1e9; }
  /// Latency in seconds.
  double latency_s() const noexcept { return latency_us * 1e-6; }
};

/// The links tutti knows by name, with the source of every figure (tabled in docs/ledger.md).
///
/// Bandwidths are the vendors' per-direction signalling rates after line coding: what a device
/// could push at best, not what NCCL reaches (typically 70-90% of it; `tutti bench allreduce`
/// measures the real figure). Latencies are NCCL's own per-step estimates from its tuning model
/// (src/graph/tuning.cc, `hwLat`, low-latency protocol): 0.47 us per NVLink step, 1.0 us per
/// PCIe step, 2.7 us per network step. Ethernet has no such entry (NCCL reaches it through
/// kernel TCP sockets); its 10 us is an estimate of one kernel TCP hop, to be replaced by a
/// measured profile.
inline const std::vector<link_profile>& named_links() {
  static const std::vector<link_profile> links = {
      // PCI-SIG, PCI Express Base Specification 3.0: 8 GT/s per lane, 128b/130b coding, x16.
      {"pcie3", 15.75, 1.0, "PCI-SIG PCIe Base Spec 3.0: 8 GT/s x16, 128b/130b; NCCL hwLat PCI"},
      // PCI-SIG, PCI Express Base Specification 4.0: 16 GT/s per lane, 128b/130b coding, x16.
      {"pcie4", 31.5, 1.0, "PCI-SIG PCIe Base Spec 4.0: 16 GT/s x16, 128b/130b; NCCL hwLat PCI"},
      // PCI-SIG, PCI Express Base Specification 5.0: 32 GT/s per lane, 128b/130b coding, x16.
      {"pcie5", 63.0, 1.0, "PCI-SIG PCIe Base Spec 5.0: 32 GT/s x16, 128b/130b; NCCL hwLat PCI"},
      // NVIDIA A100 datasheet: NVLink 3, 600 GB/s per GPU both directions together (12 links).
      {"nvlink3", 300.0, 0.5,
       "NVIDIA A100 datasheet: 600 GB/s bidirectional per GPU (NVSwitch); NCCL hwLat NVLink"},
      // NVIDIA H100 datasheet: NVLink 4, 900 GB/s per GPU both directions together (18 links).
      {"nvlink4", 450.0, 0.5,
       "NVIDIA H100 SXM datasheet: 900 GB/s bidirectional per GPU (NVSwitch); NCCL hwLat NVLink"},
      // NVIDIA DGX B200 / HGX B200 datasheet: NVLink 5, 1.8 TB/s per GPU both directions.
      {"nvlink5", 900.0, 0.5,
       "NVIDIA HGX B200 datasheet: 1.8 TB/s bidirectional per GPU (NVLink 5); NCCL hwLat NVLink"},
      // InfiniBand Trade Association HDR: 200 Gb/s per 4x port (NVIDIA ConnectX-6).
      {"ib_hdr", 25.0, 2.7, "IBTA HDR 4x port, 200 Gb/s (NVIDIA ConnectX-6); NCCL hwLat NET"},
      // InfiniBand Trade Association NDR: 400 Gb/s per 4x port (NVIDIA ConnectX-7).
      {"ib_ndr", 50.0, 2.7, "IBTA NDR 4x port, 400 Gb/s (NVIDIA ConnectX-7); NCCL hwLat NET"},
      // IEEE 802.3by, 25GBASE: 25 Gb/s.
      {"eth25", 3.125, 10.0, "IEEE 802.3by 25 Gb/s; latency: estimate of one kernel TCP hop"},
      // IEEE 802.3bj / 802.3ba, 100GBASE: 100 Gb/s.
      {"eth100", 12.5, 10.0, "IEEE 802.3bj 100 Gb/s; latency: estimate of one kernel TCP hop"},
  };
  return links;
}

/// The names of `named_links()`, comma-separated (for messages and help texts).
inline std::string named_link_list() {
  std::string out;
  for (const auto& l : named_links()) out += (out.empty() ? "" : ", ") + l.name;
  return out;
}

/// A custom link of `gb_per_s` GB/s per direction and `latency_us` microseconds per step.
/// Throws `tutti::invalid_argument` unless gb_per_s > 0 and latency_us >= 0 (both finite).
inline link_profile custom_link(double gb_per_s, double latency_us, std::string name = "custom",
                                std::string source = "given by the user") {
  TUTTI_EXPECTS(std::isfinite(gb_per_s) && gb_per_s > 0, "tutti::custom_link",
                "bandwidth = " + detail::num(gb_per_s) + " GB/s; expected a positive number");
  TUTTI_EXPECTS(std::isfinite(latency_us) && latency_us >= 0, "tutti::custom_link",
                "latency = " + detail::num(latency_us) + " us; expected a number >= 0");
  return {std::move(name), gb_per_s, latency_us, std::move(source)};
}

/// The named link `name` (case-sensitive, as listed by `named_links()`). Throws
/// `tutti::invalid_argument` naming the known links when there is none of that name.
inline link_profile find_link(std::string_view name) {
  const auto& links = named_links();
  const auto it = std::find_if(links.begin(), links.end(),
                               [&](const link_profile& l) { return l.name == name; });
  TUTTI_EXPECTS(it != links.end(), "tutti::find_link",
                "unknown link '" + std::string(name) + "'; expected one of " + named_link_list() +
                    " (or a custom bandwidth and latency)");
  return *it;
}

/// A link profile as one JSON object {name, gb_per_s, latency_us, source}, the format
/// `tutti bench allreduce --save-link` writes and `tutti plan --link-file` reads.
inline detail::json link_profile_json(const link_profile& l) {
  return {{"name", l.name},
          {"gb_per_s", detail::report_number(l.gb_per_s)},
          {"latency_us", detail::report_number(l.latency_us)},
          {"source", l.source}};
}

/// N devices filled node by node: `devices_per_node` devices share a node over `intra`; nodes
/// talk over `inter`, through `nics_per_node` network ports each.
struct topology {
  int devices = 1;           ///< devices taking part
  int devices_per_node = 8;  ///< most devices one node holds
  link_profile intra;        ///< between the devices of one node
  link_profile inter;        ///< between nodes, one network port
  int nics_per_node = 1;     ///< network ports per node (rails); the node pushes nics x inter

  /// Nodes in use: ceil(devices / devices_per_node).
  int nodes() const noexcept { return (devices + devices_per_node - 1) / devices_per_node; }
  /// Devices on the fullest node: the ones a node-local collective waits for.
  int local_devices() const noexcept {
    const int n = nodes();
    return (devices + n - 1) / n;
  }
};

/// Throws `tutti::invalid_argument` unless `t` describes at least one device on valid links.
inline void check_topology(const topology& t, const char* fn) {
  TUTTI_EXPECTS(t.devices >= 1, fn,
                "devices = " + std::to_string(t.devices) + "; expected at least 1");
  TUTTI_EXPECTS(t.devices_per_node >= 1, fn,
                "devices_per_node = " + std::to_string(t.devices_per_node) + "; expected >= 1");
  TUTTI_EXPECTS(t.nics_per_node >= 1, fn,
                "nics_per_node = " + std::to_string(t.nics_per_node) + "; expected >= 1");
  for (const link_profile* l : {&t.intra, &t.inter}) {
    TUTTI_EXPECTS(std::isfinite(l->gb_per_s) && l->gb_per_s > 0, fn,
                  "link '" + l->name + "' has bandwidth " + detail::num(l->gb_per_s) +
                      " GB/s; expected a positive number");
    TUTTI_EXPECTS(std::isfinite(l->latency_us) && l->latency_us >= 0, fn,
                  "link '" + l->name + "' has latency " + detail::num(l->latency_us) +
                      " us; expected a number >= 0");
  }
}

}  // namespace tutti
