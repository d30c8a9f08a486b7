// SPDX-License-Identifier: Apache-2.0
/// @file models/detail/blas.hpp
/// @brief Row-major GEMM on an execution space: CBLAS (OpenBLAS) on `host_space`, cuBLAS on the
/// stream of `cuda_space` (nvcc only). Used by `tutti::models::neural_cf`.
///
/// Needs a CBLAS (link `tutti::blas`, or `-lopenblas`); the cuBLAS part needs `CUDA::cublas`.
#pragma once

#include <tutti/config.hpp>
#include <tutti/error.hpp>
#include <tutti/space/host.hpp>
#include <tutti/space/traits.hpp>

#if !__has_include(<cblas.h>)
#error \
    "tutti/models/detail/blas.hpp needs a CBLAS: install libopenblas-dev (scripts/deps.sh) and link tutti::blas"
#endif
#include <cblas.h>

#include <climits>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#if defined(__CUDACC__)
#include <tutti/space/cuda.hpp>

#include <cublas_v2.h>
#endif

namespace tutti::detail {

/// Per-model BLAS state of a space: nothing on the host, a cuBLAS handle on a CUDA space.
/// Copying yields a fresh state, so a model holding one stays copyable (one per rank).
template <execution_space Space>
class blas_context;

/// The host needs no state: CBLAS calls are stateless.
template <>
class blas_context<host_space> {
 public:
  blas_context() = default;
  explicit blas_context(const host_space&) noexcept {}
};

/// The matrix sizes BLAS receives are `int`; the models check their batch sizes against this.
inline void check_blas_size(const char* fn, std::size_t n, const char* what) {
  TUTTI_EXPECTS(n <= static_cast<std::size_t>(INT_MAX), fn,
                std::string(what) + " is " + std::to_string(n) + "; expected at most 2^31 - 1");
}

/// C = alpha·op(A)·op(B) + beta·C on the host, all matrices row-major: op(A) is m×k, op(B) k×n,
/// C m×n; `lda`, `ldb`, `ldc` are row strides of the matrices as stored.
template <class T>
void gemm(blas_context<host_space>&, const host_space&, bool trans_a, bool trans_b, std::size_t m,
          std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda, const T* b,
          std::size_t ldb, T beta, T* c, std::size_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "tutti::detail::gemm: T must be float or double");
  if (m == 0 || n == 0) return;
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, im, in, ik, alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, im, in, ik, alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace tutti::detail

#if defined(__CUDACC__)

namespace tutti {

/// A cuBLAS call failed; the message names the call, the status and where it was made.
class cublas_error : public error {
 public:
  cublas_error(cublasStatus_t status, const char* call, const char* file, int line)
      : error(std::string(call) + " failed: " + cublasGetStatusName(status) + " (" +
              cublasGetStatusString(status) + ") at " + file + ":" + std::to_string(line)),
        m_status(status) {}
  /// The cuBLAS status.
  cublasStatus_t status() const noexcept { return m_status; }

 private:
  cublasStatus_t m_status;
};

namespace detail {
inline void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw cublas_error(status, call, file, line);
}
}  // namespace detail

}  // namespace tutti

/// Calls a cuBLAS function and throws `tutti::cublas_error` (call, status name and string,
/// file:line) when it fails.
#define TUTTI_CUBLAS_CHECK(call) ::tutti::detail::cublas_check((call), #call, __FILE__, __LINE__)

namespace tutti::detail {

/// A cuBLAS handle owned by one model replica. Created on first use (creation allocates and may
/// synchronise, so a model that is only constructed or copied never pays for it) and bound to
/// the stream of the space at each call.
template <>
class blas_context<cuda_space> {
 public:
  blas_context() = default;
  explicit blas_context(const cuda_space&) noexcept {}
  blas_context(const blas_context&) noexcept {}
  blas_context& operator=(const blas_context& o) noexcept {
    if (this != &o) release();
    return *this;
  }
  blas_context(blas_context&& o) noexcept : m_handle(std::exchange(o.m_handle, nullptr)) {}
  blas_context& operator=(blas_context&& o) noexcept {
    if (this != &o) {
      release();
      m_handle = std::exchange(o.m_handle, nullptr);
    }
    return *this;
  }
  ~blas_context() { release(); }

  /// The handle, created on first use, set to enqueue on `space`'s stream.
  cublasHandle_t handle(const cuda_space& space) {
    if (m_handle == nullptr) {
      TUTTI_CUBLAS_CHECK(cublasCreate(&m_handle));
      // Parity with the host within 1e-4 needs full fp32 products: the default math mode never
      // rounds inputs to TF32; said explicitly so that no global default changes it.
      TUTTI_CUBLAS_CHECK(cublasSetMathMode(m_handle, CUBLAS_DEFAULT_MATH));
    }
    TUTTI_CUBLAS_CHECK(cublasSetStream(m_handle, space.stream()));
    return m_handle;
  }

 private:
  void release() noexcept {
    if (m_handle != nullptr) (void)cublasDestroy(m_handle);
    m_handle = nullptr;
  }
  cublasHandle_t m_handle = nullptr;
};

/// C = alpha·op(A)·op(B) + beta·C on the space's stream, all matrices row-major (see the host
/// overload). Enqueued; never synchronises.
template <class T>
void gemm(blas_context<cuda_space>& ctx, const cuda_space& space, bool trans_a, bool trans_b,
          std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "tutti::detail::gemm: T must be float or double");
  if (m == 0 || n == 0) return;
  cublasHandle_t h = ctx.handle(space);
  // cuBLAS is column-major, and a row-major matrix is its transpose in column-major: row-major
  // C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so the operands and m, n swap.
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>)
    TUTTI_CUBLAS_CHECK(cublasSgemm(h, tb, ta, in, im, ik, &alpha, b, static_cast<int>(ldb), a,
                                   static_cast<int>(lda), &beta, c, static_cast<int>(ldc)));
  else
    TUTTI_CUBLAS_CHECK(cublasDgemm(h, tb, ta, in, im, ik, &alpha, b, static_cast<int>(ldb), a,
                                   static_cast<int>(lda), &beta, c, static_cast<int>(ldc)));
}

}  // namespace tutti::detail

#endif  // __CUDACC__
