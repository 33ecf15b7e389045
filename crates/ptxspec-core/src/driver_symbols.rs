//! Symbols the CUDA driver resolves when it loads a module: its system calls
//! and the device runtime. Both the post-link (which must not call them
//! unresolved) and a device image's link symbols (which must not ask a
//! linker for them) need this list, so it sits below both.

/// Functions that the CUDA driver provides to every module (PTX's system
/// calls): calls of them are resolved at load time.
const DRIVER_FUNCTIONS: &[&str] = &["vprintf", "malloc", "free", "__assertfail"];

/// Whether the driver resolves calls of `name` when it loads a module: its
/// system calls and the device runtime.
pub(crate) fn is_resolved_by_driver(name: &str) -> bool {
    DRIVER_FUNCTIONS.contains(&name) || is_device_runtime(name)
}

/// Functions of CUDA's device runtime (`libcudadevrt.a`: dynamic
/// parallelism, device-side streams, grid sync), linked by the driver.
pub(crate) fn is_device_runtime(name: &str) -> bool {
    name.starts_with("cuda") || name.starts_with("__cudaCDP") || name.starts_with("__cudaCG")
}
