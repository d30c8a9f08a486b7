// SPDX-License-Identifier: Apache-2.0
/// @file custom_model.cpp
/// @brief A model of your own: linear regression y = <w, x> + b over dense features, written
/// against the `tutti::model` concept (docs/concepts.md#model). Its gradient is checked with
/// `tutti::check_gradient` in double, then it is trained in float on data drawn from known
/// weights. Exits 1 if the gradient check fails or the trained weights miss the true ones.
#include <tutti/tutti.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <numeric>
#include <random>
#include <span>
#include <vector>

namespace {

constexpr std::size_t n_features = 4;

/// Linear regression with squared loss. A batch carries ids, not features, so the model keeps
/// the feature table (one row of `n_features` floats per sample) and an interaction's item id
/// says which row a sample is. Written on its value type `T`: `linear_regression<double>` for
/// the gradient check, `linear_regression<float>` for the trainer.
template <class T>
class linear_regression {
 public:
  using space_type = tutti::host_space;  // parameters in host memory, plain loops
  using value_type = T;

  /// `features` must outlive the model (and every copy of it the trainer makes).
  explicit linear_regression(std::span<const float> features)
      : m_weights(m_layout.add("weights", 1, n_features, tutti::segment_kind::dense)),
        m_bias(m_layout.add("bias", 1, 1, tutti::segment_kind::bias)),
        m_features(features) {}

  const space_type& space() const noexcept { return m_space; }
  const tutti::parameter_layout& layout() const noexcept { return m_layout; }
  tutti::loss_kind loss() const noexcept { return tutti::loss_kind::squared; }  // test: RMSE
  /// Where the weights and the bias sit in the parameter arena.
  const tutti::segment_handle& weights() const noexcept { return m_weights; }
  const tutti::segment_handle& bias() const noexcept { return m_bias; }

  /// Fills the whole arena (alignment padding included) from the seed alone.
  void initialize(std::span<T> params, std::uint64_t seed) const {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> draw(0.0, 0.1);
    for (T& p : params) p = T(draw(rng));
  }

  /// Adds scale·w·∂L/∂θ into `grads` and w·L into `*loss_sum` for each slot; L = (ŷ − y)².
  void loss_and_gradient(std::span<const T> params, const tutti::batch_view& batch,
                         std::span<T> grads, T scale, T* loss_sum) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const T weight = T(batch.weights[i]);
      if (weight == T(0)) continue;  // a padded slot contributes nothing
      const float* x = row(batch.items[i]);
      const T residual = score(params, x) - T(batch.labels[i]);
      const T g = scale * weight * T(2) * residual;
      for (std::size_t f = 0; f < n_features; ++f) grads[m_weights.at(0, f)] += g * T(x[f]);
      grads[m_bias.offset] += g;
      *loss_sum += weight * residual * residual;
    }
  }

  void predict(std::span<const T> params, std::span<const std::int32_t> /*users*/,
               std::span<const std::int32_t> items, std::span<T> out) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = score(params, row(items[i]));
  }

 private:
  const float* row(std::int32_t item) const {
    return m_features.data() + static_cast<std::size_t>(item) * n_features;
  }
  T score(std::span<const T> params, const float* x) const {
    T s = params[m_bias.offset];
    for (std::size_t f = 0; f < n_features; ++f) s += params[m_weights.at(0, f)] * T(x[f]);
    return s;
  }

  space_type m_space;
  tutti::parameter_layout m_layout;  // declared before the handles: it is built first
  tutti::segment_handle m_weights, m_bias;
  std::span<const float> m_features;
};

}  // namespace

int main(int /*argc*/, char** argv) {
  tutti::prefer_passive_openmp_wait(argv);
  try {
    // Synthetic data from known weights: x ~ N(0, 1), y = <w, x> + b + N(0, 0.1²).
    const float true_w[n_features] = {1.5f, -2.0f, 0.5f, 0.75f};
    const float true_b = 0.3f;
    const std::size_t n = 4000;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> features(n * n_features);
    for (float& v : features) v = normal(rng);

    // One user; sample k is item k, and its label is its target.
    tutti::data::interactions data;
    data.user_ids = {1};
    data.item_ids.resize(n);
    std::iota(data.item_ids.begin(), data.item_ids.end(), std::int64_t{0});
    for (std::size_t k = 0; k < n; ++k) {
      float y = true_b + 0.1f * normal(rng);
      for (std::size_t f = 0; f < n_features; ++f) y += true_w[f] * features[k * n_features + f];
      data.users.push_back(0);
      data.items.push_back(static_cast<std::int32_t>(k));
      data.labels.push_back(y);
    }

    // 1. The gradient check, in double, on a small batch with one padded slot (weight 0).
    {
      linear_regression<double> m(features);
      std::vector<double> params(m.layout().total());
      m.initialize(params, 1);
      const std::vector<std::int32_t> users(6, 0), items = {0, 1, 2, 3, 4, 5};
      const std::vector<float> labels(data.labels.begin(), data.labels.begin() + 6);
      const std::vector<float> weights = {1.f, 1.f, 1.f, 1.f, 1.f, 0.f};
      const tutti::batch_view batch{users, items, labels, weights};
      const tutti::gradient_check_result r =
          tutti::check_gradient(m, std::span<const double>(params), batch);
      std::printf("%s\n", r.describe().c_str());
      if (!r.passed()) return 1;
    }

    // 2. Training, in float, on one rank (tutti::single_rank; see minimal_trainer.cpp for
    // several ranks), with the default schedule (constant) and optimizer (plain SGD).
    const auto parts = tutti::data::split(data, {.test_fraction = 0.1, .seed = 1});
    using model = linear_regression<float>;
    tutti::trainer<model, tutti::shuffled_shards, tutti::single_rank> t(
        model(features), tutti::shuffled_shards{}, tutti::single_rank{}, tutti::constant{},
        tutti::sgd{}, {.batch = 128, .epochs = 3, .base_lr = 0.1, .seed = 7});
    const tutti::fit_result r = t.fit(parts.train, parts.test);
    std::printf("test %s %.4f (the noise alone: 0.1)\n", r.eval.metric, r.eval.value);

    // 3. The learned weights against the true ones. The data alone pin each weight to about
    // 0.1 / sqrt(3600) ≈ 0.002 and SGD at a constant rate adds a little: here all land within
    // 0.01, so a bar of 0.05 fails only when training is broken.
    const std::vector<float> p = t.parameters_on_host();
    bool ok = true;
    const auto compare = [&](const char* name, float learned, float truth) {
      const bool close = std::fabs(learned - truth) < 0.05f;  // false for NaN too
      std::printf("%-4s learned %8.4f, true %8.4f%s\n", name, learned, truth, close ? "" : "  FAR");
      ok = ok && close;
    };
    const char* names[n_features] = {"w0", "w1", "w2", "w3"};
    for (std::size_t f = 0; f < n_features; ++f)
      compare(names[f], p[t.model().weights().at(0, f)], true_w[f]);
    compare("b", p[t.model().bias().offset], true_b);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_model: %s\n", e.what());
    return 1;
  }
}
