// DPC++'s SYCL 1.2.1 spec-constant design's composite: struct POD { A a[2]; int2 b; } with A = {int, float},
// read whole and written out field by field (6 words).
#include "ptxspec.cuh"

struct A {
  int x;
  float y;
};
struct POD {
  A a[2];
  int2 b;
};

PTXSPEC_SPECIALIZATION_ID(pod_id, POD, POD{{{1, 2.0f}, {2, 3.0f}}, {44, 44}});

extern "C" __global__ void pod(int *out, ptxspec::kernel_handler h) {
  POD p = h.get_specialization_constant<pod_id>();
  out[0] = p.a[0].x;
  out[1] = __float_as_int(p.a[0].y);
  out[2] = p.a[1].x;
  out[3] = __float_as_int(p.a[1].y);
  out[4] = p.b.x;
  out[5] = p.b.y;
}
