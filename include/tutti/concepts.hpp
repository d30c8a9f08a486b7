// SPDX-License-Identifier: Apache-2.0
/// @file concepts.hpp
/// @brief The five policy slots of `tutti::trainer` as C++20 concepts, with readable checks and
/// named optional capabilities: one header per slot under `tutti/concepts/`.
///
/// Each concept is the conjunction of one small concept per member, so `check_*<T>()` can
/// `static_assert` them one by one and the compiler's message names the concept, the missing
/// member and the page of docs/concepts.md that shows a minimal class to copy. A member with an
/// optional capability's name must have its signature (docs/concepts.md#optional-capabilities).
#pragma once

#include <tutti/concepts/model.hpp>
#include <tutti/concepts/optimizer.hpp>
#include <tutti/concepts/reducer.hpp>
#include <tutti/concepts/sampler.hpp>
#include <tutti/concepts/schedule.hpp>
