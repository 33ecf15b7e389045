//! `gpu_bench --transformer` (issue 55.4): transformer-shaped kernels of our
//! own (`kernels/bench/transformer.cu`: layer norm, causal softmax over rows,
//! the attention's permute, the embedding, the residual, GELU, a bias's
//! gradient) with GPT-2 small's sizes (B 8, T 1024, C 768, 12 heads of 64),
//! each measured as
//!
//! * **generic**: its LTO-IR linked by nvJitLink with nothing fixed (the
//!   baseline of every ratio), and its PTX as NVRTC wrote it, JIT-compiled;
//! * **fixed through LTO** and **fixed through PTX**: every by-value
//!   argument fixed to its value (`ptxspec::arguments`);
//! * **literal**: the source compiled with the sizes as literals;
//! * **through a bundle**: the same kernels compiled from source with
//!   LTO-IR, launched through ptxspec without adaptation, and with
//!   `AdaptiveArguments::all()` once its trial decided (the guard: the
//!   variant kept where faster, else the generic code) —
//!
//! kernel time by CUDA events (median of 7 × 20 launches, the variants in
//! turns over three rounds, the median round), each output compared byte
//! for byte with the generic kernel's.

use super::*;
use ptxspec::arguments::{FixedArguments, KernelParams};
use ptxspec_core::lto::{self as core_lto, LinkRequest, LtoIr};
use ptxspec_core::toolkit::nvrtc::{self, Output};

const SOURCE: &str = include_str!("../../kernels/bench/transformer.cu");
const B: usize = 8;
const T: usize = 1024;
const C: usize = 768;
const NH: usize = 12;
const HS: usize = 64;
const VOCAB: usize = 50257;

/// A kernel parameter's argument.
#[derive(Clone, Copy)]
enum Param {
    /// The case's buffer of this index.
    Buffer(usize),
    I32(i32),
    F32(f32),
}

/// Device memory of a case.
enum Memory {
    F32(DeviceBuffer<f32>),
    I32(DeviceBuffer<i32>),
}

impl Memory {
    fn arg(&self) -> Arg<'_> {
        match self {
            Memory::F32(b) => Arg::buffer(b),
            Memory::I32(b) => Arg::buffer(b),
        }
    }

    fn address(&self) -> u64 {
        match self {
            Memory::F32(b) => ptr(b),
            Memory::I32(b) => ptr(b),
        }
    }

    fn bytes(&self, q: &Queue) -> R<Vec<u8>> {
        Ok(match self {
            Memory::F32(b) => bytemuck::cast_slice(&q.download(b)?).to_vec(),
            Memory::I32(b) => bytemuck::cast_slice(&q.download(b)?).to_vec(),
        })
    }
}

/// One kernel as the bench runs it.
struct Case {
    label: String,
    kernel: &'static str,
    cfg: LaunchConfig,
    memory: Vec<Memory>,
    params: Vec<Param>,
    /// The buffer whose bytes each variant's launches leave (the output).
    output: usize,
}

impl Case {
    fn args(&self) -> Vec<Arg<'_>> {
        self.params
            .iter()
            .map(|p| match *p {
                Param::Buffer(i) => self.memory[i].arg(),
                Param::I32(v) => Arg::value(v),
                Param::F32(v) => Arg::value(v),
            })
            .collect()
    }

    /// A launch of `f` (a kernel of a module loaded in the queue's context).
    fn raw(&self, q: &Queue, f: &CudaFunction) -> R<()> {
        let mut words: Vec<u64> = self
            .params
            .iter()
            .map(|p| match *p {
                Param::Buffer(i) => self.memory[i].address(),
                Param::I32(v) => v as u32 as u64,
                Param::F32(v) => v.to_bits() as u64,
            })
            .collect();
        // Each pointer is to a little-endian word whose first bytes are the
        // parameter's value (4 or 8 bytes, as the kernel declares it).
        let mut pointers: Vec<*mut std::ffi::c_void> = words
            .iter_mut()
            .map(|w| w as *mut u64 as *mut std::ffi::c_void)
            .collect();
        raw_launch(q, f, self.cfg, &mut pointers)
    }

    fn through(&self, q: &Queue, exe: &KernelBundle<Executable>) -> R<()> {
        let args = self.args();
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch(self.kernel, self.cfg, &args)
        })?;
        Ok(())
    }

    /// The by-value arguments, as (parameter index, value text) for
    /// `KernelParams::value`.
    fn values(&self) -> Vec<(usize, String)> {
        self.params
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match *p {
                Param::Buffer(_) => None,
                Param::I32(v) => Some((i, v.to_string())),
                Param::F32(v) => Some((i, format!("{v:?}"))),
            })
            .collect()
    }
}

/// Pseudo-random floats in [-1, 1), the same in every run.
fn floats(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn cases(q: &Queue) -> R<Vec<Case>> {
    let f = |n: usize, seed: u64| -> R<Memory> { Ok(Memory::F32(q.upload(&floats(n, seed))?)) };
    let zeros = |n: usize| -> R<Memory> { Ok(Memory::F32(q.alloc_zeros(n)?)) };
    let blocks = |n: usize, per: usize| n.div_ceil(per) as u32;
    let (bt, i) = (B * T, |v: usize| Param::I32(v as i32));
    let rows = B * NH * T;
    let tokens: Vec<i32> = floats(bt, 9)
        .iter()
        .map(|x| ((x + 1.0) * 0.5 * (VOCAB - 1) as f32) as i32)
        .collect();
    use Param::Buffer as Buf;
    Ok(vec![
        Case {
            label: format!("layer norm forward (B·T {bt}, C {C})"),
            kernel: "layernorm_forward",
            cfg: LaunchConfig::new((blocks(bt, 8), 1, 1), (256, 1, 1)),
            memory: vec![
                zeros(bt * C)?,
                zeros(bt)?,
                zeros(bt)?,
                f(bt * C, 1)?,
                f(C, 2)?,
                f(C, 3)?,
            ],
            params: vec![Buf(0), Buf(1), Buf(2), Buf(3), Buf(4), Buf(5), i(bt), i(C)],
            output: 0,
        },
        Case {
            label: format!("causal softmax (B·NH·T {rows} rows of {T})"),
            kernel: "softmax_forward",
            cfg: LaunchConfig::new((blocks(rows, 8), 1, 1), (256, 1, 1)),
            memory: vec![zeros(rows * T)?, f(rows * T, 4)?],
            params: vec![
                Buf(0),
                Buf(1),
                i(rows),
                i(T),
                Param::F32(1.0 / (HS as f32).sqrt()),
            ],
            output: 0,
        },
        Case {
            label: format!("attention permute (B {B}, T {T}, NH {NH}, HS {HS})"),
            kernel: "attention_permute",
            cfg: LaunchConfig::new((blocks(bt * C, 256), 1, 1), (256, 1, 1)),
            memory: vec![
                zeros(bt * C)?,
                zeros(bt * C)?,
                zeros(bt * C)?,
                f(bt * 3 * C, 5)?,
            ],
            params: vec![Buf(0), Buf(1), Buf(2), Buf(3), i(B), i(T), i(NH), i(HS)],
            output: 2,
        },
        Case {
            label: format!("embedding (B {B}, T {T}, C {C}, vocabulary {VOCAB})"),
            kernel: "encoder_forward",
            cfg: LaunchConfig::new((blocks(bt * C, 256), 1, 1), (256, 1, 1)),
            memory: vec![
                zeros(bt * C)?,
                Memory::I32(q.upload(&tokens)?),
                f(VOCAB * C, 6)?,
                f(T * C, 7)?,
            ],
            params: vec![Buf(0), Buf(1), Buf(2), Buf(3), i(B), i(T), i(C)],
            output: 0,
        },
        Case {
            label: format!("residual (B·T·C {})", bt * C),
            kernel: "residual_forward",
            cfg: LaunchConfig::new((blocks(bt * C, 256), 1, 1), (256, 1, 1)),
            memory: vec![zeros(bt * C)?, f(bt * C, 8)?, f(bt * C, 10)?],
            params: vec![Buf(0), Buf(1), Buf(2), i(bt * C)],
            output: 0,
        },
        Case {
            label: format!("GELU (B·T·4C {})", bt * 4 * C),
            kernel: "gelu_forward",
            cfg: LaunchConfig::new((blocks(bt * 4 * C, 256), 1, 1), (256, 1, 1)),
            memory: vec![zeros(bt * 4 * C)?, f(bt * 4 * C, 11)?],
            params: vec![Buf(0), Buf(1), i(bt * 4 * C)],
            output: 0,
        },
        Case {
            label: format!("bias gradient (B·T {bt}, OC {})", 3 * C),
            kernel: "bias_backward",
            cfg: LaunchConfig::new(((3 * C) as u32, 1, 1), (512, 1, 1)),
            memory: vec![zeros(3 * C)?, f(bt * 3 * C, 12)?],
            params: vec![Buf(0), Buf(1), i(bt), i(3 * C)],
            output: 0,
        },
    ])
}

/// NVRTC's output of the source for `compute_<arch>` with `extra` options.
fn compiled(arch: u32, extra: &[&str], output: Output) -> R<Vec<u8>> {
    let mut options = vec![format!("-arch=compute_{arch}")];
    options.extend(extra.iter().map(|o| o.to_string()));
    Ok(nvrtc::compile(SOURCE, "transformer.cu", &options, output)?.code)
}

fn module_of_ptx(q: &Queue, ptx: &str) -> R<Arc<CudaModule>> {
    Ok(q.context().load_module(cudarc::nvrtc::Ptx::from_src(ptx))?)
}

fn module_of_cubin(q: &Queue, cubin: Vec<u8>) -> R<Arc<CudaModule>> {
    Ok(q.context()
        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?)
}

/// How many launches the adapting bundle took to decide, and whether it
/// kept a variant.
struct Decided {
    launches: u32,
    kept: bool,
}

fn decide(q: &Queue, case: &Case, adaptive: &KernelBundle<Executable>) -> R<Decided> {
    let before = ptxspec::stats();
    let started = Instant::now();
    let mut launches = 0;
    loop {
        let s = ptxspec::stats();
        if s.adapted_variants > before.adapted_variants
            || s.variants_not_faster > before.variants_not_faster
        {
            return Ok(Decided {
                launches,
                kept: s.adapted_variants > before.adapted_variants,
            });
        }
        let why = s
            .not_adapted
            .iter()
            .zip(before.not_adapted.iter())
            .find(|(now, then)| now.1 > then.1)
            .map(|(now, _)| now.0);
        if let Some(why) = why {
            return Err(format!("{}: not adapted ({why:?})", case.kernel).into());
        }
        if started.elapsed().as_secs() > 60 {
            return Err(format!(
                "{}: no verdict within 60 s ({launches} launches)",
                case.kernel
            )
            .into());
        }
        case.through(q, adaptive)?;
        launches += 1;
        if launches % 64 == 0 {
            q.wait()?;
        }
    }
}

pub fn transformer(
    q: &Queue,
    notes: &mut String,
    rows: &mut Vec<String>,
    figures: &mut Figures,
) -> R<()> {
    use ptxspec::bundle::AdaptiveArguments;
    let (major, minor) = q.device().compute_capability;
    let arch = (major * 10 + minor) as u32;
    let ptx = String::from_utf8(compiled(arch, &[], Output::Ptx)?)?;
    let literal_ptx = String::from_utf8(compiled(arch, &["-DLITERAL"], Output::Ptx)?)?;
    let ltoir = LtoIr::owned(vec![(
        "transformer.cu".into(),
        compiled(arch, &["-dlto", "-rdc=true"], Output::LtoIr)?,
    )]);
    let link = |fixed: Option<&FixedArguments>| -> R<Vec<u8>> {
        Ok(core_lto::cubin(&LinkRequest {
            ltoir: &ltoir,
            ltoir_identity: ptxspec_core::digest::Digest::of(SOURCE.as_bytes()),
            definitions: &[],
            arch,
            options: &[],
            toolkit: &Default::default(),
            kernel: fixed.map(|f| f.kernel()),
            arguments: fixed,
        })?
        .bytes
        .to_vec())
    };
    let generic_lto = module_of_cubin(q, link(None)?)?;
    let generic_ptx = module_of_ptx(q, &ptx)?;
    let literal = module_of_ptx(q, &literal_ptx)?;
    let input = ptxspec::kernel_bundle_from_source(
        &[("transformer.cu", SOURCE)],
        &ptxspec::SourceOptions::default().with_lto(true),
    )?;
    let bundle = build(&input)?;
    let adaptive = build(&input.with_adaptive_arguments(AdaptiveArguments::all()))?;
    let _ = writeln!(
        notes,
        "transformer kernels (GPT-2 small: B {B}, T {T}, C {C}, {NH} heads of {HS}), kernel time × the generic \
         kernel (LTO, nothing fixed):"
    );
    let mut products: Vec<(String, f64, usize)> = Vec::new();
    for case in cases(q)? {
        let params = KernelParams::from_ptx(&ptx, case.kernel)?;
        let values = case
            .values()
            .iter()
            .map(|(i, v)| Ok((*i, params.value(*i, v)?)))
            .collect::<Result<Vec<_>, ptxspec::arguments::ArgumentError>>()?;
        let fixed = FixedArguments::new(&params, values)?;
        let fixed_lto = match fixed.check_lto() {
            Ok(()) => Some(module_of_cubin(q, link(Some(&fixed))?)?),
            Err(_) => None,
        };
        let fixed_ptx = module_of_ptx(q, &fixed.in_ptx(&ptx)?)?;
        let decided = decide(q, &case, &adaptive)?;
        type Launch<'a> = Box<dyn Fn() -> R<()> + 'a>;
        let raw = |m: &Arc<CudaModule>| -> R<Launch<'_>> {
            let f = m.load_function(case.kernel)?;
            let case = &case;
            Ok(Box::new(move || case.raw(q, &f)))
        };
        let mut variants: Vec<(&str, Launch)> = vec![
            ("generic (LTO)", raw(&generic_lto)?),
            ("generic (PTX, JIT)", raw(&generic_ptx)?),
            ("literal", raw(&literal)?),
        ];
        if let Some(m) = &fixed_lto {
            variants.push(("fixed through LTO", raw(m)?));
        }
        variants.push(("fixed through PTX", raw(&fixed_ptx)?));
        variants.push((
            "bundle, not adapting",
            Box::new(|| case.through(q, &bundle)),
        ));
        variants.push((
            "bundle, adapted (guarded)",
            Box::new(|| case.through(q, &adaptive)),
        ));
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        let mut identical = vec![true; variants.len()];
        let mut reference: Option<Vec<u8>> = None;
        for _round in 0..3 {
            for (at, (_, launch)) in variants.iter().enumerate() {
                times[at].push(time_ms(q, launch)?);
                let out = case.memory[case.output].bytes(q)?;
                match &reference {
                    None => reference = Some(out),
                    Some(r) => identical[at] &= *r == out,
                }
            }
        }
        let ms: Vec<f64> = times.into_iter().map(median).collect();
        let base = ms[0];
        let mut line = format!("  {}:", case.label);
        for (at, (name, _)) in variants.iter().enumerate() {
            let ratio = ms[at] / base;
            rows.push(format!(
                "{{\"kernel\":{:?},\"variant\":{name:?},\"ms\":{:.5},\"ratio\":{ratio:.5},\"baseline\":\"generic (LTO)\"}}",
                case.label, ms[at]
            ));
            let _ = write!(
                line,
                " {name} {ratio:.3}{}",
                if identical[at] {
                    ""
                } else {
                    " (output differs)"
                }
            );
            match products.iter_mut().find(|p| p.0 == *name) {
                Some(p) => {
                    p.1 += ratio.ln();
                    p.2 += 1;
                }
                None => products.push((name.to_string(), ratio.ln(), 1)),
            }
        }
        let adapted = ms[variants.len() - 1] / ms[variants.len() - 2];
        let _ = writeln!(
            notes,
            "{line}; the adapting bundle {} after {} launches: × {adapted:.3} of the same bundle not adapting ({:.4} \
             ms generic)",
            if decided.kept {
                "kept a variant"
            } else {
                "kept the generic code"
            },
            decided.launches,
            base
        );
        figures.add(
            "transformer kernels: the adapting bundle's verdict",
            &case.label,
            &[
                ("adapted_x_not_adapting", adapted),
                ("kept_a_variant", if decided.kept { 1.0 } else { 0.0 }),
                ("launches_to_verdict", decided.launches as f64),
                (
                    "outputs_identical",
                    if identical.iter().all(|&i| i) {
                        1.0
                    } else {
                        0.0
                    },
                ),
            ],
        );
    }
    let geomeans: Vec<(String, f64)> = products
        .iter()
        .map(|(name, sum, n)| (name.clone(), (sum / *n as f64).exp()))
        .collect();
    let named: Vec<(&str, f64)> = geomeans.iter().map(|(n, g)| (n.as_str(), *g)).collect();
    figures.add(
        "transformer kernels: geomean × the generic kernel",
        "all seven",
        &named,
    );
    let _ = writeln!(
        notes,
        "  geomean × generic: {}",
        geomeans
            .iter()
            .map(|(n, g)| format!("{n} {g:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
