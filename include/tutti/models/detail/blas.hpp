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
#include <vector>

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

/// Keeps OpenBLAS's own threads out of tutti's: the host kernels of a model run on OpenMP's
/// threads, and OpenBLAS built with its own thread pool (pthreads, Debian's default) would run a
/// GEMM on as many more, competing with them for the same cores: NCF's step on 2 cores took a
/// median of 6 ms and a 95th percentile of 82 ms so, against 2.4 and 2.5 ms with one BLAS
/// thread. The first host GEMM therefore sets that pool to one thread, for the whole process
/// (OpenBLAS has no per-call setting); an OpenBLAS built on OpenMP already runs single-threaded
/// inside OpenMP's parallel regions and is left as it is, as is any other CBLAS.
inline void keep_blas_to_one_thread() {
#if defined(OPENBLAS_VERSION)
  static const bool once = [] {
    if (openblas_get_parallel() == 1) openblas_set_num_threads(1);  // 1: OpenBLAS's own pool
    return true;
  }();
  (void)once;
#endif
}

/// One CBLAS call: C = alpha·op(A)·op(B) + beta·C, row-major.
template <class T>
void gemm_call(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
               const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c,
               std::size_t ldc) {
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

/// Rows of C in one band of a host GEMM: a batch's rows are cut into bands of this many, and
/// OpenMP's threads take the bands.
inline constexpr std::size_t gemm_band_rows = 256;

/// Rows of the shared dimension k in one band of a host GEMM whose C has too few rows for row
/// bands: a weight gradient, fan-in × fan-out summed over a batch's rows.
inline constexpr std::size_t gemm_band_depth = 2048;

/// The most values of C split into depth bands: each band keeps a partial C.
inline constexpr std::size_t gemm_split_values = std::size_t{1} << 16;

/// C = alpha·op(A)·op(B) + beta·C with the shared dimension cut into bands of `gemm_band_depth`
/// (the last takes what is left): each band's product into a partial C on OpenMP's threads, then
/// the partials added in band order. The bands depend on k only.
template <class T>
void gemm_depth_bands(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                      T alpha, const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta,
                      T* c, std::size_t ldc) {
  const std::size_t bands = k / gemm_band_depth, mn = m * n;
  thread_local std::vector<T> partial;  // the calling rank's; kept between calls
  partial.resize(bands * mn);
  T* part = partial.data();
  const auto count = static_cast<std::ptrdiff_t>(bands);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t band = 0; band < count; ++band) {
    const std::size_t k0 = static_cast<std::size_t>(band) * gemm_band_depth;
    const std::size_t k1 = band + 1 == count ? k : k0 + gemm_band_depth;
    // Columns k0.. of op(A) and rows k0.. of op(B), as each is stored.
    const T* a_band = trans_a ? a + k0 * lda : a + k0;
    const T* b_band = trans_b ? b + k0 : b + k0 * ldb;
    gemm_call(trans_a, trans_b, m, n, k1 - k0, T(1), a_band, lda, b_band, ldb, T(0),
              part + static_cast<std::size_t>(band) * mn, n);
  }
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      T sum = part[i * n + j];
      for (std::size_t band = 1; band < bands; ++band) sum += part[band * mn + i * n + j];
      T& out = c[i * ldc + j];
      out = (beta == T(0) ? T(0) : beta * out) + alpha * sum;  // beta 0 ignores C, as BLAS does
    }
}

/// C = alpha·op(A)·op(B) + beta·C on the host, all matrices row-major: op(A) is m×k, op(B) k×n,
/// C m×n; `lda`, `ldb`, `ldc` are row strides of the matrices as stored. With at least two bands
/// of `gemm_band_rows` rows of C (a batch's rows), one BLAS call per band on OpenMP's threads (the
/// threads of the model's other kernels; BLAS itself on one, `keep_blas_to_one_thread`); else,
/// with at least two bands of `gemm_band_depth` in k (a weight gradient over a batch) and a C of
/// at most `gemm_split_values`, `gemm_depth_bands`; else one call. The bands depend on m and k
/// only, never on the number of threads, so neither does the result.
template <class T>
void gemm(blas_context<host_space>&, const host_space&, bool trans_a, bool trans_b, std::size_t m,
          std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda, const T* b,
          std::size_t ldb, T beta, T* c, std::size_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "tutti::detail::gemm: T must be float or double");
  if (m == 0 || n == 0) return;
  keep_blas_to_one_thread();
  const std::size_t bands = m / gemm_band_rows;
  if (bands < 2) {
    if (k / gemm_band_depth >= 2 && m * n <= gemm_split_values)
      gemm_depth_bands(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
      gemm_call(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const auto count = static_cast<std::ptrdiff_t>(bands);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t band = 0; band < count; ++band) {
    // The last band takes the rows left over.
    const std::size_t r0 = static_cast<std::size_t>(band) * gemm_band_rows;
    const std::size_t r1 = band + 1 == count ? m : r0 + gemm_band_rows;
    // Rows r0.. of op(A): rows of A, or its columns when it is transposed.
    const T* a_band = trans_a ? a + r0 : a + r0 * lda;
    gemm_call(trans_a, trans_b, r1 - r0, n, k, alpha, a_band, lda, b, ldb, beta, c + r0 * ldc, ldc);
  }
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
