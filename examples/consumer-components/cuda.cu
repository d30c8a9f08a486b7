// SPDX-License-Identifier: Apache-2.0
/// @file cuda.cu
/// @brief tutti::cuda: trains a small course recommender on the GPU (the CUDA space) and exits
/// non-zero unless it learned; without a visible GPU it says so and exits 77 (skipped).
#include <tutti/tutti.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>

int main() {
  if (tutti::cuda_device_count() == 0) {
    std::printf("consumer (cuda): built; skipped running: no CUDA device is visible\n");
    return 77;
  }
  try {
    auto data = tutti::data::synthetic_courses({.learners = 600, .courses = 120, .seed = 3});
    auto parts = tutti::data::split(data, {.test_fraction = 0.1, .seed = 1});
    using mf = tutti::models::matrix_factorization<tutti::cuda_space>;
    tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank, tutti::constant, tutti::adam> t(
        mf({.dim = 16, .loss = tutti::loss_kind::logistic}, data.n_users(), data.n_items()), {}, {},
        {}, {}, {.batch = 512, .epochs = 3, .base_lr = 0.02, .seed = 7});
    const tutti::fit_result r = t.fit(parts.train, parts.test);
    const bool learned = std::strcmp(r.eval.metric, "auc") == 0 && r.eval.value > 0.6;
    std::printf("consumer (cuda): test %s %.4f after %zu epochs on the GPU\n", r.eval.metric,
                r.eval.value, r.epochs.size());
    return learned ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("consumer (cuda): %s\n", e.what());
    return 1;
  }
}
