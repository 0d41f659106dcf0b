// FP4MOE_CUBLAS_CHECK: every cuBLAS call is checked; a failure throws fp4moe::Error naming the call,
// the file and line, and cuBLAS's status name. Used by the cuBLAS baseline backend and the benchmark.
#pragma once
#include <cublas_api.h>

#include "common/error.h"

#define FP4MOE_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                                \
    cublasStatus_t fp4moe_cublas_status_ = (call);                                                    \
    if (fp4moe_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::fp4moe::fail("cuBLAS error in ", #call, " at ", __FILE__, ":", __LINE__, ": ",                \
                     cublasGetStatusName(fp4moe_cublas_status_), " (", cublasGetStatusString(fp4moe_cublas_status_), ")"); \
  } while (0)
