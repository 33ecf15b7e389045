// ptxspec.cuh: SYCL 2020 specialization constants in CUDA C++ device code.
//
// Declare a constant at namespace scope, take a ptxspec::kernel_handler as the
// kernel's LAST parameter, and read the constant through it:
//
//   PTXSPEC_SPECIALIZATION_ID(coeff_id, coeff_t, coeff_t{{...}});   // default
//   PTXSPEC_SPECIALIZATION_ID_NAMED(scale_id, "my.scale", float, 2.0f);
//
//   __global__ void k(float *out, ptxspec::kernel_handler h) {
//     coeff_t c = h.get_specialization_constant<coeff_id>();
//   }
//
// Compile to PTX with relocatable device code (NVRTC: -rdc=true -std=c++17;
// nvcc: -rdc=true --ptx; clang: -fgpu-rdc / --cuda-device-only -S), then run
// `ptxspec post-link`. The getters below are declared and never defined: the
// post-link finds their calls by name and rewrites each into loads from the
// specialization-constant buffer, or into immediates.
//
// The LTO flavour (-DPTXSPEC_LTO, with NVRTC's -dlto, `ptxspec compile --lto`)
// turns every constant into an external device constant instead,
// `extern "C" __device__ const unsigned char ptxspec_lto_<NAME>[sizeof(TYPE)]`,
// which ptxspec defines with the values when it links the kernel's LTO-IR
// (nvJitLink): the optimizer then sees the values as it sees literals. The
// PTX flavour names that symbol after the symbolic ID's NUL, so that the
// post-link's property sets serve both. NAME must then be unique among the
// constants of a program (extern "C" symbols have no namespace).
//
// Rules that keep the markup traceable:
//  * the symbolic ID is the constant's name (or the string given to _NAMED);
//    declare a constant used by several translation units in a shared header
//    so that every unit sees the same symbolic ID and default;
//  * a TYPE with a comma (a template) needs a typedef first;
//  * pass kernel_handler by value (it is one pointer) to device functions.
#pragma once

// The markup DPC++ uses: calls to these two are what the post-link rewrites.
template <typename T>
__device__ T __sycl_getScalar2020SpecConstantValue(const char *symbolic_id,
                                                   const void *default_value,
                                                   const void *buffer);
template <typename T>
__device__ T __sycl_getComposite2020SpecConstantValue(const char *symbolic_id,
                                                      const void *default_value,
                                                      const void *buffer);

namespace ptxspec {

namespace detail {
template <typename T> struct remove_cvref { using type = T; };
template <typename T> struct remove_cvref<T &> : remove_cvref<T> {};
template <typename T> struct remove_cvref<const T> : remove_cvref<T> {};
template <typename T> struct remove_cvref<volatile T> : remove_cvref<T> {};

// Scalars go through the scalar getter, everything else the composite one.
// An enum, not a static member: no storage, so nothing lands in the PTX.
template <typename T> struct is_scalar { enum : bool { value = false }; };
#define PTXSPEC_DETAIL_SCALAR(T) \
  template <> struct is_scalar<T> { enum : bool { value = true }; };
PTXSPEC_DETAIL_SCALAR(bool)
PTXSPEC_DETAIL_SCALAR(char)
PTXSPEC_DETAIL_SCALAR(signed char)
PTXSPEC_DETAIL_SCALAR(unsigned char)
PTXSPEC_DETAIL_SCALAR(short)
PTXSPEC_DETAIL_SCALAR(unsigned short)
PTXSPEC_DETAIL_SCALAR(int)
PTXSPEC_DETAIL_SCALAR(unsigned int)
PTXSPEC_DETAIL_SCALAR(long)
PTXSPEC_DETAIL_SCALAR(unsigned long)
PTXSPEC_DETAIL_SCALAR(long long)
PTXSPEC_DETAIL_SCALAR(unsigned long long)
PTXSPEC_DETAIL_SCALAR(float)
PTXSPEC_DETAIL_SCALAR(double)
#if defined(__CUDA_FP16_TYPES_EXIST__)
PTXSPEC_DETAIL_SCALAR(__half)
#endif
#undef PTXSPEC_DETAIL_SCALAR
} // namespace detail

// A fixed-size array that can be copied, like std::array (C arrays cannot be
// a specialization_id's default, since they cannot be copy-initialized).
template <typename T, unsigned N> struct array {
  T elems[N];
  __host__ __device__ constexpr T &operator[](unsigned i) { return elems[i]; }
  __host__ __device__ constexpr const T &operator[](unsigned i) const { return elems[i]; }
  __host__ __device__ static constexpr unsigned size() { return N; }
};

// SYCL 2020's vec<T, N> (N of 1, 2, 3, 4, 8, 16) as a constant's type, laid out
// as SYCL lays it out: a 3-element vector takes the room of 4, and the
// alignment is the whole size (Rust: ptxspec::SyclVec<T, N>).
template <typename T, int N> struct vec {
  static_assert(N == 1 || N == 2 || N == 3 || N == 4 || N == 8 || N == 16,
                "SYCL's vec has 1, 2, 3, 4, 8 or 16 elements");
  alignas(sizeof(T) * (N == 3 ? 4 : N)) T elems[N == 3 ? 4 : N];
  __host__ __device__ constexpr vec() : elems{} {}
  template <typename... Args>
  __host__ __device__ constexpr vec(Args... args) : elems{static_cast<T>(args)...} {
    static_assert(sizeof...(Args) == N, "a vec is made of its N elements");
  }
  __host__ __device__ constexpr T &operator[](int i) { return elems[i]; }
  __host__ __device__ constexpr const T &operator[](int i) const { return elems[i]; }
  __host__ __device__ static constexpr int size() { return N; }
};

// SYCL 2020's marray<T, N>: laid out as T[N] (Rust: ptxspec::Marray<T, N>).
template <typename T, unsigned N> struct marray {
  T elems[N];
  __host__ __device__ constexpr marray() : elems{} {}
  template <typename... Args>
  __host__ __device__ constexpr marray(Args... args) : elems{static_cast<T>(args)...} {
    static_assert(sizeof...(Args) == N, "an marray is made of its N elements");
  }
  __host__ __device__ constexpr T &operator[](unsigned i) { return elems[i]; }
  __host__ __device__ constexpr const T &operator[](unsigned i) const { return elems[i]; }
  __host__ __device__ static constexpr unsigned size() { return N; }
};

// The identity of a specialization constant: its default value, with the
// symbolic ID carried by the Tag type (see PTXSPEC_SPECIALIZATION_ID).
template <typename T, typename Tag> class specialization_id {
public:
  using value_type = T;
  using tag = Tag;
  // As SYCL 2020: the default value is T constructed from the arguments.
  template <typename... Args>
  __host__ __device__ constexpr explicit specialization_id(Args &&...args)
      : default_value(static_cast<Args &&>(args)...) {}
  specialization_id(const specialization_id &) = delete;
  specialization_id &operator=(const specialization_id &) = delete;

  // First and only member: the object's address is the default value's.
  T default_value;
};

// The kernel's last parameter: the specialization-constant buffer.
class kernel_handler {
public:
  template <auto &Id>
  __device__ typename detail::remove_cvref<decltype(Id)>::type::value_type
  get_specialization_constant() const {
    using id_type = typename detail::remove_cvref<decltype(Id)>::type;
    using T = typename id_type::value_type;
#if defined(PTXSPEC_LTO)
    // The bytes of the external constant, which the link defines.
    return *reinterpret_cast<const T *>(id_type::tag::lto_value());
#else
    if constexpr (detail::is_scalar<T>::value) {
      return __sycl_getScalar2020SpecConstantValue<T>(id_type::tag::symbolic_id(),
                                                      &Id, buffer_);
    } else {
      return __sycl_getComposite2020SpecConstantValue<T>(id_type::tag::symbolic_id(),
                                                         &Id, buffer_);
    }
#endif
  }

private:
  const void *buffer_;
};

} // namespace ptxspec

// Declares the optional features (SYCL aspects, by name: fp16, fp64,
// atomic64, ...) a kernel or device function uses, as SYCL's
// [[sycl::device_has(...)]]. Place it first in the function body: it leaves
// the comment `// ptxspec.device_has fp64, ...` in the function's PTX (an
// inline-asm comment, which nvcc, NVRTC and clang copy verbatim), where the
// post-link reads it.
#define PTXSPEC_DEVICE_HAS(...) asm volatile("// ptxspec.device_has " #__VA_ARGS__)

// Declares specialization constant NAME of type TYPE, symbolic ID "NAME",
// default TYPE(args...) (value-initialized with no args).
#define PTXSPEC_SPECIALIZATION_ID(NAME, TYPE, ...) \
  PTXSPEC_SPECIALIZATION_ID_NAMED(NAME, #NAME, TYPE, __VA_ARGS__)

// The same with an explicit symbolic ID (a string literal).
//
// The symbolic ID the getter receives is followed, after its NUL, by the
// name of the constant's LTO symbol: readers of symbolic IDs stop at the NUL
// (as DPC++'s do), and the post-link records the symbol for LTO builds.
#if defined(PTXSPEC_LTO)
#define PTXSPEC_SPECIALIZATION_ID_NAMED(NAME, SYMBOLIC_ID, TYPE, ...)          \
  extern "C" __device__ __align__(alignof(TYPE)) const unsigned char           \
      ptxspec_lto_##NAME[sizeof(TYPE)];                                        \
  struct NAME##_ptxspec_tag {                                                  \
    __host__ __device__ static constexpr const char *symbolic_id() {           \
      return SYMBOLIC_ID;                                                      \
    }                                                                          \
    __device__ static const unsigned char *lto_value() {                       \
      return ptxspec_lto_##NAME;                                               \
    }                                                                          \
  };                                                                           \
  __device__ constexpr ::ptxspec::specialization_id<TYPE, NAME##_ptxspec_tag>  \
      NAME { __VA_ARGS__ }
#else
#define PTXSPEC_SPECIALIZATION_ID_NAMED(NAME, SYMBOLIC_ID, TYPE, ...)          \
  struct NAME##_ptxspec_tag {                                                  \
    __host__ __device__ static constexpr const char *symbolic_id() {           \
      return SYMBOLIC_ID "\0ptxspec_lto_" #NAME;                               \
    }                                                                          \
  };                                                                           \
  __device__ constexpr ::ptxspec::specialization_id<TYPE, NAME##_ptxspec_tag>  \
      NAME { __VA_ARGS__ }
#endif
