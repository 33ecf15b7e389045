// The two translation units of two_tu as one, to check that separate
// compilation gives the same IDs and layout as one unit.
// examples/kernels is on the include path.
#include "two_tu_helper.cu"
#include "two_tu_kernel.cu"
