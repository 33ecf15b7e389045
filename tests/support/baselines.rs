//! The baselines (`kernels/bench/baselines.cu`: the kernels without
//! ptxspec, a literal's and a by-value parameter's) as the GPU bench and the
//! GPU tests fix their arguments: their PTX, their LTO-IR (NVRTC compiles
//! the source once per process), and a kernel's cubin with arguments fixed
//! through LTO. One helper for both (included by `#[path]`).

use ptxspec::arguments::{ArgumentError, FixedArguments, KernelParams};
use ptxspec_core::lto::{self, LinkRequest, LtoIr};
use ptxspec_core::toolkit::ToolkitError;

/// NVRTC's PTX of the baselines (committed, checked current by CI).
pub const PTX: &str = include_str!("../../kernels/ptx/bench/baselines.ptx");

/// The baselines compiled to LTO-IR by NVRTC here, once.
pub fn ltoir() -> Result<&'static LtoIr, ToolkitError> {
    static IR: std::sync::OnceLock<LtoIr> = std::sync::OnceLock::new();
    if let Some(ir) = IR.get() {
        return Ok(ir);
    }
    let ir = ptxspec_core::toolkit::nvrtc::compile(
        include_str!("../../kernels/bench/baselines.cu"),
        "baselines.cu",
        &[
            "-dlto".into(),
            "-rdc=true".into(),
            "-arch=compute_80".into(),
        ],
        ptxspec_core::toolkit::nvrtc::Output::LtoIr,
    )?
    .code;
    Ok(IR.get_or_init(|| LtoIr::owned(vec![("baselines.cu".into(), ir)])))
}

/// `kernel` of the baselines with `args` (parameter index, value as
/// `ptxspec specialize --arg` reads it) fixed.
pub fn fixed(kernel: &str, args: &[(usize, &str)]) -> Result<FixedArguments, ArgumentError> {
    let params = KernelParams::from_ptx(PTX, kernel)?;
    let values = args
        .iter()
        .map(|(i, v)| Ok((*i, params.value(*i, v)?)))
        .collect::<Result<Vec<_>, ArgumentError>>()?;
    FixedArguments::new(&params, values)
}

/// The cubin of `fixed` for `sm_<arch>`, linked through LTO.
pub fn lto_cubin(fixed: &FixedArguments, arch: u32) -> Result<Vec<u8>, ToolkitError> {
    let cubin = lto::cubin(&LinkRequest {
        ltoir: ltoir()?,
        ltoir_identity: ptxspec_core::digest::Digest::of(b"the baselines compiled here"),
        definitions: &[],
        arch,
        options: &[],
        toolkit: &Default::default(),
        kernel: Some(fixed.kernel()),
        arguments: Some(fixed),
    })?;
    Ok(cubin.bytes.to_vec())
}
