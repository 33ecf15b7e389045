// Thread block clusters (sm_90 only), in the style of CUDA's cluster
// samples: __cluster_dims__, cluster.sync() and a neighbour block's shared
// memory; the number of rounds is a specialization constant.
#include <cooperative_groups.h>
#include "ptxspec.cuh"

namespace cg = cooperative_groups;

PTXSPEC_SPECIALIZATION_ID(rounds_id, int, 2);

extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_exchange(int *out, ptxspec::kernel_handler h) {
  __shared__ int mine;
  cg::cluster_group cluster = cg::this_cluster();
  unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0)
    mine = rank;
  cluster.sync();
  int sum = 0;
  for (int r = 0; r < h.get_specialization_constant<rounds_id>(); r++) {
    int *other = cluster.map_shared_rank(&mine, (rank + 1) % 2);
    sum += *other;
    cluster.sync();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = sum;
}
