// Scalars of every width, in an order that needs alignment padding: a char
// then a double (which lands on offset 8), then a bool, a short and a 64-bit
// integer; plus a struct with padding in the middle and at the end. Each
// value is written out widened to 64 bits.
#include "ptxspec.cuh"

struct Padded {
  int a;
  char b;
  int c;
  char d;
};

PTXSPEC_SPECIALIZATION_ID(char_id, signed char, -5);
PTXSPEC_SPECIALIZATION_ID(double_id, double, 2.5);
PTXSPEC_SPECIALIZATION_ID(bool_id, bool, true);
PTXSPEC_SPECIALIZATION_ID(short_id, short, -300);
PTXSPEC_SPECIALIZATION_ID(u64_id, unsigned long long, 0x123456789abcdef0ull);
PTXSPEC_SPECIALIZATION_ID(padded_id, Padded, Padded{7, 'x', -9, 'y'});

extern "C" __global__ void scalars(long long *out, ptxspec::kernel_handler h) {
  out[0] = h.get_specialization_constant<char_id>();
  out[1] = __double_as_longlong(h.get_specialization_constant<double_id>());
  out[2] = h.get_specialization_constant<bool_id>() ? 1 : 0;
  out[3] = h.get_specialization_constant<short_id>();
  out[4] = (long long)h.get_specialization_constant<u64_id>();
  Padded p = h.get_specialization_constant<padded_id>();
  out[5] = p.a;
  out[6] = p.b;
  out[7] = p.c;
  out[8] = p.d;
}
