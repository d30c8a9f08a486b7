// SPDX-License-Identifier: Apache-2.0
/// @file test_noise_plan.cpp
/// @brief Time to the same loss: the large-batch model's samples and steps, the projection's
/// rows and noise knee under a gradient noise scale, and the planner's verdict with it.
#include <doctest/doctest.h>

#include <tutti/plan/noise_model.hpp>
#include <tutti/plan/plan_format.hpp>
#include <tutti/plan/planner.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace test_noise_plan {

namespace {

std::vector<std::string> names(const std::vector<tutti::plan_reason>& v) {
  std::vector<std::string> out;
  for (const auto& r : v) out.push_back(r.name);
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One device of a 1-rank run: 1 s per step of 1,000 samples, nothing reduced, links so fast
// that every N scales perfectly; 4,096,000 samples per epoch (a multiple of every global batch).
tutti::plan_inputs perfect_scaling(double b_noise) {
  tutti::plan_inputs in;
  in.params = 1e6;
  in.epochs = 10;
  in.step = {.compute_s = 1.0,
             .bytes_reduced = 0,
             .global_batch = 1000,
             .samples_per_epoch = 4096e3,
             .world_size = 1};
  in.projection.intra = tutti::custom_link(1e9, 0.0, "free");
  in.projection.inter = in.projection.intra;
  in.projection.max_devices = 256;
  in.min_steps_per_epoch = 0;
  in.noise_scale = tutti::noise_scale_input{b_noise, false, "test"};
  return in;
}

}  // namespace

TEST_CASE("noise model: samples and steps to the same loss follow E = E_min(1 + B/B_noise)") {
  for (const double bn : {100.0, 16000.0, 1e6})
    for (const double ref : {64.0, 1000.0, 50000.0}) {
      CHECK(tutti::samples_to_same_loss(ref, ref, bn) == doctest::Approx(1.0));
      CHECK(tutti::steps_to_same_loss(ref, ref, bn) == doctest::Approx(1.0));
      for (const double b : {32.0, 4096.0, 1e5}) {
        // Samples are steps times the batch: E(b)/E(ref) = S(b) b / (S(ref) ref).
        CHECK(tutti::samples_to_same_loss(b, ref, bn) ==
              doctest::Approx(tutti::steps_to_same_loss(b, ref, bn) * b / ref));
        // The paper's trade-off: (S/S_min - 1)(E/E_min - 1) = 1 at every batch.
        const double s = 1 + bn / b, e = 1 + b / bn;
        CHECK((s - 1) * (e - 1) == doctest::Approx(1.0));
      }
    }
  // At B = B_noise a step does half the work of an infinitely large one: twice E_min.
  CHECK(tutti::samples_to_same_loss(16000, 1e-9, 16000) == doctest::Approx(2.0));
}

TEST_CASE("projection under a noise scale: the closed form of perfect weak scaling") {
  // N devices of batch b = 1000, B_noise = 16,000: samples x = (1 + N/16) / (1 + 1/16); from N to
  // 2N the added devices' useful share is c / ((1 + 2x)(1 + x)), x = N/16, c = 1 + 1/16.
  const tutti::plan_inputs in = perfect_scaling(16000);
  tutti::projection p = tutti::project(in.step, in.projection);
  tutti::apply_noise_scale(p, 16000, 0.2);
  REQUIRE(p.rows.size() == 9);
  const double c = 1 + 1.0 / 16;
  for (std::size_t i = 0; i < p.rows.size(); ++i) {
    const auto& r = p.rows[i];
    const double x = r.devices / 16.0;
    CHECK(r.samples_factor == doctest::Approx((1 + x) / c));
    CHECK(r.loss_speedup == doctest::Approx(r.devices / r.samples_factor).epsilon(1e-4));
    if (i > 0) {
      const double xp = p.rows[i - 1].devices / 16.0;
      CHECK(r.useful_share == doctest::Approx(c / ((1 + 2 * xp) * (1 + xp))).epsilon(1e-4));
    }
  }
  // 16 -> 32: 1.0625 / (3 x 2) = 0.177 < 0.2; 8 -> 16: 1.0625 / 3 = 0.354.
  CHECK(p.noise_knee == 32);
  CHECK(p.last_useful == 16);
  CHECK(p.noise_crossed_at == 32);  // 16,000 is not past 16,000; 32,000 is
  // A looser fraction moves the knee out; strong scaling keeps the batch, so no knee at all.
  tutti::apply_noise_scale(p, 16000, 0.05);
  CHECK(p.noise_knee == 128);  // 64 -> 128: 1.0625 / (9 x 5) = 0.024; 32 -> 64: 0.089
  tutti::projection_options strong = in.projection;
  strong.scaling = tutti::scaling_mode::strong;
  tutti::projection s = tutti::project(in.step, strong);
  tutti::apply_noise_scale(s, 16000, 0.2);
  CHECK_FALSE(s.noise_knee.has_value());
  CHECK(s.last_useful == s.rows.back().devices);
  for (const auto& r : s.rows) CHECK(r.samples_factor == doctest::Approx(1.0));
  CHECK_THROWS_AS(tutti::apply_noise_scale(p, 0.0, 0.2), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::apply_noise_scale(p, 1000, 0.0), tutti::invalid_argument);
}

TEST_CASE("planner: without a deadline no N past the noise knee, and a deadline names the cost") {
  // One device takes 4096 steps x 10 epochs = 11.4 h. No N reaches the same loss within 10
  // minutes (N = 256 takes 43 min: 16 steps x 10 x 16.0 the samples), and past N = 16 the added
  // devices buy less than 20% of their throughput in progress: N = 16 (80 min) is advised.
  tutti::plan_inputs in = perfect_scaling(16000);
  in.reasonable_s = 600;
  const auto p = tutti::make_plan(in);
  CHECK(p.verdict == tutti::plan_verdict::data_parallel);
  CHECK(p.devices == 16);
  CHECK(names(p.binding) == std::vector<std::string>{"reasonable_time", "noise_scale"});
  CHECK(contains(p.verdict_text, "into time to the same loss"));
  CHECK(contains(p.binding.back().text, "past N = 16"));
  CHECK(contains(p.binding.back().text, "N = 32"));
  // The job is the time to the same loss: epochs x epoch x samples factor.
  const auto* row16 = p.proj.row(16);
  const auto j = nlohmann::json::parse(tutti::plan_to_json(p));
  CHECK(j["rows"][4]["job_s"].get<double>() ==
        doctest::Approx(10 * row16->epoch_s * row16->samples_factor));
  CHECK(j["noise_scale"]["noise_knee"] == 32);
  CHECK(j["noise_scale"]["last_useful"] == 16);
  CHECK(j["rows"][5]["beyond"] == nlohmann::json::array({"noise_knee"}));
  CHECK(contains(tutti::format_plan(p), "4. How large a global batch still buys progress?"));
  // Without the noise scale the same inputs go to the N the reasonable time asks for.
  tutti::plan_inputs per_epoch = in;
  per_epoch.noise_scale.reset();
  const auto q = tutti::make_plan(per_epoch);
  CHECK(q.devices == 128);  // 10 x 32 steps x 1 s = 5.3 min; 64 devices take 10.7 min
  CHECK(names(q.binding) == std::vector<std::string>{"reasonable_time"});
  CHECK(tutti::plan_to_json(q).find("\"noise_scale\": null") != std::string::npos);
  // A deadline is the user's to set: the plan meets it past the noise knee and says what it costs.
  in.deadline_s = 3300;  // 55 min to the same loss: N = 64 takes 50.2 min, N = 32 60.3 min
  const auto d = tutti::make_plan(in);
  CHECK(d.devices == 64);
  CHECK(names(d.binding) == std::vector<std::string>{"deadline"});
  CHECK(names(d.cautions) == std::vector<std::string>{"past_noise_knee", "batch_untested"});
}

TEST_CASE("planner: with a largest safe batch too, the plan says which of the two binds") {
  tutti::plan_inputs in = perfect_scaling(16000);
  in.reasonable_s = 600;
  in.max_safe_batch = 8000;  // N <= 8: accuracy stops N before the noise scale does
  const auto study = tutti::make_plan(in);
  CHECK(study.devices == 8);
  CHECK(names(study.binding) == std::vector<std::string>{"reasonable_time", "max_safe_batch"});
  CHECK(contains(study.noise_answer, "allows N <= 8, the noise scale N <= 16"));
  CHECK(contains(study.noise_answer, "the largest safe batch binds"));
  in.max_safe_batch = 64000;  // N <= 64: the noise scale stops N first
  const auto noise = tutti::make_plan(in);
  CHECK(noise.devices == 16);
  CHECK(names(noise.binding) == std::vector<std::string>{"reasonable_time", "noise_scale"});
  CHECK(contains(noise.noise_answer, "the noise scale binds"));
}

TEST_CASE("planner: a noise scale known only from below sets no limit and says so") {
  tutti::plan_inputs in = perfect_scaling(16000);
  in.noise_scale->at_least = true;
  in.reasonable_s = 600;
  const auto p = tutti::make_plan(in);
  CHECK_FALSE(p.proj.b_noise.has_value());
  for (const auto& r : p.proj.rows) CHECK(r.samples_factor == 1.0);
  CHECK(p.devices == 128);  // as without a noise scale
  const auto cautions = names(p.cautions);
  REQUIRE(cautions.size() == 2);
  CHECK(cautions[0] == "noise_scale_unresolved");
  CHECK(contains(p.cautions[0].text, "up to N = 16"));
  CHECK(contains(p.noise_answer, "at least 16 k samples"));
  const auto j = nlohmann::json::parse(tutti::plan_to_json(p));
  CHECK(j["noise_scale"]["at_least"] == true);
  CHECK(j["noise_scale"]["noise_knee"].is_null());
  // Bad inputs are refused by name.
  in.noise_scale->b_noise = -1;
  CHECK_THROWS_WITH_AS(tutti::make_plan(in), doctest::Contains("noise_scale"),
                       tutti::invalid_argument);
  in.noise_scale->b_noise = 1000;
  in.useful_fraction = 1.5;
  CHECK_THROWS_WITH_AS(tutti::make_plan(in), doctest::Contains("useful_fraction"),
                       tutti::invalid_argument);
}

}  // namespace test_noise_plan
