// FP4MOE_CUDA_CHECK: every CUDA runtime call is checked; a failure throws fp4moe::Error naming the
// call, the file and line, and CUDA's error string. Usable from .cpp and .cu files.
#pragma once
#include <cuda_runtime_api.h>

#include "common/error.h"

#define FP4MOE_CUDA_CHECK(call)                                                                        \
  do {                                                                                                 \
    cudaError_t fp4moe_cuda_status_ = (call);                                                          \
    if (fp4moe_cuda_status_ != cudaSuccess)                                                            \
      ::fp4moe::fail("CUDA error in ", #call, " at ", __FILE__, ":", __LINE__, ": ",                   \
                     cudaGetErrorName(fp4moe_cuda_status_), ": ", cudaGetErrorString(fp4moe_cuda_status_)); \
  } while (0)

// After a kernel launch: catches launch-configuration errors (not asynchronous faults).
#define FP4MOE_CUDA_CHECK_LAUNCH() FP4MOE_CUDA_CHECK(cudaGetLastError())
