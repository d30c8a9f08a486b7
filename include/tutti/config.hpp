// SPDX-License-Identifier: Apache-2.0
/// @file config.hpp
/// @brief Portability macros: host/device annotations, version, backend detection.
#pragma once

#define TUTTI_VERSION_MAJOR 0
#define TUTTI_VERSION_MINOR 1
#define TUTTI_VERSION_PATCH 0

#if defined(__CUDACC__)
/// Marks a function (usually a functor's call operator) callable on host and device.
#define TUTTI_HOST_DEVICE __host__ __device__
/// Defined to 1 when the translation unit is compiled by nvcc and `tutti::cuda_space` exists.
#define TUTTI_HAS_CUDA 1
#else
#define TUTTI_HOST_DEVICE
#endif

// Thrust's default device system is CUDA; a g++ translation unit has to pick OpenMP before the
// first Thrust header or those headers fail deep inside. The CMake target sets it for C++
// sources; say so plainly when someone compiles without the target.
#if !defined(__CUDACC__) && !defined(THRUST_DEVICE_SYSTEM)
#error \
    "tutti: compile host translation units with -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP (linking the CMake target tutti::tutti does this for you)"
#endif
