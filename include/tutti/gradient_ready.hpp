// SPDX-License-Identifier: Apache-2.0
/// @file gradient_ready.hpp
/// @brief `tutti::gradient_ready`: how a model tells the trainer, during backward, which parts
/// of the gradient arena are final, so their reduction can start while the rest is computed.
#pragma once

#include <tutti/batch.hpp>

#include <cstddef>
#include <span>
#include <type_traits>

namespace tutti {

/// A non-owning callback `ready(offset, count)`: the gradient values [offset, offset + count)
/// of the arena are final for this call of `loss_and_gradient` and will not be written again
/// in it. A default-constructed one does nothing.
///
/// The contract for a model that takes one (see docs/trainer.md#overlapped-reduction):
/// - every reported range lies inside one segment, and the ranges of one call never overlap;
/// - a model need not report everything (the trainer reduces what was not reported once the
///   call returns), but what it reports it must not touch again in that call;
/// - reporting from the end of the arena towards its start, as backward naturally runs (output
///   layer first, embeddings last), lets the trainer start reducing earliest; it reduces buckets
///   in that order and waits for a bucket's every value before sending it.
///
/// The callback runs on the calling thread, before the call returns.
class gradient_ready {
 public:
  /// A callback that does nothing.
  gradient_ready() = default;
  /// Calls `f(offset, count)`; `f` must outlive this object.
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, gradient_ready>) explicit gradient_ready(
      F& f) noexcept
      : m_context(static_cast<void*>(&f)),
        m_call([](void* c, std::size_t o, std::size_t n) { (*static_cast<F*>(c))(o, n); }) {}

  /// Reports [offset, offset + count) final; nothing for count 0.
  void operator()(std::size_t offset, std::size_t count) const {
    if (m_call != nullptr && count > 0) m_call(m_context, offset, count);
  }
  /// True when reports go somewhere.
  explicit operator bool() const noexcept { return m_call != nullptr; }

 private:
  void* m_context = nullptr;
  void (*m_call)(void*, std::size_t, std::size_t) = nullptr;
};

/// A model whose `loss_and_gradient` can report final gradient ranges as it goes (a sixth
/// argument, `tutti::gradient_ready`); the trainer's overlapped reduction uses it. A model
/// without it still overlaps nothing but trains the same.
template <class M>
concept reports_gradient_ready = requires(M& m, std::span<const typename M::value_type> p,
                                          const batch_view& b, std::span<typename M::value_type> g,
                                          typename M::value_type scale,
                                          typename M::value_type* loss_sum, gradient_ready ready) {
  m.loss_and_gradient(p, b, g, scale, loss_sum, ready);
};

}  // namespace tutti
