//! The values as definitions: a small unit that defines each external
//! device constant of an image's LTO-IR with its bytes — NVVM IR compiled
//! by libNVVM, or CUDA C++ compiled by NVRTC where libNVVM is missing —
//! and the toolkit's warm-up before a process's first background link.

use std::fmt::Write as _;

use std::sync::OnceLock;

use crate::image::Definition;
use crate::toolkit::worker::Toolkit;
use crate::toolkit::{self, ToolkitError, nvjitlink, nvrtc, nvvm};

/// Which compiler turns the definitions into LTO-IR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefinitionsCompiler {
    /// libNVVM from NVVM IR text (the default where libNVVM is found).
    Nvvm,
    /// NVRTC from CUDA C++.
    Nvrtc,
}

impl DefinitionsCompiler {
    /// libNVVM where the one that loads belongs with the linker (beside
    /// nvJitLink, or named by `PTXSPEC_NVVM`: its LTO-IR must not be newer
    /// than the linker), NVRTC otherwise.
    pub(crate) fn preferred() -> DefinitionsCompiler {
        if toolkit::nvvm_matches_linker() {
            DefinitionsCompiler::Nvvm
        } else {
            DefinitionsCompiler::Nvrtc
        }
    }
}

/// The definitions as NVVM IR: one `addrspace(1)` constant byte array per
/// symbol, of the NVVM IR version libNVVM reads (`ir_version`).
pub(crate) fn nvvm_ir(defs: &[Definition<'_>], ir_version: (i32, i32, i32, i32)) -> String {
    let mut ir = String::from(
        "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n\
         target triple = \"nvptx64-nvidia-cuda\"\n",
    );
    for d in defs {
        let _ = write!(
            ir,
            "@{} = addrspace(1) constant [{} x i8] c\"",
            d.symbol,
            d.bytes.len()
        );
        for b in d.bytes {
            let _ = write!(ir, "\\{b:02X}");
        }
        let _ = writeln!(ir, "\", align {}", d.align.max(1));
    }
    let (a, b, c, e) = ir_version;
    let _ = write!(
        ir,
        "!nvvmir.version = !{{!0}}\n!0 = !{{i32 {a}, i32 {b}, i32 {c}, i32 {e}}}\n"
    );
    ir
}

/// The definitions as CUDA C++ for NVRTC.
pub(crate) fn cuda_source(defs: &[Definition<'_>]) -> String {
    let mut src = String::new();
    for d in defs {
        let bytes: Vec<String> = d.bytes.iter().map(u8::to_string).collect();
        let _ = writeln!(
            src,
            "extern \"C\" __device__ __align__({}) const unsigned char {}[{}] = {{{}}};",
            d.align.max(1),
            d.symbol,
            d.bytes.len().max(1),
            bytes.join(",")
        );
    }
    src
}

/// Runs, once per process, what a background link runs — libNVVM
/// compiling definitions, nvJitLink linking LTO-IR (with a kernel, made by
/// NVRTC where it loads) and compiling PTX — on a one-byte program, then
/// registers the exit hook (`toolkit::exit`) after it: the libraries
/// register destructors as they load and as their code first runs, and
/// exit must run the hook (which waits for links in progress) before those.
/// Called on the program's thread that asks for background links — the
/// build of an adapting or tiered bundle, the first request of a tier or a
/// variant — before the work is handed over, never first on a background
/// thread: an exit from another thread while a background thread loaded
/// the libraries ran their destructors under it. Takes tens of
/// milliseconds, once (the trace's "toolkit warm-up" span; BENCHMARKS.md). Failures are
/// left to the links themselves to report.
pub fn warm_up() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let _span = crate::trace::span("toolkit warm-up", "link");
        let defs = [Definition {
            symbol: "ptxspec_warm_up",
            align: 1,
            bytes: &[0],
        }];
        let toolkit = Toolkit::InProcess;
        if let Ok(ir) = compile_definitions(&defs, 75, DefinitionsCompiler::preferred(), &toolkit)
        {
            // With a kernel, as an image's LTO-IR has: nvJitLink registers
            // a destructor at the first link of LTO-IR that holds one
            // (seen with `gdb` on `__cxa_atexit`: definitions alone did
            // not reach it, an empty `__global__` function did). NVRTC
            // makes it where it loads (and starts too, then).
            let kernel = nvrtc::compile(
                "extern \"C\" __global__ void ptxspec_warm_up_kernel() {}",
                "ptxspec-warm-up.cu",
                &["-rdc=true".into(), "-dlto".into(), "-arch=compute_75".into()],
                nvrtc::Output::LtoIr,
            );
            let mut inputs = vec![(nvjitlink::InputKind::LtoIr, ir.as_slice(), "warm-up")];
            if let Ok(kernel) = &kernel {
                inputs.push((nvjitlink::InputKind::LtoIr, &kernel.code, "warm-up-kernel"));
            }
            let _ = toolkit.link(
                &inputs,
                &["-arch=sm_75".into(), "-lto".into(), "-O3".into()],
            );
        }
        let ptx = ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry ptxspec_warm_up() { ret; }\n";
        let _ = toolkit.link(
            &[(nvjitlink::InputKind::Ptx, ptx.as_bytes(), "warm-up.ptx")],
            &["-arch=sm_75".into()],
        );
        toolkit::exit::register_now();
    });
}

/// The definitions compiled to LTO-IR for `compute_<arch>`.
pub fn compile_definitions(
    defs: &[Definition<'_>],
    arch: u32,
    compiler: DefinitionsCompiler,
    toolkit: &Toolkit,
) -> Result<Vec<u8>, ToolkitError> {
    match compiler {
        DefinitionsCompiler::Nvvm => {
            static VERSION: OnceLock<Result<(i32, i32, i32, i32), ToolkitError>> = OnceLock::new();
            let v = VERSION.get_or_init(nvvm::ir_version).clone()?;
            toolkit.nvvm(
                &nvvm_ir(defs, v),
                "ptxspec-definitions",
                &["-gen-lto".into(), format!("-arch=compute_{arch}")],
            )
        }
        DefinitionsCompiler::Nvrtc => toolkit
            .nvrtc(
                &cuda_source(defs),
                "ptxspec-definitions.cu",
                &[
                    "-rdc=true".into(),
                    "-dlto".into(),
                    format!("-arch=compute_{arch}"),
                ],
                nvrtc::Output::LtoIr,
            )
            .map(|c| c.code)
            .map_err(neither_definitions_compiler),
    }
}

/// NVRTC is missing and libNVVM was not usable either: say that either
/// would do, and where each is.
fn neither_definitions_compiler(e: ToolkitError) -> ToolkitError {
    let ToolkitError::Missing { mut searched, .. } = e else {
        return e;
    };
    let nvvm = match toolkit::require(toolkit::Lib::Nvvm) {
        Err(ToolkitError::Missing { searched: s, .. }) => s,
        Err(other) => vec![other.to_string()],
        Ok(()) => vec!["a libNVVM that is not nvJitLink's toolkit's (so not used)".into()],
    };
    searched.extend(nvvm);
    ToolkitError::Missing {
        library: "libNVVM or libnvrtc",
        what: "a compiler for the definitions of the values, which nvJitLink then links: \
               libNVVM of nvJitLink's toolkit, else NVRTC",
        wheel: "nvidia-cuda-nvcc-cu12 (libNVVM, the same version as nvJitLink) or nvidia-cuda-nvrtc-cu12",
        env: "PTXSPEC_NVVM or PTXSPEC_NVRTC",
        searched,
    }
}
