// SPDX-License-Identifier: Apache-2.0
/// @file test_ledger.cpp
/// @brief The cost ledger: links, the alpha-beta allreduce models, the projection and its knee,
/// the planner's verdicts and JSON, the report's series, and the allreduce benchmark's fit.
#include <doctest/doctest.h>

#include "scratch_dir.hpp"

#include <tutti/bench/allreduce.hpp>
#include <tutti/launch.hpp>
#include <tutti/plan/cost_model.hpp>
#include <tutti/plan/links.hpp>
#include <tutti/plan/plan_format.hpp>
#include <tutti/plan/planner.hpp>
#include <tutti/plan/projection.hpp>
#include <tutti/plan/report.hpp>
#include <tutti/reducers/local_ring.hpp>
#include <tutti/reducers/single_rank.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace test_ledger {

namespace {

tutti::topology one_node(int n, const char* link) {
  return {.devices = n,
          .devices_per_node = n,
          .intra = tutti::find_link(link),
          .inter = tutti::find_link(link),
          .nics_per_node = 1};
}

// A link so fast that only the other one matters.
tutti::link_profile free_link() {
  return tutti::custom_link(1e9, 0.0, "free");
}

// Series name -> [(x, y)] from every element carrying data-series and data-points.
std::map<std::string, std::vector<std::pair<double, double>>> parse_series(
    const std::string& html) {
  std::map<std::string, std::vector<std::pair<double, double>>> out;
  const std::regex attr("data-series=\"([^\"]+)\" data-points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), attr); it != std::sregex_iterator();
       ++it) {
    auto& pts = out[(*it)[1].str()];
    std::stringstream ss((*it)[2].str());
    std::string pair;
    while (std::getline(ss, pair, ',')) {
      const auto colon = pair.find(':');
      pts.emplace_back(std::stod(pair.substr(0, colon)), std::stod(pair.substr(colon + 1)));
    }
  }
  return out;
}

// One device, 1 s of compute per step for 100 samples, 1 GB of gradients, 8 devices a node on a
// free intra-node link, and nodes joined by a link that moves the gradient bytes in
// `inter_seconds_per_gradient` seconds.
tutti::projection knee_case(double inter_seconds_per_gradient, double fraction) {
  const double bytes = 1e9;
  tutti::measured_step m{.compute_s = 1.0,
                         .bytes_reduced = bytes,
                         .global_batch = 100,
                         .samples_per_epoch = 1e6,
                         .world_size = 1};
  return tutti::project(m,
                        {.max_devices = 1024,
                         .devices_per_node = 8,
                         .intra = free_link(),
                         .inter = tutti::custom_link(bytes / inter_seconds_per_gradient / 1e9, 0.0),
                         .knee_fraction = fraction});
}

std::vector<std::string> binding_names(const tutti::plan_result& p) {
  std::vector<std::string> out;
  for (const auto& b : p.binding) out.push_back(b.name);
  return out;
}

std::vector<std::string> caution_names(const tutti::plan_result& p) {
  std::vector<std::string> out;
  for (const auto& c : p.cautions) out.push_back(c.name);
  return out;
}

tutti::plan_inputs plan_for(double params, const char* optimizer, double device_memory) {
  tutti::plan_inputs in;
  in.params = params;
  in.bytes_per_param = 4;
  in.optimizer = optimizer;
  in.activation_bytes = 0.5e9;
  in.device_memory_bytes = device_memory;
  in.epochs = 2;
  in.step = {.compute_s = 0.2,
             .bytes_reduced = params * 4,
             .global_batch = 512,
             .samples_per_epoch = 10e6,
             .world_size = 1};
  in.projection.max_devices = 64;
  in.projection.intra = tutti::find_link("pcie4");
  in.projection.inter = tutti::find_link("ib_hdr");
  in.projection.price_per_device_hour = 2.5;
  return in;
}

}  // namespace

TEST_CASE("links: named figures, lookup errors name the known links, custom links") {
  CHECK(tutti::named_links().size() == 10);
  CHECK(tutti::find_link("pcie4").gb_per_s == doctest::Approx(31.5));
  CHECK(tutti::find_link("pcie3").gb_per_s == doctest::Approx(15.75));
  CHECK(tutti::find_link("nvlink4").gb_per_s == doctest::Approx(450));
  CHECK(tutti::find_link("ib_ndr").gb_per_s == doctest::Approx(50));
  CHECK(tutti::find_link("eth25").gb_per_s == doctest::Approx(3.125));
  for (const auto& l : tutti::named_links()) {
    CHECK(l.gb_per_s > 0);
    CHECK(l.latency_us > 0);
    CHECK(!l.source.empty());
  }
  try {
    (void)tutti::find_link("pcie6");
    FAIL("an unknown link was accepted");
  } catch (const tutti::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("pcie6") != std::string::npos);
    for (const char* name : {"pcie3", "nvlink5", "ib_hdr", "eth100"})
      CHECK(what.find(name) != std::string::npos);
  }
  const auto c = tutti::custom_link(12.5, 3.0);
  CHECK(c.bytes_per_s() == doctest::Approx(12.5e9));
  CHECK(c.latency_s() == doctest::Approx(3e-6));
  CHECK_THROWS_AS(tutti::custom_link(0, 1), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::custom_link(1, -1), tutti::invalid_argument);
  const nlohmann::json j = tutti::link_profile_json(tutti::find_link("nvlink3"));
  CHECK(j["name"] == "nvlink3");
  CHECK(j["gb_per_s"].get<double>() == doctest::Approx(300));
  CHECK(j["latency_us"].get<double>() == doctest::Approx(0.5));
}

TEST_CASE(
    "cost model: ring allreduce of 100 MB over 8 PCIe Gen4 devices is 2(n-1)/n S/B + 2(n-1) "
    "alpha") {
  const double S = 100e6, B = 31.5e9, alpha = 1.0e-6;
  const int n = 8;
  const auto t = one_node(n, "pcie4");
  const tutti::allreduce_estimate ring = tutti::ring_allreduce(S, t);
  CHECK(ring.algorithm == tutti::allreduce_algorithm::ring);
  CHECK(ring.bandwidth_s == doctest::Approx(2.0 * (n - 1) / n * S / B).epsilon(1e-12));
  CHECK(ring.latency_s == doctest::Approx(2.0 * (n - 1) * alpha).epsilon(1e-12));
  CHECK(ring.seconds() ==
        doctest::Approx(2.0 * (n - 1) / n * S / B + 2.0 * (n - 1) * alpha).epsilon(1e-12));
  // On one node the ring is the fastest at this size (the tree pays 2 S/B).
  const tutti::allreduce_estimate best = tutti::best_allreduce(S, t);
  CHECK(best.algorithm == tutti::allreduce_algorithm::ring);
  CHECK(best.seconds() == ring.seconds());
  // One device reduces nothing.
  CHECK(tutti::best_allreduce(S, one_node(1, "pcie4")).seconds() == 0.0);
  CHECK(tutti::best_allreduce(S, one_node(1, "pcie4")).algorithm ==
        tutti::allreduce_algorithm::none);
  CHECK_THROWS_AS(tutti::ring_allreduce(-1.0, t), tutti::invalid_argument);
  // nccl-tests' busbw of the predicted time is the link bandwidth, up to the latency term.
  CHECK(tutti::allreduce_busbw_bytes_per_s(S, ring.bandwidth_s, n) == doctest::Approx(B));
}

TEST_CASE("cost model: the tree wins tiny messages at large n, the ring large ones") {
  const tutti::topology t{.devices = 1024,
                          .devices_per_node = 8,
                          .intra = tutti::find_link("nvlink4"),
                          .inter = tutti::find_link("ib_ndr"),
                          .nics_per_node = 8};
  CHECK(t.nodes() == 128);
  const auto ring_small = tutti::ring_allreduce(1024, t);
  const auto tree_small = tutti::tree_allreduce(1024, t);
  CHECK(tree_small.seconds() < ring_small.seconds() / 10);
  // Tree latency: 2((d-1) alpha_intra + log2(m) alpha_inter), NCCL's formula.
  CHECK(tree_small.latency_s == doctest::Approx(2.0 * (7 * 0.5e-6 + 7 * 2.7e-6)));
  // Ring latency: (2(n-1) - 2(m-1)) alpha_intra + 2(m-1) alpha_inter.
  CHECK(ring_small.latency_s == doctest::Approx((2046 - 254) * 0.5e-6 + 254 * 2.7e-6));
  CHECK(tutti::best_allreduce(1024, t).algorithm == tutti::allreduce_algorithm::tree);
  // At 1024 devices the ring's 2(n-1) latency (1.6 ms) outweighs its bandwidth edge even at
  // 4 GB; on 2 nodes its bandwidth term (2(n-1)/n against the tree's 2) wins large messages.
  CHECK(tutti::best_allreduce(4e9, t).algorithm == tutti::allreduce_algorithm::tree);
  tutti::topology two = t;
  two.devices = 16;
  CHECK(tutti::ring_allreduce(1e9, two).seconds() < tutti::tree_allreduce(1e9, two).seconds());
  CHECK(tutti::best_allreduce(1e9, two).algorithm == tutti::allreduce_algorithm::ring);
  CHECK(tutti::best_allreduce(1024, two).algorithm == tutti::allreduce_algorithm::tree);
  // On one node NCCL's tree is a chain: never better than the ring.
  for (const double s : {64.0, 1e6, 1e9})
    CHECK(tutti::best_allreduce(s, one_node(8, "nvlink4")).algorithm ==
          tutti::allreduce_algorithm::ring);
}

TEST_CASE("cost model: hierarchical beats the flat ring across slow inter-node links") {
  const tutti::topology t{.devices = 32,
                          .devices_per_node = 8,
                          .intra = tutti::find_link("nvlink3"),
                          .inter = tutti::find_link("eth25"),
                          .nics_per_node = 1};
  const double S = 1e9;
  const auto ring = tutti::ring_allreduce(S, t);
  const auto hier = tutti::hierarchical_allreduce(S, t);
  // Ring: every step waits for the network, 2(n-1)/n S / B_inter.
  CHECK(ring.bandwidth_s == doctest::Approx(2.0 * 31 / 32 * S / 3.125e9));
  // Hierarchical: 2(d-1)/d S / B_intra + 2(m-1)/m S / B_inter.
  CHECK(hier.bandwidth_s == doctest::Approx(2.0 * 7 / 8 * S / 300e9 + 2.0 * 3 / 4 * S / 3.125e9));
  CHECK(hier.seconds() < ring.seconds());
  CHECK(tutti::best_allreduce(S, t).algorithm == tutti::allreduce_algorithm::hierarchical);
  // With one node, or one device per node, hierarchical is the ring.
  for (const auto& u : {one_node(8, "pcie4"), tutti::topology{.devices = 16,
                                              .devices_per_node = 1,
                                              .intra = tutti::find_link("pcie4"),
                                              .inter = tutti::find_link("ib_hdr")}})
    CHECK(tutti::hierarchical_allreduce(S, u).seconds() ==
          doctest::Approx(tutti::ring_allreduce(S, u).seconds()));
}

TEST_CASE("cost model: exposure after overlap") {
  CHECK(tutti::exposed_reduce_seconds(1.0, 1.0, 10.0) == 1.0);
  CHECK(tutti::exposed_reduce_seconds(1.0, 0.25, 10.0) == doctest::Approx(0.25));
  // Overlap cannot hide more than the compute beside it.
  CHECK(tutti::exposed_reduce_seconds(1.0, 0.0, 0.3) == doctest::Approx(0.7));
  CHECK_THROWS_AS(tutti::exposed_reduce_seconds(1.0, 1.5, 0.0), tutti::invalid_argument);
}

TEST_CASE("projection: speedup(1) = 1, efficiency <= 1, rows, money and marginal cost") {
  const tutti::measured_step m{.data_s = 0.01,
                               .compute_s = 0.1,
                               .optimizer_s = 0.02,
                               .bytes_reduced = 400e6,
                               .global_batch = 4096,
                               .samples_per_epoch = 1e7,
                               .world_size = 1};
  for (const auto mode : {tutti::scaling_mode::weak, tutti::scaling_mode::strong}) {
    CAPTURE(tutti::to_string(mode));
    const auto p = tutti::project(m, {.devices_per_node = 8,
                                      .intra = tutti::find_link("pcie4"),
                                      .inter = tutti::find_link("ib_hdr"),
                                      .scaling = mode,
                                      .price_per_device_hour = 3.0});
    REQUIRE(p.rows.size() == 11);  // 1, 2, ..., 1024
    CHECK(p.rows.front().devices == 1);
    CHECK(p.rows.back().devices == 1024);
    CHECK(p.rows.front().speedup == 1.0);
    CHECK(p.rows.front().efficiency == 1.0);
    CHECK(p.rows.front().reduce_total_s == 0.0);
    CHECK(p.exposed_ratio == 1.0);  // a 1-rank run: no measured overlap
    double prev_sps = 0;
    int prev_n = 0;
    for (const auto& r : p.rows) {
      CAPTURE(r.devices);
      CHECK(r.efficiency <= 1.0 + 1e-12);
      CHECK(r.speedup == doctest::Approx(r.samples_per_s / p.rows.front().samples_per_s));
      CHECK(r.step_s ==
            doctest::Approx(r.data_s + r.compute_s + r.optimizer_s + r.reduce_exposed_s));
      CHECK(r.samples_per_s == doctest::Approx(r.global_batch / r.step_s));
      CHECK(r.steps_per_epoch == std::ceil(1e7 / r.global_batch));
      CHECK(r.cost_per_epoch ==
            doctest::Approx(3.0 * r.devices * r.steps_per_epoch * r.step_s / 3600.0));
      CHECK(r.optimizer_s == doctest::Approx(0.02));
      CHECK(r.global_batch ==
            doctest::Approx(mode == tutti::scaling_mode::weak ? 4096.0 * r.devices : 4096.0));
      if (r.samples_per_s > prev_sps)
        CHECK(r.marginal_cost ==
              doctest::Approx(3.0 * (r.devices - prev_n) / (r.samples_per_s - prev_sps)));
      prev_sps = r.samples_per_s;
      prev_n = r.devices;
    }
  }
  // The 8-device row uses the ring over PCIe Gen4 on one node.
  const auto p = tutti::project(m, {.intra = tutti::find_link("pcie4")});
  CHECK(p.row(8)->reduce_total_s ==
        doctest::Approx(tutti::ring_allreduce(400e6, one_node(8, "pcie4")).seconds()));
  CHECK(p.row(8)->nodes == 1);
  CHECK(p.row(16)->nodes == 2);
  CHECK(p.row(3) == nullptr);
}

TEST_CASE("projection: strong scaling is Amdahl's law and stops at one sample per device") {
  const tutti::measured_step m{.compute_s = 1.0,
                               .optimizer_s = 0.1,
                               .global_batch = 1000,
                               .samples_per_epoch = 1e6,
                               .world_size = 1};
  const auto p = tutti::project(
      m, {.intra = free_link(), .inter = free_link(), .scaling = tutti::scaling_mode::strong});
  CHECK(p.truncated);
  CHECK(p.rows.back().devices == 512);
  for (const auto& r : p.rows) CHECK(r.speedup == doctest::Approx(1.1 / (1.0 / r.devices + 0.1)));
}

TEST_CASE("projection: overlap is taken from the measured exposed / total reduce") {
  const tutti::measured_step m{.compute_s = 1.0,
                               .reduce_total_s = 0.4,
                               .reduce_exposed_s = 0.1,
                               .bytes_reduced = 1e9,
                               .global_batch = 200,
                               .samples_per_epoch = 1e6,
                               .world_size = 2};
  const auto p = tutti::project(m, {.max_devices = 8, .intra = free_link(), .inter = free_link()});
  CHECK(p.exposed_ratio == doctest::Approx(0.25));
  for (const auto& r : p.rows)
    CHECK(r.reduce_exposed_s == doctest::Approx(0.25 * r.reduce_total_s));
  const auto q = tutti::project(m, {.max_devices = 8, .exposed_ratio = 1.0});
  CHECK(q.row(8)->reduce_exposed_s == doctest::Approx(q.row(8)->reduce_total_s));
  // The per-device batch of a 2-rank run is half its global batch.
  CHECK(p.row(1)->per_device_batch == 100);
  tutti::measured_step bad = m;
  bad.reduce_exposed_s = 0.5;
  CHECK_THROWS_AS(tutti::project(bad), tutti::invalid_argument);
  bad = m;
  bad.compute_s = 0;
  CHECK_THROWS_AS(tutti::project(bad), tutti::invalid_argument);
}

TEST_CASE("projection: the knee is where a doubling crosses a slow inter-node link") {
  // Up to 8 devices the reduce is free: each device adds a full device's throughput. At 16 the
  // gradient crosses the network: hierarchical, 2(m-1)/m x 1 s = 1 s per step, so 16 devices do
  // what 8 did: the added devices bring nothing.
  const auto p = knee_case(1.0, 0.5);
  CHECK(p.row(8)->speedup == doctest::Approx(8.0));
  CHECK(p.row(16)->algorithm == tutti::allreduce_algorithm::hierarchical);
  CHECK(p.row(16)->reduce_total_s == doctest::Approx(1.0));
  CHECK(p.row(16)->samples_per_s == doctest::Approx(800.0));
  REQUIRE(p.knee.has_value());
  CHECK(*p.knee == 16);
  CHECK(p.last_worthwhile == 8);
  CHECK(p.row(16)->gain_per_added_device == doctest::Approx(0.0));
  CHECK(p.row(16)->marginal_cost > 1e6 * p.row(8)->marginal_cost);
  // Half the cost: 16 devices bring (1066.7 - 800) / 8 = 33 samples/s each, under 50% of 100.
  const auto q = knee_case(0.5, 0.5);
  CHECK(q.row(16)->gain_per_added_device == doctest::Approx((1600.0 / 1.5 - 800.0) / 8));
  REQUIRE(q.knee.has_value());
  CHECK(*q.knee == 16);
  // ... but over 30%, and every later doubling brings about 50 each: no knee at 30%.
  const auto r = knee_case(0.5, 0.3);
  CHECK(!r.knee.has_value());
  CHECK(r.last_worthwhile == 1024);
  const std::string table = tutti::format_projection_table(p);
  CHECK(table.find("knee: N = 16") != std::string::npos);
  CHECK(table.find("hierarchical") != std::string::npos);
}

TEST_CASE("planner: a model that fits, one that does not, and the deadline") {
  // 25 M parameters = 100 MB, sgd: fits a 16 GB device.
  auto in = plan_for(25e6, "sgd", 16e9);
  in.deadline_s = 3600.0;
  const auto fits = tutti::make_plan(in);
  CHECK(fits.fits);
  CHECK(fits.memory_bytes == doctest::Approx(100e6 + 100e6 + 0 + 0.5e9));
  // One device: 512 / 0.2 s = 2560 samples/s; 2 x 10 M samples take 7812.5 s > 1 h.
  CHECK(fits.one_device_samples_per_s == doctest::Approx(2560));
  CHECK(fits.needs_more_than_one);
  CHECK(fits.verdict == tutti::plan_verdict::data_parallel);
  REQUIRE(fits.deadline_met_at.has_value());
  CHECK(fits.devices == *fits.deadline_met_at);
  CHECK(fits.devices == 4);
  const auto* row = fits.proj.row(fits.devices);
  CHECK(2 * row->epoch_s <= 3600.0);
  CHECK(2 * fits.proj.row(2)->epoch_s > 3600.0);
  // The 8-device row's reduce is the ring of 100 MB over 8 PCIe Gen4 devices.
  CHECK(fits.proj.row(8)->reduce_total_s ==
        doctest::Approx(2.0 * 7 / 8 * 100e6 / 31.5e9 + 14 * 1e-6).epsilon(1e-12));
  CHECK(!fits.reasons.empty());

  // A generous deadline: one device.
  in.deadline_s = 86400.0;
  const auto one = tutti::make_plan(in);
  CHECK(one.verdict == tutti::plan_verdict::one_device);
  CHECK(one.devices == 1);
  CHECK(!one.proj.rows.empty());

  // 8 GB of parameters with adam on a 16 GB device: 8 + 8 + 16 GB > 16 GB.
  const auto big = tutti::make_plan(plan_for(2e9, "adam", 16e9));
  CHECK(!big.fits);
  CHECK(big.optimizer_bytes == doctest::Approx(16e9));
  CHECK(big.verdict == tutti::plan_verdict::needs_model_parallelism);
  CHECK(big.devices == 0);
  CHECK(big.proj.rows.empty());
  CHECK(big.data_answer.find("samples") != std::string::npos);
  CHECK(big.topology_answer.find("not applicable") != std::string::npos);
  const std::string text = tutti::format_plan(big);
  CHECK(text.find("1. Does the model fit") != std::string::npos);
  CHECK(text.find("needs model parallelism") != std::string::npos);

  CHECK_THROWS_AS(tutti::make_plan(plan_for(0, "sgd", 16e9)), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::optimizer_state_factor("lion"), tutti::invalid_argument);
  CHECK(tutti::optimizer_state_factor("momentum") == 1.0);
}

TEST_CASE("projection: ranks that share a host's cores split them instead of halving compute") {
  // One rank on a host of 2 cores (2 OpenMP threads): 1/8 s data, 1 s compute, 1/4 s optimizer
  // for 4096 samples; 1 MB of gradients over a link of 10 GB/s and 10 us per step.
  const tutti::measured_step m{.data_s = 0.125,
                               .compute_s = 1.0,
                               .optimizer_s = 0.25,
                               .bytes_reduced = 1e6,
                               .global_batch = 4096,
                               .samples_per_epoch = 1e6,
                               .world_size = 1};
  const auto link = tutti::custom_link(10.0, 10.0, "here");
  const double reduce2 = 2 * 10e-6 + 1e6 / 10e9;  // the ring on 2 ranks
  tutti::projection_options o{.devices = {1, 2},
                              .devices_per_node = 2,
                              .intra = link,
                              .inter = link,
                              .scaling = tutti::scaling_mode::strong};

  // Ranks that own their devices: half the batch, half the data and compute.
  const auto own = tutti::project(m, o);
  CHECK(own.row(2)->compute_s == 0.5);
  CHECK(own.row(2)->host_factor == 1.0);
  CHECK(own.row(2)->threads_per_rank == 0.0);

  // Two ranks sharing the 2 cores: each has half the batch and one thread instead of two, so
  // (linear threads) compute stays X, not X/2, and the optimizer, which every rank runs in
  // full, takes twice as long.
  o.host = {.cores = 2};
  const auto shared = tutti::project(m, o);
  const auto& one = *shared.row(1);
  CHECK(one.threads_per_rank == 2.0);
  CHECK(one.host_factor == 1.0);
  CHECK(one.step_s == 1.375);
  const auto& two = *shared.row(2);
  CHECK(two.threads_per_rank == 1.0);
  CHECK(two.host_factor == 2.0);
  CHECK(two.data_s == 0.125);
  CHECK(two.compute_s == 1.0);
  CHECK(two.optimizer_s == 0.5);
  CHECK(two.reduce_total_s == doctest::Approx(reduce2).epsilon(1e-12));
  CHECK(two.sync_s == 0.0);
  CHECK(two.step_s == doctest::Approx(1.625 + reduce2).epsilon(1e-12));
  CHECK(two.speedup < 1.0);  // the reduce and the optimizer twice over: slower than one rank

  // Weak scaling keeps each rank's batch: the compute doubles on half the cores.
  o.scaling = tutti::scaling_mode::weak;
  CHECK(tutti::project(m, o).row(2)->compute_s == 2.0);
  o.scaling = tutti::scaling_mode::strong;

  // Four ranks on the 2 cores (one thread each, two ranks per core): the host's capacity is
  // conserved, so a quarter of the batch still takes X per rank.
  o.devices = {1, 4};
  o.devices_per_node = 4;
  const auto four = tutti::project(m, o);
  CHECK(four.row(4)->threads_per_rank == 1.0);
  CHECK(four.row(4)->host_factor == 4.0);
  CHECK(four.row(4)->compute_s == 1.0);
  o.devices = {1, 2};
  o.devices_per_node = 2;

  // Threads that did not help the measured rank (speedup 1 of 2) leave two ranks on their own
  // cores their half batch at one thread's pace: X/2 after all.
  o.host = {.cores = 2, .thread_speedup = {.data = 1.0, .compute = 1.0, .optimizer = 1.0}};
  CHECK(tutti::project(m, o).row(2)->compute_s == 0.5);
  CHECK(tutti::project(m, o).row(2)->optimizer_s == 0.25);
  // Per account: compute that threads slowed down (0.5: twice as fast on one thread) and an
  // optimizer they sped up linearly; the row's factor is their mean weighted by the time.
  o.host = {.cores = 2, .thread_speedup = {.compute = 0.5, .optimizer = 2.0}};
  const auto mixed = tutti::project(m, o);
  CHECK(mixed.row(2)->data_s == 0.125);     // linear: 1/8 x 1/2 x 2
  CHECK(mixed.row(2)->compute_s == 0.25);   // 1 x 1/2 x 0.5
  CHECK(mixed.row(2)->optimizer_s == 0.5);  // 1/4 x 2
  CHECK(mixed.row(2)->host_factor == doctest::Approx((0.125 * 2 + 1.0 * 0.5 + 0.25 * 2) / 1.375));

  // With one core left by other jobs the measured rank's two threads already took turns:
  // the same factor 2 as with free cores and linear threads.
  o.host = {.cores = 2, .available_cores = 1};
  CHECK(tutti::project(m, o).row(2)->host_factor == 2.0);

  // Amdahl between the measured threads and one: 4 cores, 4 threads at speedup 2.5, so 2 ranks
  // of 2 threads run at speedup 1 / (0.2 + 0.8 / 2) = 5/3, a factor 2.5 / (5/3) = 1.5.
  o.host = {.cores = 4, .thread_speedup = {.data = 2.5, .compute = 2.5, .optimizer = 2.5}};
  const auto amdahl = tutti::project(m, o);
  CHECK(amdahl.row(2)->threads_per_rank == 2.0);
  CHECK(amdahl.row(2)->host_factor == doctest::Approx(1.5).epsilon(1e-12));
  CHECK(amdahl.row(2)->compute_s == doctest::Approx(0.75).epsilon(1e-12));
  CHECK(amdahl.row(1)->host_factor == doctest::Approx(1.0).epsilon(1e-12));

  // The measured synchronisation is paid by every step of more than one rank.
  o.host = {.cores = 2, .sync_s = 0.125};
  const auto synced = tutti::project(m, o);
  CHECK(synced.row(1)->sync_s == 0.0);
  CHECK(synced.row(1)->step_s == 1.375);
  CHECK(synced.row(2)->sync_s == 0.125);
  CHECK(synced.row(2)->step_s == doctest::Approx(1.75 + reduce2).epsilon(1e-12));
  CHECK(tutti::format_projection_table(synced).find("ranks share a host of 2 cores") !=
        std::string::npos);
  tutti::plan_inputs in{.params = 1e6, .step = m, .projection = o};
  const auto json = nlohmann::json::parse(tutti::plan_to_json(tutti::make_plan(in)));
  CHECK(json["questions"]["topology"]["shared_host"]["cores"] == 2.0);
  CHECK(json["questions"]["topology"]["shared_host"]["sync_s"] == 0.125);
  CHECK(json["questions"]["topology"]["shared_host"]["thread_speedup"]["compute"] == 0.0);
  CHECK(json["rows"][1]["host_factor"] == 2.0);
  CHECK(json["rows"][1]["threads_per_rank"] == 1.0);

  // Measured thread speedups come from the same run with one thread, per account and corrected
  // for a core share: compute 1.5 s alone against 1 s on 2 threads is 1.5 on free cores, 3
  // capped at linear (2) when only one core was left (the two threads took turns).
  tutti::measured_step alone = m;
  alone.data_s = 0.125;
  alone.compute_s = 1.5;
  alone.optimizer_s = 0.2;
  const auto free_cores = tutti::thread_speedup_from(alone, m, {.cores = 2}, 2);
  CHECK(free_cores.data == 1.0);
  CHECK(free_cores.compute == 1.5);
  CHECK(free_cores.optimizer == doctest::Approx(0.8));
  const auto one_core = tutti::thread_speedup_from(alone, m, {.cores = 2, .available_cores = 1}, 2);
  CHECK(one_core.data == 2.0);
  CHECK(one_core.compute == 2.0);
  CHECK(one_core.optimizer == doctest::Approx(1.6));
  // With them, two ranks on the free cores run each account at its one-thread pace.
  o.host = {.cores = 2, .thread_speedup = free_cores};
  const auto paced = tutti::project(m, o);
  CHECK(paced.row(2)->data_s == doctest::Approx(alone.data_s / 2));
  CHECK(paced.row(2)->compute_s == doctest::Approx(alone.compute_s / 2));
  CHECK(paced.row(2)->optimizer_s == doctest::Approx(alone.optimizer_s));

  // Wrong inputs throw.
  o.host = {.cores = 2, .thread_speedup = {.compute = 3.0}};  // faster than linear on 2 threads
  CHECK_THROWS_AS(tutti::project(m, o), tutti::invalid_argument);
  o.host = {.cores = -1};
  CHECK_THROWS_AS(tutti::project(m, o), tutti::invalid_argument);
  tutti::measured_step other_run = alone;
  other_run.global_batch = 2048;
  CHECK_THROWS_AS(tutti::thread_speedup_from(other_run, m, {.cores = 2}, 2),
                  tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::thread_speedup_from(alone, m, {}, 2), tutti::invalid_argument);
}

TEST_CASE("planner: the JSON report carries the verdict, reasons, rows and knee") {
  auto in = plan_for(25e6, "sgd", 16e9);
  in.deadline_s = 3600.0;
  const auto fits = tutti::make_plan(in);
  const auto j = nlohmann::json::parse(tutti::plan_to_json(fits));
  CHECK(j["verdict"] == "data_parallel");
  CHECK(j["devices"] == 4);
  REQUIRE(j["reasons"].is_array());
  CHECK(j["reasons"].size() == fits.reasons.size());
  REQUIRE(j["rows"].size() == fits.proj.rows.size());
  for (std::size_t i = 0; i < fits.proj.rows.size(); ++i) {
    const auto& r = fits.proj.rows[i];
    const auto& x = j["rows"][i];
    CHECK(x["devices"] == r.devices);
    CHECK(x["step_s"].get<double>() == doctest::Approx(r.step_s));
    CHECK(x["samples_per_s"].get<double>() == doctest::Approx(r.samples_per_s));
    CHECK(x["speedup"].get<double>() == doctest::Approx(r.speedup));
    CHECK(x["efficiency"].get<double>() == doctest::Approx(r.efficiency));
    CHECK(x["cost_per_epoch"].get<double>() == doctest::Approx(r.cost_per_epoch));
    CHECK(x.contains("marginal_cost"));
  }
  CHECK(j.contains("knee"));
  CHECK(j["questions"]["fits"]["fits"] == true);
  CHECK(j["questions"]["data"]["needs_more_than_one"] == true);
  CHECK(j["questions"]["topology"]["intra"]["name"] == "pcie4");

  const auto big =
      nlohmann::json::parse(tutti::plan_to_json(tutti::make_plan(plan_for(2e9, "adam", 16e9))));
  CHECK(big["verdict"] == "needs_model_parallelism");
  CHECK(big["rows"].empty());
  CHECK(big["knee"].is_null());
  CHECK(big["questions"]["fits"]["fits"] == false);
  CHECK(big["questions"]["fits"]["memory_bytes"].get<double>() == doctest::Approx(32.5e9));
}

TEST_CASE("report: the page's series are the projection's numbers") {
  const auto p = knee_case(0.5, 0.5);
  tutti::report_input in{.title = "test <ledger>",
                         .proj = p,
                         .measured = {{1, 100.0}, {2, 190.0}},
                         .notes = {"made by test_ledger"}};
  const std::string html = tutti::render_report(in);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("test &lt;ledger&gt;") != std::string::npos);
  std::size_t svgs = 0;
  for (std::size_t pos = 0; (pos = html.find("<svg ", pos)) != std::string::npos; ++pos) ++svgs;
  CHECK(svgs == 4);
  const auto s = parse_series(html);
  for (const char* name :
       {"ideal-speedup", "predicted-speedup", "measured-speedup", "predicted-efficiency",
        "measured-efficiency", "cost-per-epoch", "step-data", "step-compute", "step-optimizer",
        "step-reduce", "measured-step-compute"})
    CHECK_MESSAGE(s.count(name) == 1, name);
  REQUIRE(s.at("predicted-speedup").size() == p.rows.size());
  for (std::size_t i = 0; i < p.rows.size(); ++i) {
    const auto& r = p.rows[i];
    CHECK(s.at("ideal-speedup")[i].first == r.devices);
    CHECK(s.at("ideal-speedup")[i].second == r.devices);
    CHECK(s.at("predicted-speedup")[i].first == r.devices);
    CHECK(s.at("predicted-speedup")[i].second == doctest::Approx(r.speedup).epsilon(1e-8));
    CHECK(s.at("predicted-efficiency")[i].second == doctest::Approx(r.efficiency).epsilon(1e-8));
    CHECK(s.at("cost-per-epoch")[i].second == doctest::Approx(r.cost_per_epoch).epsilon(1e-8));
    CHECK(s.at("step-compute")[i].second == doctest::Approx(r.compute_s).epsilon(1e-8));
    CHECK(s.at("step-reduce")[i].second == doctest::Approx(r.reduce_exposed_s).epsilon(1e-8));
  }
  REQUIRE(s.at("measured-speedup").size() == 2);
  CHECK(s.at("measured-speedup")[1].second == doctest::Approx(1.9));
  CHECK(s.at("measured-efficiency")[1].second == doctest::Approx(0.95));
  CHECK(s.at("measured-step-compute").at(0).second == doctest::Approx(1.0));

  const tutti_test::scratch_dir tmp("tutti-ledger-report");
  const auto dir = tmp.path / "report";
  const std::string path = tutti::write_report(dir.string(), in);
  std::ifstream f(path);
  REQUIRE(f);
  std::stringstream buf;
  buf << f.rdbuf();
  CHECK(buf.str() == html);
}

TEST_CASE("allreduce bench: the alpha-beta fit recovers a known link, and local_ring is measured") {
  // Synthetic rows of known alpha = 20 us, 1/beta = 2 GB/s on 2 and 4 ranks.
  std::vector<tutti::allreduce_bench_row> rows;
  for (const int n : {2, 4})
    for (std::size_t b = 4096; b <= (std::size_t{64} << 20); b *= 4) {
      tutti::allreduce_bench_row r;
      r.reducer = "local_ring";
      r.ranks = n;
      r.bytes = b;
      r.time_us = (20e-6 * 2 * (n - 1) + 2.0 * (n - 1) / n * double(b) / 2e9) * 1e6;
      rows.push_back(r);
    }
  const auto fit = tutti::fit_alpha_beta(rows);
  CHECK(fit.alpha_s == doctest::Approx(20e-6));
  CHECK(1.0 / fit.beta_s_per_byte == doctest::Approx(2e9));
  CHECK(fit.max_rel_error < 1e-9);
  const auto l = fit.as_link("here");
  CHECK(l.gb_per_s == doctest::Approx(2.0));
  CHECK(l.latency_us == doctest::Approx(20.0));
  // The fitted link, priced by the cost model, gives back the timings.
  const tutti::topology t{.devices = 4, .devices_per_node = 4, .intra = l, .inter = l};
  CHECK(tutti::ring_allreduce(16e6, t).seconds() == doctest::Approx(fit.seconds(16e6, 4)));
  CHECK_THROWS_AS(tutti::fit_alpha_beta({}), tutti::invalid_argument);

  // Timings that do not grow with the size (a noisy, loaded machine) give a clear error, not a
  // negative bandwidth.
  std::vector<tutti::allreduce_bench_row> flat = {rows[0], rows[1]};
  flat[0].time_us = 50;
  flat[1].time_us = 40;
  CHECK_THROWS_WITH_AS(tutti::fit_alpha_beta(flat),
                       doctest::Contains("expected timings that grow with the size"),
                       tutti::invalid_argument);

  // A real, short sweep: every value correct. (Its timings are not asserted: on a shared
  // machine a 4 KB-256 KB sweep may well not grow with the size.)
  const tutti::allreduce_bench_options o{
      .min_bytes = 4096, .max_bytes = 262144, .factor = 4, .iters = 5, .warmup = 1};
  const auto measured = tutti::bench_allreduce_local_ring(2, o);
  REQUIRE(measured.size() == 4);
  for (const auto& r : measured) {
    CHECK(r.wrong == 0);
    CHECK(r.ranks == 2);
    CHECK(r.busbw_gbs == doctest::Approx(r.algbw_gbs));
  }
  CHECK(tutti::format_allreduce_row(measured.front()).find("4096") != std::string::npos);
  CHECK_THROWS_AS(tutti::allreduce_bench_sizes({.min_bytes = 6}), tutti::invalid_argument);
}

TEST_CASE("allreduce bench: any reducer's group, emulated steps and the host's free cores") {
  const tutti::allreduce_bench_options o{
      .min_bytes = 4096, .max_bytes = 16384, .factor = 4, .iters = 3, .warmup = 1};
  // The collective form: every rank gets the same rows, the slowest rank's times.
  std::vector<std::vector<tutti::allreduce_bench_row>> per_rank(2);
  tutti::run_local(2, [&](tutti::local_ring& ring) {
    per_rank[std::size_t(ring.rank())] = tutti::bench_allreduce(ring, o, "local_ring");
  });
  REQUIRE(per_rank[0].size() == 2);
  REQUIRE(per_rank[1].size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    CHECK(per_rank[0][k].time_us == per_rank[1][k].time_us);
    CHECK(per_rank[0][k].wrong == 0);
    CHECK(per_rank[0][k].iters == 3);
  }
  const auto no_op = tutti::bench_allreduce_no_op(o);
  REQUIRE(no_op.size() == 2);
  CHECK(no_op.front().reducer == "no_op");
  CHECK(no_op.front().ranks == 1);

  // Emulated steps burn CPU time, so a step lasts at least its work, on every rank alike.
  std::vector<tutti::step_bench_result> steps(2);
  tutti::run_local(2, [&](tutti::local_ring& ring) {
    steps[std::size_t(ring.rank())] = tutti::bench_step(ring, 4096, 2e-3, 4, "local_ring", 1);
  });
  for (const auto& s : steps) {
    CHECK(s.ranks == 2);
    CHECK(s.iters == 4);
    CHECK(s.mean_s >= 2e-3);
    CHECK(s.p50_s <= s.p95_s);
  }
  CHECK(steps[0].mean_s == steps[1].mean_s);
  tutti::single_rank alone;
  CHECK_THROWS_AS(tutti::bench_step(alone, 6, 0.0, 1, "no_op"), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::bench_step(alone, 8, -1.0, 1, "no_op"), tutti::invalid_argument);

  // One thread burning gets at most one core, and more than nothing.
  const double got = tutti::measure_available_cores(1, 0.05);
  CHECK(got > 0.0);
  CHECK(got <= 1.0);
  CHECK_THROWS_AS(tutti::measure_available_cores(0), tutti::invalid_argument);
}

TEST_CASE("planner: no N whose global batch exceeds the largest safe batch is advised") {
  // 512 samples per device (plan_for), weak scaling: the 1 h deadline needs 4 devices, a global
  // batch of 2048. With a largest safe batch of 1024 no N past the limit is advised: 2 devices
  // (1024), the deadline out of reach within it, both limits named, and the way out (a smaller
  // per-device batch) in the reason.
  auto in = plan_for(25e6, "sgd", 16e9);
  in.deadline_s = 3600.0;
  in.max_safe_batch = 1024.0;
  const auto p = tutti::make_plan(in);
  REQUIRE(p.wanted_devices.has_value());
  CHECK(*p.wanted_devices == 4);
  CHECK(p.verdict == tutti::plan_verdict::data_parallel);
  REQUIRE(p.devices == 2);
  CHECK(p.advised_global_batch == doctest::Approx(1024));
  CHECK_FALSE(p.batch_exceeds_safe);
  CHECK(p.max_devices_within_batch == 2);
  CHECK(p.per_device_batch_within == doctest::Approx(256));
  CHECK(binding_names(p) == std::vector<std::string>{"deadline_out_of_reach", "max_safe_batch"});
  CHECK(p.batch_answer.find("above the largest safe batch 1024") != std::string::npos);
  CHECK(p.batch_answer.find("at most 256 on 4 devices") != std::string::npos);
  CHECK(p.verdict_text.find("largest safe one (1024)") != std::string::npos);
  CHECK(p.verdict_text.find("out of reach") != std::string::npos);
  const auto j = nlohmann::json::parse(tutti::plan_to_json(p));
  CHECK(j["batch"]["exceeds"] == false);
  CHECK(j["binding"][1]["name"] == "max_safe_batch");
  CHECK(j["rows"][2]["beyond"][0] == "max_safe_batch");  // N = 4
  // Strong scaling keeps the measured 512 per step, within the limit, and meets the deadline on
  // 4 devices: the plan shows it beside the weak one.
  REQUIRE(p.other_scaling.has_value());
  CHECK(p.other_scaling->proj.options.scaling == tutti::scaling_mode::strong);
  CHECK(p.other_scaling->verdict == tutti::plan_verdict::data_parallel);
  CHECK(p.other_scaling->devices == 4);
  CHECK(j["other_scaling"]["devices"] == 4);
  CHECK(tutti::format_plan(p).find("under strong scaling: data parallel on 4 devices") !=
        std::string::npos);
  // Within the limit: said, not binding; without a limit: no batch answer at all.
  in.max_safe_batch = 4096.0;
  const auto ok = tutti::make_plan(in);
  CHECK(ok.devices == 4);
  CHECK_FALSE(ok.batch_exceeds_safe);
  CHECK(ok.batch_answer.find("within the largest safe batch 4096") != std::string::npos);
  CHECK(binding_names(ok) == std::vector<std::string>{"deadline"});
  in.max_safe_batch.reset();
  const auto none = tutti::make_plan(in);
  CHECK(none.batch_answer.empty());
  CHECK(tutti::plan_to_json(none).find("\"batch\": null") != std::string::npos);
  // Without a study the planner cannot know: it says the batch is untested instead.
  CHECK(caution_names(none) == std::vector<std::string>{"batch_untested"});
}

TEST_CASE("planner: a job one device finishes in well under a second stays on one device") {
  // `tutti train --ranks 2 --epochs 2`: 215 607 samples, 2 x 2048 per step, a step of 1.4 ms of
  // work plus 1 ms of reduce. Weak scaling to 1024 devices has no knee (the reduce is tiny), so
  // the knee alone would allow 1024 devices, a global batch of 2.1 M: ten times the data.
  tutti::plan_inputs in;
  in.params = 148501;
  in.optimizer = "adam";
  in.epochs = 2;
  in.step = {.data_s = 0.1e-3,
             .compute_s = 1.0e-3,
             .optimizer_s = 0.3e-3,
             .reduce_total_s = 1.0e-3,
             .reduce_exposed_s = 1.0e-3,
             .bytes_reduced = 594120,
             .global_batch = 4096,
             .samples_per_epoch = 215607,
             .world_size = 2};
  const auto p = tutti::make_plan(in);
  CHECK(p.one_device_s < 1.0);
  CHECK_FALSE(p.needs_more_than_one);
  CHECK(p.verdict == tutti::plan_verdict::one_device);
  CHECK(p.devices == 1);
  CHECK(binding_names(p) == std::vector<std::string>{"reasonable_time"});
  CHECK(p.verdict_text.find("within the reasonable") != std::string::npos);
  // The data feeds at most 215 607 / 50 = 4312 samples per step: from N = 4 (8192) on, every
  // row is beyond the limit, and the table and the JSON say so.
  CHECK(p.max_batch_from_data == doctest::Approx(215607.0 / 50));
  const auto j = nlohmann::json::parse(tutti::plan_to_json(p));
  CHECK(j["verdict"] == "one_device");
  CHECK(j["binding"][0]["name"] == "reasonable_time");
  CHECK(j["limits"]["min_steps_per_epoch"] == 50.0);
  CHECK(j["rows"][1]["beyond"].empty());
  CHECK(j["rows"][2]["beyond"][0] == "min_steps_per_epoch");
  CHECK(j["rows"].back()["beyond"][0] == "min_steps_per_epoch");
  CHECK(j["rows"][1]["time_saved_s"].get<double>() > 0.0);
  CHECK(j["rows"][1]["extra_cost"].get<double>() > 0.0);
  const std::string text = tutti::format_plan(p);
  CHECK(text.find("steps/epoch < 50") != std::string::npos);
  CHECK(text.find("[reasonable_time]") != std::string::npos);
  CHECK(text.find("under strong scaling:") != std::string::npos);

  // Were 100 ms too long, N = 4 would bring the job within it, but its global batch leaves 26
  // steps per epoch: 2 devices, the most the data feeds, with that limit named.
  in.reasonable_s = 0.1;
  const auto capped = tutti::make_plan(in);
  CHECK(capped.verdict == tutti::plan_verdict::data_parallel);
  CHECK(capped.devices == 2);
  REQUIRE(capped.wanted_devices.has_value());
  CHECK(*capped.wanted_devices == 4);
  CHECK(binding_names(capped) ==
        std::vector<std::string>{"reasonable_time", "min_steps_per_epoch"});
  CHECK(capped.verdict_text.find("keep at least 50 steps per epoch") != std::string::npos);
  // Without the steps-per-epoch limit, those 4 devices.
  in.min_steps_per_epoch = 0;
  CHECK(tutti::make_plan(in).devices == 4);
  in.reasonable_s = 0;
  CHECK_THROWS_AS(tutti::make_plan(in), tutti::invalid_argument);
}

TEST_CASE("planner: the classic case of docs/ledger.md") {
  // 2e9 fp32 parameters, sgd, a 32 GB device; 35 samples per 1.26 s step on one GPU (100 000
  // samples an hour), 2 M samples, PCIe Gen3, 8 devices a node, 3 per device-hour.
  tutti::plan_inputs in;
  in.params = 2e9;
  in.optimizer = "sgd";
  in.device_memory_bytes = 32e9;
  in.epochs = 1;
  in.deadline_s = 10 * 3600.0;
  in.step = {.compute_s = 1.26,
             .bytes_reduced = 8e9,
             .global_batch = 35,
             .samples_per_epoch = 2e6,
             .world_size = 1};
  in.projection.max_devices = 8;
  in.projection.intra = tutti::find_link("pcie3");
  in.projection.inter = tutti::find_link("pcie3");
  in.projection.price_per_device_hour = 3;
  in.projection.exposed_ratio = 1.0;
  const auto p = tutti::make_plan(in);
  CHECK(p.one_device_samples_per_s * 3600 == doctest::Approx(100000).epsilon(0.001));
  CHECK(p.proj.row(4)->samples_per_s * 3600 == doctest::Approx(249000).epsilon(0.002));
  CHECK(p.proj.row(4)->speedup == doctest::Approx(2.49).epsilon(0.002));
  // 20 h on one device, past the 10 h deadline; 4 devices (8.0 h) are the fewest within it,
  // past the knee at 2: the deadline binds, the knee is a caution.
  CHECK(p.verdict == tutti::plan_verdict::data_parallel);
  CHECK(p.devices == 4);
  CHECK(p.verdict_text ==
        "data parallel on 4 devices: the fewest that finish within 10.0 h (8.0 h)");
  CHECK(binding_names(p) == std::vector<std::string>{"deadline"});
  CHECK(caution_names(p) == std::vector<std::string>{"past_knee", "batch_untested"});
  // 140 samples per step leave 14 286 steps per epoch: the data is no limit here.
  CHECK(p.proj.row(8)->global_batch < p.max_batch_from_data);

  // Without the deadline 20 h is longer than the reasonable hour, but the second device adds
  // only 43% of one device's throughput: one device, the knee named.
  in.deadline_s.reset();
  const auto nodl = tutti::make_plan(in);
  CHECK(nodl.needs_more_than_one);
  CHECK(nodl.verdict == tutti::plan_verdict::one_device);
  CHECK(nodl.verdict_text ==
        "one device: a second one would add less than 50% of a device's "
        "throughput");
  CHECK(binding_names(nodl) == std::vector<std::string>{"reasonable_time", "knee"});
}

TEST_CASE("planner: a long job with plenty of data per step on good links goes data parallel") {
  // 25 M parameters (100 MB of gradients), 0.5 s per step of 256 samples, 50 M samples x 2
  // epochs: 54 h on one device. NVLink 4 inside a node, NDR InfiniBand between nodes: the reduce
  // is a few ms against a 0.5 s step, no knee up to 1024.
  tutti::plan_inputs in;
  in.params = 25e6;
  in.optimizer = "adamw";
  in.epochs = 2;
  in.step = {.compute_s = 0.5,
             .bytes_reduced = 100e6,
             .global_batch = 256,
             .samples_per_epoch = 50e6,
             .world_size = 1};
  in.projection.intra = tutti::find_link("nvlink4");
  in.projection.inter = tutti::find_link("ib_ndr");
  const auto p = tutti::make_plan(in);
  CHECK(p.one_device_s > 50 * 3600.0);
  CHECK_FALSE(p.proj.knee.has_value());
  // The fewest devices that bring the job within the reasonable hour: 64 (32 take 1.7 h).
  CHECK(p.verdict == tutti::plan_verdict::data_parallel);
  REQUIRE(p.devices == 64);
  const auto* row = p.proj.row(p.devices);
  CHECK(2 * row->epoch_s <= 3600.0);
  CHECK(2 * p.proj.row(32)->epoch_s > 3600.0);
  CHECK(row->efficiency > 0.95);
  CHECK(row->global_batch <= p.max_batch_from_data);
  CHECK(row->steps_per_epoch >= 50);
  CHECK(binding_names(p) == std::vector<std::string>{"reasonable_time"});
  CHECK(p.verdict_text.find("data parallel on 64 devices: the fewest that bring the job within") !=
        std::string::npos);
  // 64 x 256 = 16 384 per step is 64x what was measured: untested without a study.
  CHECK(caution_names(p) == std::vector<std::string>{"batch_untested"});
  // A study that says 8192 is the largest safe batch stops it at 32 devices, and says so.
  in.max_safe_batch = 8192.0;
  const auto safe = tutti::make_plan(in);
  CHECK(safe.devices == 32);
  CHECK(safe.advised_global_batch == doctest::Approx(8192));
  CHECK(binding_names(safe) == std::vector<std::string>{"reasonable_time", "max_safe_batch"});
  CHECK(safe.cautions.empty());
}

// One device's step of a recommender: a 1 GB learner table, a 100 kB course table, 0.9 MB of
// other gradient; the rows a step touched take 1 MB in each table's gather.
tutti::measured_step recommender_step() {
  tutti::measured_step m{.compute_s = 0.01,
                         .bytes_reduced = 1.001e9,
                         .global_batch = 4096,
                         .samples_per_epoch = 1e8,
                         .world_size = 1};
  m.dense_bytes = 1.001e9;
  m.row_segments = {{.dense_bytes = 1e9, .row_bytes = 1e6}, {.dense_bytes = 1e5, .row_bytes = 1e6}};
  return m;
}

TEST_CASE("projection: a sparse exchange sends a table as the rows a device touched where fewer") {
  using tutti::projected_exchange;
  const tutti::measured_step m = recommender_step();
  const auto bytes = [&](projected_exchange x, int n) {
    return tutti::projected_bytes(m, x, n);
  };
  // Densely: the dense bytes at every device count; one device reduces nothing else either.
  for (int n : {1, 2, 8}) CHECK(bytes(projected_exchange::dense, n) == 1.001e9);
  CHECK(bytes(projected_exchange::rows, 1) == 1.001e9);
  // Where fewer: the learner table as n·1 MB / 2, the course table (100 kB) dense, and the
  // counts' gather, a word a table and device.
  CHECK(bytes(projected_exchange::rows_when_fewer, 2) ==
        doctest::Approx(9e5 + 1e5 + 2 * 1e6 / 2 + 2 * 2 * 8 / 2.0).epsilon(1e-12));
  CHECK(bytes(projected_exchange::rows, 2) ==
        doctest::Approx(9e5 + 2 * 1e6 / 2 + 2 * 1e6 / 2 + 2 * 2 * 8 / 2.0).epsilon(1e-12));
  // At 4096 devices the learner table's rows would be 2 GB: it stays dense.
  CHECK(bytes(projected_exchange::rows_when_fewer, 4096) ==
        doctest::Approx(1.001e9 + 4096 * 2 * 8 / 2.0).epsilon(1e-12));
  // The row-sparse step gathers the touched ids (and their counts) whatever the exchange.
  tutti::measured_step merged = m;
  merged.row_segments[0].id_bytes = 8e3;
  merged.row_segments[1].id_bytes = 4e3;
  CHECK(tutti::projected_bytes(merged, projected_exchange::dense, 4) ==
        doctest::Approx(1.001e9 + 4 * 12e3 / 2 + 4 * 2 * 8 / 2.0).epsilon(1e-12));
  // The policies by the names tutti train and tutti plan take.
  CHECK(tutti::projected_exchange_of("off") == projected_exchange::dense);
  CHECK(tutti::projected_exchange_of("auto") == projected_exchange::rows_when_fewer);
  CHECK(tutti::projected_exchange_of("measured") == projected_exchange::rows_when_fewer);
  CHECK(tutti::projected_exchange_of("on") == projected_exchange::rows);
  // A measured run without row segments projects its bytes whatever the exchange.
  tutti::measured_step plain = m;
  plain.row_segments.clear();
  plain.bytes_reduced = 2.5e6;
  CHECK(tutti::projected_bytes(plain, projected_exchange::rows, 2) == 2.5e6);

  // The projection reduces those bytes: each row's reduce is that of a run that measured them.
  const tutti::projection_options o{.devices = {1, 2, 4, 8},
                                    .intra = tutti::find_link("pcie4"),
                                    .inter = tutti::find_link("pcie4"),
                                    .exchange = projected_exchange::rows_when_fewer};
  const tutti::projection rows = tutti::project(m, o);
  tutti::projection_options dense_o = o;
  dense_o.exchange = projected_exchange::dense;
  const tutti::projection dense = tutti::project(m, dense_o);
  REQUIRE(rows.rows.size() == 4);
  for (std::size_t i = 0; i < rows.rows.size(); ++i) {
    const int n = rows.rows[i].devices;
    CAPTURE(n);
    tutti::measured_step same = plain;
    same.bytes_reduced = bytes(projected_exchange::rows_when_fewer, n);
    tutti::projection_options one = dense_o;
    one.devices = {n};
    CHECK(rows.rows[i].reduce_total_s == tutti::project(same, one).rows[0].reduce_total_s);
    if (n > 1) CHECK(rows.rows[i].speedup > dense.rows[i].speedup);
  }
  tutti::measured_step bad = m;
  bad.row_segments[1].row_bytes = -1;
  CHECK_THROWS_WITH_AS(tutti::project(bad, o), doctest::Contains("a row-sparse segment's bytes"),
                       tutti::invalid_argument);
}

// A row-sparse step of one device: a table of 1,000 rows of 8 values, 100 rows touched and
// updated a step, beside 100 dense values (the rest of the gradient), 1 ms of optimizer a step.
tutti::measured_step row_step_of(int world, double updated) {
  tutti::measured_step m{.compute_s = 0.01,
                         .optimizer_s = 0.001,
                         .bytes_reduced = 32400,
                         .global_batch = 100.0 * world,
                         .samples_per_epoch = 1e6,
                         .world_size = world};
  m.dense_bytes = 32400;
  m.row_segments = {{.dense_bytes = 32000,
                     .row_bytes = 100 * 5 * 8,
                     .id_bytes = 400,
                     .table_rows = 1000,
                     .cols = 8,
                     .rows = 100,
                     .updated_rows = updated}};
  return m;
}

TEST_CASE("projection: a row-sparse step's optimizer updates the union of the devices' rows") {
  // The union of n draws of 100 rows of 1,000: 1000 (1 - 0.9^n); the update's values follow it.
  CHECK(tutti::union_rows(100, 1000, 1) == doctest::Approx(100).epsilon(1e-12));
  CHECK(tutti::union_rows(100, 1000, 2) == doctest::Approx(190).epsilon(1e-12));
  CHECK(tutti::union_rows(1000, 1000, 4) == doctest::Approx(1000).epsilon(1e-12));
  const tutti::measured_step one = row_step_of(1, 100);
  const auto by_hand = [](int n) {
    return (100 + 8 * 1000 * (1 - std::pow(0.9, n))) / (100 + 8 * 100);
  };
  for (int n : {1, 2, 4, 8}) {
    CAPTURE(n);
    CHECK(tutti::projected_update_factor(one, n) == doctest::Approx(by_hand(n)).epsilon(1e-12));
  }
  // A 2-device run that measured a union of 190 rows: its own count projects its own time, and
  // the others follow the same curve from it.
  const tutti::measured_step two = row_step_of(2, 190);
  CHECK(tutti::projected_update_factor(two, 2) == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(tutti::projected_update_factor(two, 8) ==
        doctest::Approx((100 + 8 * 190 * (1 - std::pow(0.9, 8)) / 0.19) / (100 + 8 * 190))
            .epsilon(1e-12));
  // The projection charges it: the optimizer's time at each row, and a slower step than a
  // projection that kept the measured time (a segment without updated rows).
  const tutti::projection_options o{.devices = {1, 2, 4, 8},
                                    .intra = tutti::find_link("pcie4"),
                                    .inter = tutti::find_link("pcie4")};
  const tutti::projection p = tutti::project(one, o);
  tutti::measured_step kept = one;
  kept.row_segments[0].updated_rows = 0;  // as a dense optimizer's step
  const tutti::projection flat = tutti::project(kept, o);
  REQUIRE(p.rows.size() == 4);
  for (std::size_t i = 0; i < p.rows.size(); ++i) {
    const int n = p.rows[i].devices;
    CAPTURE(n);
    CHECK(p.rows[i].update_factor == doctest::Approx(by_hand(n)).epsilon(1e-12));
    CHECK(p.rows[i].optimizer_s == doctest::Approx(0.001 * by_hand(n)).epsilon(1e-12));
    CHECK(flat.rows[i].update_factor == 1.0);
    CHECK(flat.rows[i].optimizer_s == 0.001);
    if (n > 1) CHECK(p.rows[i].speedup < flat.rows[i].speedup);
  }
  CHECK(tutti::format_projection_table(p).find("the optimizer's time x5.17 at 8 devices") !=
        std::string::npos);
  CHECK(tutti::format_projection_table(flat).find("the optimizer's time") == std::string::npos);
  tutti::measured_step bad = one;
  bad.row_segments[0].updated_rows = 1001;
  CHECK_THROWS_WITH_AS(tutti::project(bad, o), doctest::Contains("at most the table's rows"),
                       tutti::invalid_argument);
}

}  // namespace test_ledger
