// SPDX-License-Identifier: Apache-2.0
/// @file space/buffer.hpp
/// @brief `tutti::buffer<T, Space>`: an owning, space-typed array handed around as `std::span`.
#pragma once

#include <tutti/error.hpp>
#include <tutti/space/traits.hpp>

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace tutti {

/// An owning array of `T` in the memory of `Space` (RAII; move-only).
/// Elements are not initialised; use `tutti::fill` or a copy. Views are `std::span`s, which
/// kernels receive; on a space that is not host accessible they must not be dereferenced by
/// host code.
/// @tparam T a trivially copyable element type
/// @tparam Space a type modelling `tutti::execution_space`
template <class T, execution_space Space>
class buffer {
  static_assert(std::is_trivially_copyable_v<T>, "tutti::buffer<T>: T must be trivially copyable");

 public:
  using value_type = T;
  using space_type = Space;

  /// An empty buffer on a default space instance.
  buffer() = default;
  /// Allocates `n` uninitialised elements on `space`.
  explicit buffer(std::size_t n, Space space = {}) : m_space(std::move(space)), m_size(n) {
    if (n) m_data = static_cast<T*>(m_space.allocate(n * sizeof(T)));
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  buffer(buffer&& o) noexcept
      : m_space(o.m_space),
        m_data(std::exchange(o.m_data, nullptr)),
        m_size(std::exchange(o.m_size, 0)) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      release();
      m_space = o.m_space;
      m_data = std::exchange(o.m_data, nullptr);
      m_size = std::exchange(o.m_size, 0);
    }
    return *this;
  }
  ~buffer() { release(); }

  /// Number of elements.
  std::size_t size() const noexcept { return m_size; }
  /// True when the buffer holds no elements.
  bool empty() const noexcept { return m_size == 0; }
  /// Pointer to the first element (memory of `Space`).
  T* data() noexcept { return m_data; }
  /// Pointer to the first element (memory of `Space`).
  const T* data() const noexcept { return m_data; }
  /// A mutable view of the elements.
  std::span<T> span() noexcept { return {m_data, m_size}; }
  /// A read-only view of the elements.
  std::span<const T> span() const noexcept { return {m_data, m_size}; }
  /// The space instance the memory belongs to.
  const Space& space() const noexcept { return m_space; }

  /// Reallocates to `n` elements when the size differs; contents are not kept.
  void resize_discard(std::size_t n) {
    if (n == m_size) return;
    release();
    if (n) m_data = static_cast<T*>(m_space.allocate(n * sizeof(T)));
    m_size = n;
  }

 private:
  void release() noexcept {
    if (m_data) m_space.deallocate(m_data, m_size * sizeof(T));
    m_data = nullptr;
    m_size = 0;
  }

  Space m_space{};
  T* m_data = nullptr;
  std::size_t m_size = 0;
};

/// Copies host elements into a span of `space`'s memory (sizes must match).
template <execution_space Space, class T>
void copy_from_host(const Space& space, std::span<const T> from, std::span<T> to) {
  TUTTI_EXPECTS(from.size() == to.size(), "tutti::copy_from_host",
                "source has " + std::to_string(from.size()) + " elements, destination " +
                    std::to_string(to.size()) + "; expected equal sizes");
  space.copy_from_host(to.data(), from.data(), from.size_bytes());
}

/// Copies a span of `space`'s memory into host elements (sizes must match); synchronous.
template <execution_space Space, class T>
void copy_to_host(const Space& space, std::span<const T> from, std::span<T> to) {
  TUTTI_EXPECTS(from.size() == to.size(), "tutti::copy_to_host",
                "source has " + std::to_string(from.size()) + " elements, destination " +
                    std::to_string(to.size()) + "; expected equal sizes");
  space.copy_to_host(to.data(), from.data(), from.size_bytes());
}

/// Returns a host `std::vector` with a copy of a span of `space`'s memory.
template <execution_space Space, class T>
std::vector<std::remove_const_t<T>> to_host_vector(const Space& space, std::span<T> from) {
  std::vector<std::remove_const_t<T>> out(from.size());
  space.copy_to_host(out.data(), from.data(), from.size_bytes());
  return out;
}

/// Allocates a buffer on `space` holding a copy of host elements.
template <execution_space Space, class T>
buffer<T, Space> make_buffer(const Space& space, std::span<const T> from) {
  buffer<T, Space> b(from.size(), space);
  space.copy_from_host(b.data(), from.data(), from.size_bytes());
  return b;
}

namespace detail {

/// Scratch memory of a space that only grows. Copying yields an empty scratch on the same
/// space, so a model holding scratch stays copyable (each replica gets its own).
template <class T, execution_space Space>
class scratch_array {
 public:
  scratch_array() = default;
  explicit scratch_array(const Space& space) : m_buf(0, space) {}
  scratch_array(const scratch_array& o) : m_buf(0, o.m_buf.space()) {}
  scratch_array& operator=(const scratch_array& o) {
    if (this != &o) m_buf = buffer<T, Space>(0, o.m_buf.space());
    return *this;
  }
  scratch_array(scratch_array&&) noexcept = default;
  scratch_array& operator=(scratch_array&&) noexcept = default;
  ~scratch_array() = default;

  /// The memory (nullptr before the first `reserve`).
  T* data() noexcept { return m_buf.data(); }
  /// The memory (nullptr before the first `reserve`).
  const T* data() const noexcept { return m_buf.data(); }

  /// Returns room for at least `n` elements; contents are unspecified after a growth.
  T* reserve(std::size_t n) {
    // Grow only: reallocating on a device space may synchronise, so steady state must not.
    if (m_buf.size() < n) m_buf.resize_discard(n);
    return m_buf.data();
  }

 private:
  buffer<T, Space> m_buf;
};

}  // namespace detail

}  // namespace tutti
