// SPDX-License-Identifier: Apache-2.0
// The run-time choice every command that trains makes the same way: which model `--model` names.
// `tutti train` and `tutti study` each pick a model through `with_model`, so a new model is added
// once; they launch their host ranks with the library's `tutti::run_host_ranks`.
#pragma once

#include "names.hpp"

#include <tutti/error.hpp>
#include <tutti/metrics.hpp>
#include <tutti/models/logistic_regression.hpp>
#include <tutti/models/matrix_factorization.hpp>
#if TUTTI_HAS_BLAS
#include <tutti/models/neural_cf.hpp>
#endif

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tutti::cli {

/// A model as the command line describes it.
struct model_settings {
  model_choice name = model_choice::mf;
  int dim = 32;                                    // mf: embedding dimension
  std::size_t gmf_dim = 32;                        // ncf: the GMF branch's dimension
  std::vector<std::size_t> layers = {64, 32, 16};  // ncf: widths of the MLP's dense layers
  float l2 = 0.03f;
};

/// Whether this build can train `name` (neural_cf needs a CBLAS).
inline bool model_available(model_choice name) {
#if TUTTI_HAS_BLAS
  (void)name;
  return true;
#else
  return name != model_choice::ncf;
#endif
}

/// Calls `use(make)` with `make(space, label_mean)` building one rank's model `m` on `Space` for
/// `users` x `items` with `loss`; with the squared loss the model's bias starts at the training
/// labels' mean. `command` names the caller in the error of a model this build lacks.
template <class Space, class Use>
void with_model(const model_settings& m, std::int32_t users, std::int32_t items, loss_kind loss,
                [[maybe_unused]] const char* command, Use&& use) {
  const auto bias = [loss](float mean) {
    return loss == loss_kind::squared ? mean : 0.f;
  };
  if (m.name == model_choice::mf) {
    use([=](const Space& space, float mean) {
      return models::matrix_factorization<Space>(
          {.dim = m.dim, .l2 = m.l2, .loss = loss, .global_bias_init = bias(mean)}, users, items,
          space);
    });
  } else if (m.name == model_choice::ncf) {
#if TUTTI_HAS_BLAS
    use([=](const Space& space, float mean) {
      return models::neural_cf<Space>({.gmf_dim = m.gmf_dim,
                                       .layers = m.layers,
                                       .l2 = m.l2,
                                       .loss = loss,
                                       .output_bias_init = bias(mean)},
                                      users, items, space);
    });
#else
    tutti::detail::throw_invalid(command,
                                 "--model ncf: this tutti was built without a CBLAS; expected a "
                                 "build that found one (Debian's libopenblas-dev)");
#endif
  } else {
    use([=](const Space& space, float) {
      return models::logistic_regression<Space>({.l2 = m.l2, .loss = loss}, users, items, space);
    });
  }
}

}  // namespace tutti::cli
