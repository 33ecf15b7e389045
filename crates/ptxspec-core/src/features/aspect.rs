//! SYCL aspects by the numbers of DPC++'s `enum class aspect`
//! (sycl/info/aspects.def), so that property files agree with DPC++'s.

/// An aspect: its number in `enum class aspect`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Aspect(pub u32);

/// Names and numbers, as in DPC++ (deprecated ones included so that old
/// files still read).
const NAMES: &[(&str, u32)] = &[
    ("host", 0),
    ("cpu", 1),
    ("gpu", 2),
    ("accelerator", 3),
    ("custom", 4),
    ("fp16", 5),
    ("fp64", 6),
    ("int64_base_atomics", 7),
    ("int64_extended_atomics", 8),
    ("image", 9),
    ("online_compiler", 10),
    ("online_linker", 11),
    ("queue_profiling", 12),
    ("usm_device_allocations", 13),
    ("usm_host_allocations", 14),
    ("usm_shared_allocations", 15),
    ("usm_restricted_shared_allocations", 16),
    ("usm_system_allocations", 17),
    ("usm_atomic_host_allocations", 26),
    ("usm_atomic_shared_allocations", 27),
    ("atomic64", 28),
    ("ext_oneapi_native_assert", 31),
    ("ext_oneapi_cuda_async_barrier", 34),
    ("ext_oneapi_bfloat16_math_functions", 35),
];

impl Aspect {
    /// `aspect::gpu`.
    pub const GPU: Aspect = Aspect(2);
    /// `aspect::online_compiler`: device code can be compiled at run time
    /// (here: NVRTC loads).
    pub const ONLINE_COMPILER: Aspect = Aspect(10);
    /// `aspect::online_linker`: device code can be linked at run time
    /// (here: nvJitLink loads).
    pub const ONLINE_LINKER: Aspect = Aspect(11);
    /// `aspect::fp16`: half-precision arithmetic.
    pub const FP16: Aspect = Aspect(5);
    /// `aspect::fp64`: double-precision arithmetic.
    pub const FP64: Aspect = Aspect(6);
    /// `aspect::usm_device_allocations`.
    pub const USM_DEVICE_ALLOCATIONS: Aspect = Aspect(13);
    /// `aspect::usm_host_allocations`.
    pub const USM_HOST_ALLOCATIONS: Aspect = Aspect(14);
    /// `aspect::usm_shared_allocations`.
    pub const USM_SHARED_ALLOCATIONS: Aspect = Aspect(15);
    /// `aspect::atomic64`: 64-bit atomic operations.
    pub const ATOMIC64: Aspect = Aspect(28);
    /// `aspect::ext_oneapi_cuda_async_barrier`: CUDA's asynchronous barriers (sm_80 and later).
    pub const CUDA_ASYNC_BARRIER: Aspect = Aspect(34);
    /// `aspect::ext_oneapi_bfloat16_math_functions`: bfloat16 arithmetic.
    pub const BF16_MATH: Aspect = Aspect(35);

    /// By name (`fp16`, `aspect::fp16`) or number (`5`).
    pub fn parse(s: &str) -> Option<Aspect> {
        let s = s.trim();
        let s = s.strip_prefix("aspect::").unwrap_or(s);
        if let Ok(n) = s.parse::<u32>() {
            return Some(Aspect(n));
        }
        NAMES.iter().find(|(n, _)| *n == s).map(|&(_, v)| Aspect(v))
    }

    /// The name, or the number when it has none here.
    pub fn name(self) -> String {
        NAMES
            .iter()
            .find(|&&(_, v)| v == self.0)
            .map_or_else(|| self.0.to_string(), |(n, _)| n.to_string())
    }
}

impl std::fmt::Display for Aspect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "aspect::{}", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(Aspect::parse("fp16"), Some(Aspect::FP16));
        assert_eq!(Aspect::parse("aspect::fp64"), Some(Aspect::FP64));
        assert_eq!(Aspect::parse("28"), Some(Aspect::ATOMIC64));
        assert_eq!(Aspect::parse("nope"), None);
        assert_eq!(Aspect::FP16.to_string(), "aspect::fp16");
        assert_eq!(Aspect(999).name(), "999");
    }
}
