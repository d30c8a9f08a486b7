// SPDX-License-Identifier: Apache-2.0
/// @file main.cpp
/// @brief A project that uses tutti: trains a small course recommender on two ranks (threads of
/// this process) and exits non-zero unless the model learned.
#include <tutti/tutti.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>

int main() {
  try {
    auto data = tutti::data::synthetic_courses({.learners = 600, .courses = 120, .seed = 3});
    auto parts = tutti::data::split(data, {.test_fraction = 0.1, .seed = 1});

    using mf = tutti::models::matrix_factorization<tutti::host_space>;
    using trainer = tutti::trainer<mf, tutti::shuffled_shards, tutti::local_ring,
                                   tutti::warmup<tutti::cosine>, tutti::adam>;

    // Adam, because the loss is the batch mean and an embedding row takes part in few samples of
    // a batch: plain SGD on such sparse rows needs a rate in the tens to move them at all.
    // Every rank checks its own result: the ranks must agree, so any one failing is a failure.
    std::atomic<int> failures{0};
    tutti::run_local(2, [&](tutti::local_ring ring) {
      const int rank = ring.rank();
      trainer t(mf({.dim = 16, .loss = tutti::loss_kind::logistic}, data.n_users(), data.n_items()),
                tutti::shuffled_shards{}, ring, tutti::warmup<tutti::cosine>{.warmup_steps = 20},
                tutti::adam{}, {.batch = 512, .epochs = 3, .base_lr = 0.02, .seed = 7});
      tutti::fit_result r = t.fit(parts.train, parts.test);

      const bool is_auc = std::strcmp(r.eval.metric, "auc") == 0;
      const bool learned = is_auc && std::isfinite(r.eval.value) && r.eval.value > 0.6;
      const bool loss_fell = r.epochs.size() >= 2 && std::isfinite(r.epochs.front().train_loss) &&
                             r.epochs.back().train_loss < r.epochs.front().train_loss;
      if (rank == 0 || !learned || !loss_fell) {
        std::printf("consumer rank %d: test %s %.4f; train loss %.4f -> %.4f over %zu epochs\n",
                    rank, r.eval.metric, r.eval.value,
                    r.epochs.empty() ? 0.0 : r.epochs.front().train_loss,
                    r.epochs.empty() ? 0.0 : r.epochs.back().train_loss, r.epochs.size());
      }
      if (!learned) {
        std::printf("consumer rank %d: FAILED: expected test auc > 0.6\n", rank);
        ++failures;
      }
      if (!loss_fell) {
        std::printf("consumer rank %d: FAILED: expected the training loss to fall\n", rank);
        ++failures;
      }
    });
    std::fflush(stdout);
    return failures.load() == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
