// SPDX-License-Identifier: Apache-2.0
/// @file trainer/step_kernels.hpp
/// @brief The element functors of the trainer's step, for host and device spaces alike: the
/// batch gather, the finite check and the skip guard's commit and restore, the replica checksum.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/finite.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/trainer/negatives.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace tutti::detail {

/// One training row as the step reads it: the three values side by side, so a slot's gather
/// reads one line of a large dataset, not one line in each of three arrays.
struct sample_record {
  std::int32_t user;
  std::int32_t item;
  float label;
};

/// One training row of a set whose rows all have the same label (a log of positives): the
/// learner and the course, 8 bytes; the label is one number for all.
struct sample_pair {
  std::int32_t user;
  std::int32_t item;
};

/// The training rows the step gathers from: the trainer's copy, one record a row (one pair a row
/// where every row has the same label, `label`: a log of positives); or, on a host space with
/// `train_options::rows_in_place`, the caller's arrays where they are, with no label array where
/// every row has the same label.
struct sample_rows {
  const sample_record* records = nullptr;
  const sample_pair* pairs = nullptr;
  const std::int32_t* users = nullptr;
  const std::int32_t* items = nullptr;
  const float* labels = nullptr;
  float label = 0.f;
  TUTTI_HOST_DEVICE sample_record operator[](std::uint64_t pos) const {
    if (records != nullptr) return records[pos];
    if (pairs != nullptr) {
      const sample_pair p = pairs[pos];
      return {p.user, p.item, label};
    }
    return {users[pos], items[pos], labels != nullptr ? labels[pos] : label};
  }
  /// Asks for row `pos`'s values ahead of their use (the host's gather).
  void prefetch(std::uint64_t pos) const {
    if (records != nullptr) {
      prefetch_bytes(records + pos, sizeof *records);
      return;
    }
    if (pairs != nullptr) {
      prefetch_bytes(pairs + pos, sizeof *pairs);
      return;
    }
    prefetch_bytes(users + pos, sizeof *users);
    prefetch_bytes(items + pos, sizeof *items);
    if (labels != nullptr) prefetch_bytes(labels + pos, sizeof *labels);
  }
};

/// True when every value of `v` has the first one's bits (or `v` is empty).
inline bool all_equal(std::span<const float> v) {
  if (v.empty()) return true;
  std::uint32_t first;
  std::memcpy(&first, v.data(), sizeof first);
  return std::all_of(v.begin(), v.end(), [first](float x) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return bits == first;
  });
}

template <class T>
struct gather_batch_fn {
  const std::uint64_t* slots;  // dataset positions of this step's slots
  const float* slot_weights;   // their weights, or null: slots [0, real) weigh 1, the rest 0
  sample_rows rows;
  std::int32_t* out_users;
  std::int32_t* out_items;
  float* out_labels;
  float* out_weights;
  std::size_t n = 0;     // slots: the host asks for slot i + prefetch_ahead's values while at i
  std::size_t real = 0;  // where `slot_weights` is null: the real slots, which lead
  TUTTI_HOST_DEVICE float weight(std::size_t i) const {
    return slot_weights != nullptr ? slot_weights[i] : (i < real ? 1.0f : 0.0f);
  }
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
#if !defined(__CUDA_ARCH__)
    if (i + prefetch_ahead < n) {
      rows.prefetch(slots[i + prefetch_ahead]);
    }
#endif
    const sample_record r = rows[slots[i]];
    out_users[i] = r.user;
    out_items[i] = r.item;
    out_labels[i] = r.label;
    out_weights[i] = weight(i);
  }
};

/// `gather_batch_fn` at the step's first slot, read from the space's memory: a step replayed from
/// a graph gathers the current step's slots.
template <class T>
struct gather_batch_at_fn {
  gather_batch_fn<T> base;     // from the step's first slot
  const std::uint64_t* first;  // the step's first slot
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    gather_batch_fn<T> f = base;
    f.slots += *first;
    if (f.slot_weights != nullptr)
      f.slot_weights += *first;
    else
      f.real = f.real > *first ? f.real - static_cast<std::size_t>(*first) : 0;
    f(i);
  }
};

/// The batch gather with negatives: slot i's positive goes to out[i·(1 + K)] as `gather_batch_fn`
/// writes it, and its K negatives (label 0, the positive's weight, so a padded slot's are padding
/// too) to the K places after it. The epoch's key is read from the space's memory (a replayed
/// step draws the current epoch's negatives).
template <class T, class Offset = std::uint64_t>
struct gather_with_negatives_fn {
  gather_batch_fn<T> base;     // writes n·(1 + K) values
  const std::uint64_t* first;  // the step's first slot in the space's memory, or null (0)
  const std::uint64_t* epoch_key;
  negative_draw<Offset> draw;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t from = first != nullptr ? static_cast<std::size_t>(*first) : 0;
    const std::uint64_t pos = base.slots[from + i];
    const sample_record r = base.rows[pos];
    const float w = base.weight(from + i);
    const std::size_t k1 = std::size_t(draw.per_positive) + 1;
    const std::size_t o = i * k1;
    base.out_users[o] = r.user;
    base.out_items[o] = r.item;
    base.out_labels[o] = r.label;
    base.out_weights[o] = w;
    const std::uint64_t key = *epoch_key;
    for (std::uint32_t k = 0; k < draw.per_positive; ++k) {
      base.out_users[o + 1 + k] = r.user;
      // A padded slot's negatives are never read; its ids stay valid all the same.
      base.out_items[o + 1 + k] = w != 0.f ? draw(key, r.user, pos, k) : r.item;
      base.out_labels[o + 1 + k] = 0.f;
      base.out_weights[o + 1 + k] = w;
    }
  }
};

struct bit_or_fn {
  TUTTI_HOST_DEVICE unsigned operator()(unsigned a, unsigned b) const { return a | b; }
};

/// Host: 1 when block b (of `host_block` values) of g[0, n) holds an infinity or a NaN.
struct nonfinite_block_fn {
  const float* g;
  std::size_t n;
  unsigned operator()(std::size_t b) const {
    std::size_t i = b * host_block;
    const std::size_t hi = i + host_block < n ? i + host_block : n;
    unsigned bad = 0;
#if TUTTI_HOST_SIMD && !(defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
    // x * 0 is NaN for an infinity or a NaN and ±0 otherwise, so a sum of them is NaN exactly
    // when a value was not finite: vectorised arithmetic at any optimisation level (a build
    // that assumes finite math could fold it away, and takes the loop over the bits below).
    host_floats acc(0.f);
    const host_floats zero(0.f);
    for (; i + host_floats::size() <= hi; i += host_floats::size())
      acc += host_floats(g + i, stdx::element_aligned) * zero;
    for (std::size_t k = 0; k < host_floats::size(); ++k) bad |= finite_value(acc[k]) ? 0u : 1u;
#endif
    for (; i < hi; ++i) bad |= finite_value(g[i]) ? 0u : 1u;
    return bad;
  }
};

/// Host: true when g[0, n) holds an infinity or a NaN.
template <execution_space Space>
bool any_nonfinite(const Space& space, const float* g, std::size_t n) {
  return reduce_blocks(space, n, nonfinite_block_fn{g, n}, 0u, bit_or_fn{}) != 0u;
}

// The device-side finite check: every thread that sees a non-finite value stores the same 1, so
// the racing stores agree and no reduction (or host read) is needed.
struct finite_check_fn {
  const float* g;
  std::size_t n;
  const float* loss;
  float* flag;       // this rank's trailing float of the gradient arena
  float* local_log;  // this rank's flag of this step, kept past the reduction
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    bool bad = i < n && !finite_value(g[i]);
    if (i == 0 && !finite_value(*loss)) bad = true;
    if (bad) {
      *flag = 1.f;
      *local_log = 1.f;
    }
  }
};

// After the reduction: logs the OR-ed flag, and adds the step's loss and weight to the epoch's
// sums only when the step is applied. One thread.
struct guard_commit_fn {
  const float* flag;   // the reduced flag: > 0 on every rank iff some rank was non-finite
  float* global_log;   // this step's entry
  float* sticky;       // set once any step of the epoch was non-finite
  bool sticky_skips;   // stop policy on a device space: every step after the first bad is skipped
  float* step_loss;    // this rank's loss of the step; zeroed for the next one
  double* sums;        // [loss, weight] of the epoch's applied steps
  double step_weight;  // this rank's sample weight in the step
  TUTTI_HOST_DEVICE void operator()(std::size_t) const {
    const bool bad = !(*flag == 0.f);
    *global_log = bad ? 1.f : 0.f;
    if (bad) *sticky = 1.f;
    const bool skip = sticky_skips ? *sticky != 0.f : bad;
    if (!skip) {
      sums[0] += double(*step_loss);
      sums[1] += step_weight;
    }
    *step_loss = 0.f;
  }
};

// The guard's commit on a device space: as `guard_commit_fn` on the step's flags, which sit at a
// fixed place, then logs both at the step's entry, read from the space's memory (a step
// replayed from a graph logs where the current step belongs), and clears this rank's flag.
struct guard_commit_logged_fn {
  guard_commit_fn commit;      // global_log: the reduced flag of the step in progress
  float* local_now;            // this rank's flag of the step in progress
  float* local_log;            // the epoch's logs, one entry per step
  float* global_log;           //
  const std::uint64_t* entry;  // the step's index in the epoch
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    commit(i);
    local_log[*entry] = *local_now;
    global_log[*entry] = *commit.global_log;
    *local_now = 0.f;
  }
};

// Undoes an optimizer step on a device space when the step is to be skipped: the host cannot
// read the flag without synchronising, so the update runs and is reverted from a snapshot.
struct guard_restore_fn {
  const float* skip;
  float* params;
  const float* params_before;
  std::size_t n_params;
  float* state;
  const float* state_before;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    if (*skip == 0.f) return;
    if (i < n_params)
      params[i] = params_before[i];
    else
      state[i - n_params] = state_before[i - n_params];
  }
};

// Order-free 64-bit checksum of parameters then optimizer state: a sum of per-element hashes of
// (bits, index), each injective in the bits, so any single changed value changes the sum.
struct replica_hash_fn {
  const float* params;
  std::size_t n_params;
  const float* state;
  TUTTI_HOST_DEVICE std::uint64_t operator()(std::size_t i) const {
    const float v = i < n_params ? params[i] : state[i - n_params];
    return mix64(std::uint64_t(float_bits(v)) ^ (std::uint64_t(i) * 0x9e3779b97f4a7c15ULL));
  }
};

struct sum_u64_fn {
  TUTTI_HOST_DEVICE std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const {
    return a + b;
  }
};

}  // namespace tutti::detail
