//! Bundle states ([`Input`], [`Object`], [`Executable`]); only their types
//! matter, and what SYCL 2020 asks of a device for each ([`BundleState`]).

/// Device code as the post-link wrote it; values can be set.
#[derive(Clone, Copy, Debug)]
pub struct Input;
/// Compiled: values are fixed.
#[derive(Clone, Copy, Debug)]
pub struct Object;
/// Linked and ready to launch.
#[derive(Clone, Copy, Debug)]
pub struct Executable;

/// One of the three states ([`Input`], [`Object`], [`Executable`]):
/// what SYCL 2020 asks of a device for a bundle in it.
pub trait BundleState: sealed::Sealed + 'static {
    /// The aspect every device needs for a bundle in this state:
    /// `online_compiler` for input, `online_linker` for object, none
    /// for executable ([`has_kernel_bundle_in`](crate::has_kernel_bundle_in)).
    const NEEDS: Option<ptxspec_core::features::Aspect>;
}
impl BundleState for Input {
    const NEEDS: Option<ptxspec_core::features::Aspect> =
        Some(ptxspec_core::features::Aspect::ONLINE_COMPILER);
}
impl BundleState for Object {
    const NEEDS: Option<ptxspec_core::features::Aspect> =
        Some(ptxspec_core::features::Aspect::ONLINE_LINKER);
}
impl BundleState for Executable {
    const NEEDS: Option<ptxspec_core::features::Aspect> = None;
}
mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Input {}
    impl Sealed for super::Object {}
    impl Sealed for super::Executable {}
}
