// SPDX-License-Identifier: Apache-2.0
/// @file blas.cpp
/// @brief tutti::blas: checks neural_cf's gradient (its dense layers run through the CBLAS) on the
/// host against finite differences, as a user checks a model before training it.
#include <tutti/gradient_check.hpp>
#include <tutti/models/neural_cf.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <vector>

int main() {
  try {
    using ncf = tutti::models::neural_cf<tutti::host_space, double>;
    ncf model({.gmf_dim = 4, .layers = {8, 4}, .l2 = 0.f, .loss = tutti::loss_kind::logistic}, 6,
              5);
    std::vector<double> params(model.layout().total());
    // A seed whose ReLU pre-activations all sit away from the kink at 0: across the kink a
    // finite difference disagrees with any correct gradient (about one seed in ten at this
    // size, where the embeddings start at a standard deviation of 0.01).
    model.initialize(std::span<double>(params), 12);
    const std::vector<std::int32_t> users = {0, 1, 2, 5, 5, 3}, items = {4, 0, 2, 1, 3, 3};
    const std::vector<float> labels = {1.f, 0.f, 1.f, 1.f, 0.f, 1.f};
    const std::vector<float> weights(users.size(), 1.f);
    const tutti::batch_view batch{users, items, labels, weights};
    const auto r = tutti::check_gradient(model, std::span<const double>(params), batch);
    std::printf("consumer (blas): %s\n", r.describe().c_str());
    return r.passed() ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("consumer (blas): %s\n", e.what());
    return 1;
  }
}
