// FP4MOE_HOST_DEVICE: functions that CUDA kernels call and host code (tests, weight repacks) calls too.
#pragma once

#if defined(__CUDACC__)
#define FP4MOE_HOST_DEVICE __host__ __device__
#else
#define FP4MOE_HOST_DEVICE
#endif
