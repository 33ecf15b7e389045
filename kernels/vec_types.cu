// SYCL 2020's vec and marray as constants' types (intel sycl/test-e2e/
// SpecConstants/2020/marray_vec.cpp; SYCL-CTS specialization_constants with
// vec of every length): the kernel copies each value into `out`, one value
// per 128 bytes, so that the host compares them byte for byte.
#include "ptxspec.cuh"

typedef ptxspec::vec<float, 3> float3_t;
typedef ptxspec::marray<float, 3> mfloat3_t;
typedef ptxspec::vec<int, 1> int1_t;
typedef ptxspec::vec<short, 2> short2_t;
typedef ptxspec::vec<double, 4> double4_t;
typedef ptxspec::vec<unsigned char, 8> uchar8_t;
typedef ptxspec::vec<int, 16> int16_t_;
typedef ptxspec::vec<double, 16> double16_t;
typedef ptxspec::marray<char, 5> mchar5_t;

PTXSPEC_SPECIALIZATION_ID(vec_f3_id, float3_t, 1.f, 2.f, 3.f);
PTXSPEC_SPECIALIZATION_ID(marray_f3_id, mfloat3_t, 1.f, 2.f, 3.f);
PTXSPEC_SPECIALIZATION_ID(vec_i1_id, int1_t, -7);
PTXSPEC_SPECIALIZATION_ID(vec_s2_id, short2_t, -1, 2);
PTXSPEC_SPECIALIZATION_ID(vec_d4_id, double4_t, 0.5, 1.5, 2.5, 3.5);
PTXSPEC_SPECIALIZATION_ID(vec_u8_id, uchar8_t, 1, 2, 3, 4, 5, 6, 7, 250);
PTXSPEC_SPECIALIZATION_ID(vec_i16_id, int16_t_, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, -15);
PTXSPEC_SPECIALIZATION_ID(vec_d16_id, double16_t, 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15., 16.);
PTXSPEC_SPECIALIZATION_ID(marray_c5_id, mchar5_t, 'a', 'b', 'c', 'd', 'e');

template <typename T> __device__ void put(unsigned char *out, int slot, const T &v) {
  *reinterpret_cast<T *>(out + 128 * slot) = v;
}

extern "C" __global__ void vec_types(unsigned char *out, ptxspec::kernel_handler h) {
  put(out, 0, h.get_specialization_constant<vec_f3_id>());
  put(out, 1, h.get_specialization_constant<marray_f3_id>());
  put(out, 2, h.get_specialization_constant<vec_i1_id>());
  put(out, 3, h.get_specialization_constant<vec_s2_id>());
  put(out, 4, h.get_specialization_constant<vec_d4_id>());
  put(out, 5, h.get_specialization_constant<vec_u8_id>());
  put(out, 6, h.get_specialization_constant<vec_i16_id>());
  put(out, 7, h.get_specialization_constant<vec_d16_id>());
  put(out, 8, h.get_specialization_constant<marray_c5_id>());
}
