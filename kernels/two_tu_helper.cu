// Translation unit 2 of 2: a device function reading the shared constants.
#include "two_tu.cuh"

__device__ float scale_and_offset(float x, ptxspec::kernel_handler h) {
  return x * h.get_specialization_constant<scale_id>() +
         (float)h.get_specialization_constant<offset_id>();
}
