// ptxspec.cuh: SYCL 2020 specialization constants in CUDA C++ device code.
//
// Declare a constant as SYCL does — at namespace scope (any namespace, the
// unnamed one included; `static`, `inline` or neither) or as a static member
// of a struct or struct template — take a ptxspec::kernel_handler as the
// kernel's LAST parameter, and read the constant through it:
//
//   inline constexpr ptxspec::specialization_id<float> scale{2.0f};
//   namespace a { constexpr ptxspec::specialization_id<int> sc{1}; }
//   struct S { static constexpr ptxspec::specialization_id<int> sc{3}; };
//   PTXSPEC_SPECIALIZATION_ID_NAMED(bs_id, "block.size", int, 16);
//
//   __global__ void k(float *out, ptxspec::kernel_handler h) {
//     float s = h.get_specialization_constant<scale>();
//   }
//
// Each C++ entity is its own constant. Its symbolic ID — the name the Rust
// side uses (SpecId::new("a::sc")) — is the entity's qualified name,
// demangled ("scale", "a::sc", "S::sc", "TS<int>::sc", "same<float>",
// "(anonymous namespace)::sc"), or the string given to _NAMED. A constant of
// internal linkage (`static`, `constexpr` without `inline`, the unnamed
// namespace) whose name a constant of another translation unit also has is
// "NAME@UNIT", UNIT being its PTX file's stem. A constant used by several
// translation units is declared `inline constexpr` in a shared header (as
// SYCL advises), so that it is one entity.
//
// Compile to PTX with relocatable device code (NVRTC: -rdc=true -std=c++17;
// nvcc: -rdc=true --ptx; clang: -fgpu-rdc / --cuda-device-only -S), then run
// `ptxspec post-link`. The getters below are declared and never defined: the
// post-link finds their calls by name and rewrites each into loads from the
// specialization-constant buffer, or into immediates. Their first argument
// is the markup "EXPLICIT_ID\0ptxspec:entity\0PRETTY\0" (readers of
// symbolic IDs stop at the first NUL, as DPC++'s do; the post-link reads the
// rest), PRETTY being __PRETTY_FUNCTION__ of detail::entity<Id, T>. The
// default's address is that of detail::default_of<Id>, whose mangled name
// says which entity the constant is.
//
// The LTO flavour (-DPTXSPEC_LTO, with NVRTC's -dlto, `ptxspec compile --lto`)
// reads every constant from an external device constant instead,
// ptxspec::detail::lto_slot<KEY, SIZE, ALIGN>, which ptxspec defines with the
// values when it links the kernel's LTO-IR (nvJitLink): the optimizer then
// sees the values as it sees literals. KEY is the 64-bit FNV-1a hash of the
// explicit ID, or of PRETTY without one; integers keep the symbol external
// even for a constant in the unnamed namespace. Compile both flavours with
// the same compiler, which prints PRETTY.
//
// Rules that keep the markup traceable:
//  * a TYPE with a comma (a template) needs a typedef first in the macros;
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

__host__ __device__ constexpr unsigned length(const char *s) {
  unsigned n = 0;
  while (s[n] != 0) ++n;
  return n;
}

// 64-bit FNV-1a; the post-link computes the same (lto_slot's key).
__host__ __device__ constexpr unsigned long long fnv1a64(const char *s) {
  unsigned long long h = 14695981039346656037ull;
  for (; *s != 0; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}

// The constant's C++ entity as the compiler prints it: "... [with Id = a::sc,
// T = int]" (EDG), "... [Id = a::sc, T = int]" (clang). EDG leaves out a
// variable template's arguments (`same<int>` prints as `same`): T tells
// apart the specializations of one variable template by their types.
template <auto &Id, typename T> __host__ __device__ constexpr const char *entity() {
  return __PRETTY_FUNCTION__;
}

// Functions, not static data members: NVRTC would write those into the PTX.
template <typename Tag> struct explicit_id {
  __host__ __device__ static constexpr const char *get() { return Tag::symbolic_id(); }
};
template <> struct explicit_id<void> {
  __host__ __device__ static constexpr const char *get() { return ""; }
};

template <auto &Id> using id_type = typename remove_cvref<decltype(Id)>::type;

template <unsigned N> struct text {
  char bytes[N];
};

template <auto &Id> __host__ __device__ constexpr const char *entity_of() {
  return entity<Id, typename id_type<Id>::value_type>();
}

// The getter's first argument (see the top of this file) and its parts.
__host__ __device__ constexpr const char *markup_marker() { return "ptxspec:entity"; }
template <auto &Id> __host__ __device__ constexpr const char *explicit_id_of() {
  return explicit_id<typename id_type<Id>::tag>::get();
}
template <auto &Id> __host__ __device__ constexpr unsigned long long lto_key() {
  return fnv1a64(explicit_id_of<Id>()[0] != 0 ? explicit_id_of<Id>() : entity_of<Id>());
}
template <auto &Id> struct markup {
  // An enum, not a static member: no storage in the PTX.
  enum : unsigned {
    size = length(explicit_id_of<Id>()) + length(markup_marker()) + length(entity_of<Id>()) + 3
  };
  __host__ __device__ static constexpr void append(text<size> &t, unsigned &n, const char *s) {
    while (*s != 0) t.bytes[n++] = *s++;
    t.bytes[n++] = 0;
  }
  __host__ __device__ static constexpr text<size> make() {
    text<size> t{};
    unsigned n = 0;
    append(t, n, explicit_id_of<Id>());
    append(t, n, markup_marker());
    append(t, n, entity_of<Id>());
    return t;
  }
};

#if defined(PTXSPEC_LTO)
// Defined by ptxspec's LTO link with the constant's value.
template <unsigned long long Key, unsigned Size, unsigned Align>
extern __device__ __align__(Align) const unsigned char lto_slot[Size];
#else
template <auto &Id> __device__ constexpr text<markup<Id>::size> markup_of = markup<Id>::make();
// The default in device memory (the specialization_id itself may be a host
// variable, which device code cannot take the address of).
template <auto &Id>
__device__ constexpr typename id_type<Id>::value_type default_of = Id.default_value;
#endif
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

// The identity of a specialization constant: its default value (SYCL
// 2020's specialization_id). Tag, when not void, gives an explicit symbolic
// ID (see PTXSPEC_SPECIALIZATION_ID_NAMED).
template <typename T, typename Tag = void> class specialization_id {
public:
  using value_type = T;
  using tag = Tag;
  // As SYCL 2020: the default value is T constructed from the arguments.
  template <typename... Args>
  __host__ __device__ constexpr explicit specialization_id(Args &&...args)
      : default_value(static_cast<Args &&>(args)...) {}
  specialization_id(const specialization_id &) = delete;
  specialization_id &operator=(const specialization_id &) = delete;

  T default_value;
};

// The kernel's last parameter: the specialization-constant buffer.
class kernel_handler {
public:
  template <auto &Id>
  __device__ typename detail::id_type<Id>::value_type get_specialization_constant() const {
    using T = typename detail::id_type<Id>::value_type;
#if defined(PTXSPEC_LTO)
    // The bytes of the external constant, which the link defines.
    return *reinterpret_cast<const T *>(
        detail::lto_slot<detail::lto_key<Id>(), sizeof(T), alignof(T)>);
#else
    if constexpr (detail::is_scalar<T>::value) {
      return __sycl_getScalar2020SpecConstantValue<T>(detail::markup_of<Id>.bytes,
                                                      &detail::default_of<Id>, buffer_);
    } else {
      return __sycl_getComposite2020SpecConstantValue<T>(detail::markup_of<Id>.bytes,
                                                         &detail::default_of<Id>, buffer_);
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

// Declares specialization constant NAME of type TYPE, default TYPE(args...)
// (value-initialized with no args), at namespace scope: `inline constexpr`,
// so that a shared header declares one constant for every unit.
#define PTXSPEC_SPECIALIZATION_ID(NAME, TYPE, ...)                            \
  inline constexpr ::ptxspec::specialization_id<TYPE> NAME { __VA_ARGS__ }

// The same with an explicit symbolic ID (a string literal): constants of
// several translation units with the same explicit ID are one constant.
#define PTXSPEC_SPECIALIZATION_ID_NAMED(NAME, SYMBOLIC_ID, TYPE, ...)          \
  struct NAME##_ptxspec_tag {                                                  \
    __host__ __device__ static constexpr const char *symbolic_id() {           \
      return SYMBOLIC_ID;                                                      \
    }                                                                          \
  };                                                                           \
  inline constexpr ::ptxspec::specialization_id<TYPE, NAME##_ptxspec_tag> NAME \
  { __VA_ARGS__ }
