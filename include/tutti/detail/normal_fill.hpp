// SPDX-License-Identifier: Apache-2.0
/// @file detail/normal_fill.hpp
/// @brief `init_normal_pair`'s values written in a host loop, in vectors of the widest kind the
/// CPU has.
///
/// Initialising an embedding table draws one normal pair per two values: at 8.65 M learners and
/// dim 32, 143 M pairs. One pair by itself is ~70 double operations; a loop of them vectorises
/// (`init_normal_pair` has no branch and no call), but on the x86-64 baseline a vector holds two
/// doubles and its 64-bit multiply is emulated, so the baseline build gains nothing. The loop is
/// therefore also compiled for AVX2 and for AVX-512 (`target` attributes; no FMA, so every
/// product and sum is rounded as in the scalar loop) and the CPU picks one when it runs. Each
/// version computes, value by value, the same IEEE operations as `init_normal_pair`: the values
/// are the same bit for bit whichever runs (the tests compare them).
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/random.hpp>

#include <cstddef>
#include <cstdint>

#if !defined(__CUDA_ARCH__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__CUDACC__) && !defined(__NVCOMPILER)
/// 1 when `fill_normal_pairs` has versions for AVX2 and AVX-512 chosen at run time (g++).
#define TUTTI_NORMAL_FILL_DISPATCH 1
#else
#define TUTTI_NORMAL_FILL_DISPATCH 0
#endif

namespace tutti::detail {

/// The loop the vector versions run: out[2i] and out[2i + 1] = T(scale · the two values of
/// init_normal_pair(seed, first_pair + i)), i < pairs; `mixed_seed` is mix64(seed).
#define TUTTI_NORMAL_PAIRS_LOOP                                 \
  _Pragma("omp simd") for (std::size_t i = 0; i < pairs; ++i) { \
    double a, b;                                                \
    init_normal_pair_mixed(mixed_seed, first_pair + i, a, b);   \
    out[2 * i] = static_cast<T>(scale * a);                     \
    out[2 * i + 1] = static_cast<T>(scale * b);                 \
  }

/// The build's own target: one pair at a time (vectors of two doubles with an emulated 64-bit
/// multiply run slower than scalar code).
template <class T>
inline void normal_pairs_baseline(T* out, std::uint64_t mixed_seed, std::uint64_t first_pair,
                                  std::size_t pairs, double scale) {
  for (std::size_t i = 0; i < pairs; ++i) {
    double a, b;
    init_normal_pair_mixed(mixed_seed, first_pair + i, a, b);
    out[2 * i] = static_cast<T>(scale * a);
    out[2 * i + 1] = static_cast<T>(scale * b);
  }
}

#if TUTTI_NORMAL_FILL_DISPATCH
template <class T>
__attribute__((target("avx2"))) inline void normal_pairs_avx2(T* out, std::uint64_t mixed_seed,
                                                              std::uint64_t first_pair,
                                                              std::size_t pairs, double scale) {
  TUTTI_NORMAL_PAIRS_LOOP
}

template <class T>
__attribute__((target("avx512f,avx512dq,avx512vl"))) inline void normal_pairs_avx512(
    T* out, std::uint64_t mixed_seed, std::uint64_t first_pair, std::size_t pairs, double scale) {
  TUTTI_NORMAL_PAIRS_LOOP
}
#endif

#undef TUTTI_NORMAL_PAIRS_LOOP

/// Which loop this CPU runs: 2 (AVX-512), 1 (AVX2) or 0 (the build's own target).
inline int normal_fill_level() {
#if TUTTI_NORMAL_FILL_DISPATCH
  static const int level = __builtin_cpu_supports("avx512f") &&
                                   __builtin_cpu_supports("avx512dq") &&
                                   __builtin_cpu_supports("avx512vl")
                               ? 2
                               : (__builtin_cpu_supports("avx2") ? 1 : 0);
  return level;
#else
  return 0;
#endif
}

/// Host memory `out[0, 2·pairs)`: out[2i] and out[2i + 1] are `T(scale · v)` for the two values v
/// of `init_normal_pair(seed, first_pair + i)`, bit for bit. `level` (default: this CPU's best)
/// picks the loop; a level the CPU lacks is lowered to one it has.
template <class T>
inline void fill_normal_pairs(T* out, std::uint64_t seed, std::uint64_t first_pair,
                              std::size_t pairs, double scale, int level = -1) {
  const std::uint64_t mixed_seed = mix64(seed);
  const int best = normal_fill_level();
  level = level < 0 || level > best ? best : level;
#if TUTTI_NORMAL_FILL_DISPATCH
  if (level == 2) return normal_pairs_avx512(out, mixed_seed, first_pair, pairs, scale);
  if (level == 1) return normal_pairs_avx2(out, mixed_seed, first_pair, pairs, scale);
#endif
  normal_pairs_baseline(out, mixed_seed, first_pair, pairs, scale);
}

}  // namespace tutti::detail
