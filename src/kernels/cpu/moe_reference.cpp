// Placeholder: the CPU reference is being written (see moe_reference.h).
#include "kernels/cpu/moe_reference.h"

#include "common/error.h"
