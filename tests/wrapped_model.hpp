// SPDX-License-Identifier: Apache-2.0
// A model that forwards everything but `loss_and_gradient` to the model it wraps: the base of
// the test models that inject a fault (a NaN, a failure) into a real model's step
// (test_guards.cpp, test_sparse_exchange.cpp, test_compressed.cpp, test_overlap.cpp), and one
// that hides its touched rows.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/layout.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>

namespace tutti_test {

/// Forwards `space`, `layout`, `loss`, `initialize` and `predict` to `Inner`; a derived class
/// writes `loss_and_gradient` (calling `m_inner`'s) and whatever else it needs.
template <class Inner>
class wrapped_model {
 public:
  using space_type = typename Inner::space_type;
  using value_type = typename Inner::value_type;

  explicit wrapped_model(Inner inner) : m_inner(std::move(inner)) {}

  const space_type& space() const noexcept { return m_inner.space(); }
  const tutti::parameter_layout& layout() const noexcept { return m_inner.layout(); }
  tutti::loss_kind loss() const noexcept { return m_inner.loss(); }
  void initialize(std::span<value_type> params, std::uint64_t seed) const {
    m_inner.initialize(params, seed);
  }
  void predict(std::span<const value_type> params, std::span<const std::int32_t> users,
               std::span<const std::int32_t> items, std::span<value_type> out) const {
    m_inner.predict(params, users, items, out);
  }

 protected:
  Inner m_inner;
};

/// `Inner` that does not say which rows a step touched (no `touched_rows`): what the trainer
/// must refuse for the paths that need them (test_sparse_exchange.cpp, test_row_sparse.cpp).
template <class Inner>
class silent_model : public wrapped_model<Inner> {
 public:
  using T = typename Inner::value_type;
  explicit silent_model(Inner inner) : wrapped_model<Inner>(std::move(inner)) {}
  void loss_and_gradient(std::span<const T> params, const tutti::batch_view& batch,
                         std::span<T> grads, T scale, T* loss_sum) {
    this->m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
  }
};

/// A matrix factorisation `Inner` whose gradient turns NaN at call `poison_call`, in the first
/// row of the user table the call touched, written through the space as a kernel would
/// (test_row_sparse.cpp, test_row_step_on_space.cpp).
template <class Inner>
class poisoned_model : public wrapped_model<Inner> {
 public:
  using T = typename Inner::value_type;
  poisoned_model(Inner inner, std::size_t poison_call)
      : wrapped_model<Inner>(std::move(inner)), m_call(poison_call) {}
  void loss_and_gradient(std::span<const T> params, const tutti::batch_view& batch,
                         std::span<T> grads, T scale, T* loss_sum) {
    this->m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
    if (m_calls++ != m_call) return;
    const auto& space = this->m_inner.space();
    std::int32_t first = 0;
    space.copy_to_host(&first, this->m_inner.touched_rows_on_space(0).rows, sizeof first);
    const auto& table = this->layout()[0];
    const T nan = std::numeric_limits<T>::quiet_NaN();
    space.copy_from_host(grads.data() + table.offset + static_cast<std::size_t>(first) * table.cols,
                         &nan, sizeof nan);
  }
  bool row_sparse(std::size_t segment) const { return this->m_inner.row_sparse(segment); }
  std::span<const std::int32_t> touched_rows(std::size_t segment) const {
    return this->m_inner.touched_rows(segment);
  }
  tutti::segment_rows_on_space touched_rows_on_space(std::size_t segment) const {
    return this->m_inner.touched_rows_on_space(segment);
  }

 private:
  std::size_t m_call;
  std::size_t m_calls = 0;
};

}  // namespace tutti_test
