// Specialization constants that share one name in ten scopes — the global
// namespace and named and unnamed namespaces nested both ways — and in every
// form SYCL 2020 lets a specialization_id take. Each C++ entity is its own
// constant, named by its qualified name (SYCL-CTS
// specialization_constants_same_name_stress and
// specialization_constants_defined_various_ways, in ptxspec's terms).
#include "ptxspec.cuh"

// Ten variable templates named `same`, each defaulting to its scope's index,
// each read by a function of its scope (where unqualified lookup finds the
// innermost `same`: from outside, some would be ambiguous).
#define READ_SAME(FN) \
  __device__ int FN(ptxspec::kernel_handler h) { return h.get_specialization_constant<same<int>>(); }
template <typename T> constexpr ptxspec::specialization_id<T> same{T(0)};
READ_SAME(from_global)
namespace outer {
template <typename T> constexpr ptxspec::specialization_id<T> same{T(1)};
READ_SAME(from_outer)
namespace inner {
template <typename T> constexpr ptxspec::specialization_id<T> same{T(2)};
READ_SAME(from_outer_inner)
} // namespace inner
namespace {
template <typename T> constexpr ptxspec::specialization_id<T> same{T(3)};
READ_SAME(from_outer_unnamed)
namespace u_inner {
template <typename T> constexpr ptxspec::specialization_id<T> same{T(4)};
READ_SAME(from_outer_unnamed_inner)
namespace {
template <typename T> constexpr ptxspec::specialization_id<T> same{T(5)};
READ_SAME(from_outer_unnamed_inner_unnamed)
} // namespace
} // namespace u_inner
} // namespace
} // namespace outer
namespace {
template <typename T> constexpr ptxspec::specialization_id<T> same{T(6)};
READ_SAME(from_unnamed)
namespace u_outer {
template <typename T> constexpr ptxspec::specialization_id<T> same{T(7)};
READ_SAME(from_unnamed_outer)
namespace {
template <typename T> constexpr ptxspec::specialization_id<T> same{T(8)};
READ_SAME(from_unnamed_outer_unnamed)
namespace u_inner {
template <typename T> constexpr ptxspec::specialization_id<T> same{T(9)};
READ_SAME(from_unnamed_outer_unnamed_inner)
} // namespace u_inner
} // namespace
} // namespace u_outer
} // namespace
#undef READ_SAME

// Out[i] is the constant of scope i.
__global__ void same_name_stress(int *out, ptxspec::kernel_handler h) {
  out[0] = from_global(h);
  out[1] = outer::from_outer(h);
  out[2] = outer::inner::from_outer_inner(h);
  out[3] = outer::from_outer_unnamed(h);
  out[4] = outer::u_inner::from_outer_unnamed_inner(h);
  out[5] = outer::u_inner::from_outer_unnamed_inner_unnamed(h);
  out[6] = from_unnamed(h);
  out[7] = u_outer::from_unnamed_outer(h);
  out[8] = u_outer::from_unnamed_outer_unnamed(h);
  out[9] = u_outer::u_inner::from_unnamed_outer_unnamed_inner(h);
  // Another instantiation of the global template is another constant.
  out[10] = static_cast<int>(h.get_specialization_constant<::same<float>>());
}

// Every form a specialization_id may be declared in.
constexpr ptxspec::specialization_id<int> plain_form{10};
static constexpr ptxspec::specialization_id<int> static_form{11};
inline constexpr ptxspec::specialization_id<int> inline_form{12};
struct member_holder {
  static constexpr ptxspec::specialization_id<int> member_form{13};
};
template <typename T> struct template_holder {
  static constexpr ptxspec::specialization_id<T> member_form{T(14)};
};
PTXSPEC_SPECIALIZATION_ID(macro_form, int, 15);
PTXSPEC_SPECIALIZATION_ID_NAMED(named_form, "same_name.named", int, 16);

__global__ void defined_various_ways(int *out, ptxspec::kernel_handler h) {
  out[0] = h.get_specialization_constant<plain_form>();
  out[1] = h.get_specialization_constant<static_form>();
  out[2] = h.get_specialization_constant<inline_form>();
  out[3] = h.get_specialization_constant<member_holder::member_form>();
  out[4] = h.get_specialization_constant<template_holder<int>::member_form>();
  out[5] = h.get_specialization_constant<macro_form>();
  out[6] = h.get_specialization_constant<named_form>();
}

// A constant of internal linkage whose name same_name_other.cu's has too
// (SYCL-CTS specialization_constants_same_name_internal_linkage).
namespace {
constexpr ptxspec::specialization_id<int> per_unit{20};
}
__global__ void per_unit_here(int *out, ptxspec::kernel_handler h) {
  out[0] = h.get_specialization_constant<per_unit>();
}
