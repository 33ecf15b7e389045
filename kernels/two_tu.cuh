// Shared by two_tu_kernel.cu and two_tu_helper.cu: the constants both units
// read (same symbolic IDs and defaults in each) and the helper's declaration.
#pragma once
#include "ptxspec.cuh"

PTXSPEC_SPECIALIZATION_ID(scale_id, float, 3.0f);
PTXSPEC_SPECIALIZATION_ID(offset_id, int, 10);

// Defined in two_tu_helper.cu; reads scale_id and offset_id.
__device__ float scale_and_offset(float x, ptxspec::kernel_handler h);
