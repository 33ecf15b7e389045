// The other translation unit of same_name.cu's internal-linkage case: a
// constant of the same name in the unnamed namespace is another entity, so
// another constant ("(anonymous namespace)::per_unit@same_name_other").
#include "ptxspec.cuh"

namespace {
constexpr ptxspec::specialization_id<int> per_unit{21};
}
__global__ void per_unit_there(int *out, ptxspec::kernel_handler h) {
  out[0] = h.get_specialization_constant<per_unit>();
}
