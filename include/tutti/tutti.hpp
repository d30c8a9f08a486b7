// SPDX-License-Identifier: Apache-2.0
/// @file tutti.hpp
/// @brief The umbrella header: every public host-side header of tutti.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/checkpoint.hpp>
#include <tutti/concepts.hpp>
#include <tutti/config.hpp>
#include <tutti/data/csv.hpp>
#include <tutti/data/interactions.hpp>
#include <tutti/data/split.hpp>
#include <tutti/data/synthetic.hpp>
#include <tutti/error.hpp>
#include <tutti/gradient_check.hpp>
#include <tutti/launch.hpp>
#include <tutti/layout.hpp>
#include <tutti/metrics.hpp>
#include <tutti/models/logistic_regression.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/openmp_wait.hpp>
#include <tutti/optimizers/adam.hpp>
#include <tutti/optimizers/lamb.hpp>
#include <tutti/optimizers/lars.hpp>
#include <tutti/optimizers/lazy_adam.hpp>
#include <tutti/optimizers/row_sparse.hpp>
#include <tutti/optimizers/row_sparse_sgd.hpp>
#include <tutti/optimizers/rowwise_adagrad.hpp>
#include <tutti/optimizers/sgd.hpp>
#include <tutti/reducers/compressed.hpp>
#include <tutti/reducers/local_ring.hpp>
#include <tutti/reducers/no_op.hpp>
#include <tutti/samplers/contiguous_shards.hpp>
#include <tutti/samplers/owned_shards.hpp>
#include <tutti/samplers/shard.hpp>
#include <tutti/samplers/shuffled_shards.hpp>
#include <tutti/schedules/constant.hpp>
#include <tutti/schedules/cosine.hpp>
#include <tutti/schedules/polynomial.hpp>
#include <tutti/schedules/scaling.hpp>
#include <tutti/schedules/step.hpp>
#include <tutti/schedules/warmup.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/host.hpp>
#include <tutti/space/traits.hpp>
#include <tutti/trainer.hpp>
