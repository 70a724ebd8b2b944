// The float transcendentals of the official numerics, one definition for the CPU twins and the CUDA
// kernels (backend/cuda/cpu_math.cuh): evaluated in double and rounded once to float, which is the
// correctly rounded float except when the double lands within a double ulp or two of a float rounding
// boundary (~2^-28 of inputs). glibc's float functions are not correctly rounded: on glibc 2.36 expf
// differs from this in 6.3e-4 of uniform inputs in [-8, 0], sinf in 1.3% of [0, 800], log1pf in 7% of
// [0, 8] (2026-12-06). The exact kernel tier reproduces these functions, so CPU twins that called expf rounded
// a few mHC Sinkhorn coefficients and attention weights a float ulp away from the GPU.
#pragma once
#include <math.h>

#include "core/host_device.h"

namespace dsv4 {

DSV4_HOST_DEVICE inline float exp_f32(float x) { return float(::exp(double(x))); }
DSV4_HOST_DEVICE inline float log1p_f32(float x) { return float(::log1p(double(x))); }
DSV4_HOST_DEVICE inline float sin_f32(float x) { return float(::sin(double(x))); }
DSV4_HOST_DEVICE inline float cos_f32(float x) { return float(::cos(double(x))); }

}  // namespace dsv4
