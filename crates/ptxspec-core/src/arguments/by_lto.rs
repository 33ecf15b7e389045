//! The LTO way: a generated NVVM IR kernel calls the kernel with the
//! literals; nvJitLink links it with the image's LTO-IR keeping only that
//! wrapper (NVVM inlines the kernel and optimizes with the values known),
//! and the wrapper's PTX is renamed to the kernel's name and parameters.

use std::fmt::Write as _;

use super::{ArgumentError, FixedArguments, HANDLER, ParamKind, TAG};
use crate::ptx::{self, ItemKind};

impl FixedArguments {
    /// Whether the LTO way serves this kernel: each of its parameters
    /// passes through the wrapper ([`ParamKind::passes_through_lto`]: every
    /// scalar and pointer, an empty tag, no other aggregate; and its
    /// `kernel_handler`, named by [`with_handler`](Self::with_handler)); a
    /// kernel that takes another aggregate by value has its arguments fixed
    /// the PTX way.
    pub fn check_lto(&self) -> Result<(), ArgumentError> {
        let refused = self
            .params
            .params
            .iter()
            .enumerate()
            .find(|(i, p)| !p.passes_through_lto() && self.handler != Some(*i));
        match refused {
            Some((index, p)) => Err(ArgumentError::Link {
                kernel: self.kernel().into(),
                why: format!(
                    "parameter {index} is {} passed by value: NVVM IR takes it as the kernel's own struct \
                     type, which PTX does not record (only its size and alignment), and NVVM does not \
                     inline a call through another type into the wrapper that fixes the arguments (an \
                     empty tag, of one byte, is the one aggregate it can name): fix them the PTX way \
                     (--via ptx)",
                    p.describe()
                ),
            }),
            None => Ok(()),
        }
    }

    /// The wrapper kernel's name: one no program has, tied to the kernel.
    pub(crate) fn wrapper_name(&self) -> String {
        format!("ptxspec_fixed_arguments__{}", self.kernel())
    }

    /// The type of the wrapper's parameter `index`, with the attributes it
    /// carries: a pointer the kernel reads only through the non-coherent
    /// cache is `noalias readonly` (`image::read_only`: the code generator
    /// picks those loads by the kernel's own parameters, and once the
    /// kernel is inlined the wrapper's are those).
    pub(crate) fn formal_type(&self, index: usize) -> String {
        match self.params.read_only(index) {
            true => format!("{} noalias readonly", self.param_type(index)),
            false => self.param_type(index),
        }
    }

    /// The NVVM IR type of parameter `index`, as the kernel's LTO-IR
    /// declares it: its handler ptxspec's class, any other by what it
    /// holds.
    fn param_type(&self, index: usize) -> String {
        match self.params.params.get(index) {
            _ if self.handler == Some(index) => HANDLER.into(),
            Some(p) => p.nvvm_type(),
            None => String::new(),
        }
    }

    /// The wrapper as NVVM IR of version `ir_version`: a kernel with the
    /// same parameters that calls the kernel with the fixed values in
    /// place of its own, kept by `llvm.used` (nothing calls it) and given
    /// the kernel's performance directives.
    pub(crate) fn wrapper_ir(&self, ir_version: (i32, i32, i32, i32)) -> String {
        let params = &self.params.params;
        let kernel = self.kernel();
        let wrapper = self.wrapper_name();
        let types: Vec<String> = (0..params.len()).map(|i| self.param_type(i)).collect();
        let mut ir = String::from(
            "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n\
             target triple = \"nvptx64-nvidia-cuda\"\n",
        );
        let _ = writeln!(ir, "{TAG} = type {{ i8 }}");
        let _ = writeln!(ir, "{HANDLER} = type {{ i8* }}");
        let _ = writeln!(ir, "declare void @\"{kernel}\"({})", types.join(", "));
        let formals: Vec<String> = (0..params.len())
            .map(|i| format!("{} %a{i}", self.formal_type(i)))
            .collect();
        let _ = writeln!(ir, "define void @\"{wrapper}\"({}) {{", formals.join(", "));
        let mut actuals = Vec::new();
        for (i, p) in params.iter().enumerate() {
            let fixed = self.fixed.iter().find(|(j, _)| *j == i).map(|(_, b)| b);
            let actual = match (p, fixed) {
                (_, None) => format!("%a{i}"),
                // A value of the aggregate's type (a tag's one byte; no
                // other aggregate reaches here: `check_lto`).
                (ParamKind::Aggregate { .. }, Some(bytes)) => {
                    format!("{{ i8 {} }}", bytes.first().copied().unwrap_or(0))
                }
                (ParamKind::Int { .. }, Some(bytes)) => {
                    // The value sign-extended from its width: what LLVM
                    // reads for an integer of any width.
                    let mut wide = [0u8; 8];
                    wide[..bytes.len()].copy_from_slice(bytes);
                    if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                        wide[bytes.len()..].fill(0xff);
                    }
                    format!("{}", i64::from_le_bytes(wide))
                }
                (ParamKind::Float { bits: 32 }, Some(bytes)) => {
                    // NVVM IR writes a float as the double of the same value.
                    let f = f32::from_le_bytes(bytes[..4].try_into().unwrap_or([0; 4]));
                    format!("0x{:016X}", (f as f64).to_bits())
                }
                (ParamKind::Float { .. }, Some(bytes)) => {
                    format!(
                        "0x{:016X}",
                        u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]))
                    )
                }
                (ParamKind::Pointer, Some(_)) => format!("%a{i}"),
            };
            actuals.push(format!("{} {actual}", types[i]));
        }
        let _ = writeln!(ir, "  call void @\"{kernel}\"({})", actuals.join(", "));
        ir.push_str("  ret void\n}\n");
        let signature = format!("void ({})*", types.join(", "));
        let _ = writeln!(
            ir,
            "@llvm.used = appending global [1 x i8*] [i8* bitcast ({signature} @\"{wrapper}\" to i8*)], section \"llvm.metadata\""
        );
        let mut annotations = vec![format!(
            "!{{{signature} @\"{wrapper}\", !\"kernel\", i32 1}}"
        )];
        for (directive, numbers) in &self.params.perf {
            let names: &[&str] = match directive.as_str() {
                "maxntid" => &["maxntidx", "maxntidy", "maxntidz"],
                "reqntid" => &["reqntidx", "reqntidy", "reqntidz"],
                "minnctapersm" => &["minctasm"],
                "maxnreg" => &["maxnreg"],
                _ => &[],
            };
            for (name, n) in names.iter().zip(numbers) {
                annotations.push(format!(
                    "!{{{signature} @\"{wrapper}\", !\"{name}\", i32 {n}}}"
                ));
            }
        }
        let refs: Vec<String> = (0..annotations.len())
            .map(|i| format!("!{}", i + 1))
            .collect();
        let _ = writeln!(ir, "!nvvm.annotations = !{{{}}}", refs.join(", "));
        for (i, a) in annotations.iter().enumerate() {
            let _ = writeln!(ir, "!{} = {a}", i + 1);
        }
        let (a, b, c, d) = ir_version;
        let _ = writeln!(
            ir,
            "!nvvmir.version = !{{!0}}\n!0 = !{{i32 {a}, i32 {b}, i32 {c}, i32 {d}}}"
        );
        ir
    }

    /// The PTX of the linked wrapper with the wrapper named as the kernel
    /// (its parameters `KERNEL_param_N`): checked to define the wrapper and
    /// not the kernel itself (which NVVM must have inlined into it).
    pub(crate) fn renamed(&self, ptx: &str) -> Result<String, ArgumentError> {
        let wrapper = self.wrapper_name();
        let kernel = self.kernel();
        let m = ptx::parse("linked.ptx", ptx.to_string())?;
        let defines = |name: &str| {
            m.items.iter().any(|i| {
                matches!(&i.kind, ItemKind::Function(f) if f.body.is_some() && m.text(f.name) == name)
            })
        };
        let link_error = |why: &str| ArgumentError::Link {
            kernel: kernel.into(),
            why: why.into(),
        };
        if !defines(&wrapper) {
            return Err(link_error("the linked PTX lacks the wrapper kernel"));
        }
        if defines(kernel) {
            return Err(link_error(
                "NVVM did not inline the kernel into its wrapper (is it recursive, or noinline?)",
            ));
        }
        // The wrapper's name stands alone or begins its parameters' names
        // (`WRAPPER_param_0`); it is no other name's part.
        let mut out = String::with_capacity(ptx.len());
        let mut rest = ptx;
        while let Some(at) = rest.find(&wrapper) {
            out.push_str(&rest[..at]);
            out.push_str(kernel);
            rest = &rest[at + wrapper.len()..];
        }
        out.push_str(rest);
        Ok(out)
    }
}
