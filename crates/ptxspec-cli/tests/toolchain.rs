//! NVIDIA's compilers and linkers, on a machine without a GPU: CUDA sources
//! compiled by NVRTC, LTO builds linked by nvJitLink whose SASS is the
//! literal's, the caches of linked cubins across processes, the device
//! runtime resolved by a link, build logs, errors when a library is missing,
//! and build_support compiling a folder.
//!
//! The test command (README.md) installs the tools from NVIDIA's wheels;
//! without them these tests fail rather than skip.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::*;
use ptxspec::image::Image;
use ptxspec::{BuildOptions, Device, KernelBundle, SpecMode};
use ptxspec_core::compile::{self, CompileOptions};
use ptxspec_core::toolkit::{self, nvjitlink, nvrtc};

/// cuobjdump from PATH (the test command installs it, with nvdisasm).
fn cuobjdump() -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("cuobjdump"))
                .find(|p| p.is_file())
        })
        .expect("cuobjdump not found: run the tests through `bash ci/test.sh`")
}

/// The SASS of `function` in `cubin`.
fn sass(cubin: &[u8], function: &str) -> String {
    let dir = tempdir("sass");
    let path = dir.join("k.cubin");
    std::fs::write(&path, cubin).unwrap();
    let out = Command::new(cuobjdump())
        .args(["-sass", "-fun", function])
        .arg(&path)
        .output()
        .expect("run cuobjdump");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("FADD") || text.contains("FFMA") || text.contains("EXIT"),
        "no SASS for {function}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// How many instructions of `opcode` (as a word) the SASS has.
fn count(sass: &str, opcode: &str) -> usize {
    sass.lines()
        .filter(|l| {
            l.split_whitespace()
                .any(|w| w == opcode || w.starts_with(&format!("{opcode}.")))
        })
        .count()
}

/// Instructions in the SASS (lines ending in `;`).
fn instructions(sass: &str) -> usize {
    sass.lines()
        .filter(|l| l.contains(" ;") || l.trim_end().ends_with(';'))
        .count()
}

/// The baselines (literal kernels) compiled to a cubin for sm_90.
fn literal_cubin() -> Vec<u8> {
    let src = std::fs::read_to_string(kernels_dir().join("bench/baselines.cu")).unwrap();
    nvrtc::compile(
        &src,
        "baselines.cu",
        &["-std=c++17".into(), "-arch=sm_90".into()],
        nvrtc::Output::Cubin,
    )
    .unwrap()
    .code
}

/// `ptxspec compile --lto` of the example kernels into a fresh folder.
fn compiled_examples() -> PathBuf {
    compiled_with_lto("compiled", &["matmul.cu", "conv3x3.cu"])
}

/// `ptxspec compile --lto` of these example kernels into a fresh folder
/// named after `what`.
fn compiled_with_lto(what: &str, kernels: &[&str]) -> PathBuf {
    let dir = tempdir(what);
    let sources: Vec<PathBuf> = kernels.iter().map(|n| kernels_dir().join(n)).collect();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "compile".as_ref(),
        "--lto".as_ref(),
        "-o".as_ref(),
        dir.as_os_str(),
    ];
    args.extend(sources.iter().map(|s| s.as_os_str()));
    cli_ok(&args);
    dir
}

/// `ptxspec specialize IMAGE.prop --set ... --via VIA [--arch sm_90] -o OUT`,
/// with the cache in `cache`; returns the output file's bytes and stderr.
fn specialize(dir: &Path, image: &str, set: &str, via: &str, cache: &Path) -> (Vec<u8>, String) {
    let out = dir.join(format!("{image}-{}-{via}.out", set.len()));
    let prop = dir.join(format!("{image}.prop"));
    let mut cmd = specialize_command(&prop, set, via, &[], &out, cache);
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success(),
        "specialize {image} {set} --via {via}:\n{err}"
    );
    (std::fs::read(&out).unwrap(), err)
}

/// `ptxspec specialize PROP --set SET --via VIA` (`--arch sm_90` for LTO),
/// then `extra`, `-o OUT`, with its disk cache in `cache`: the command, not
/// run.
fn specialize_command(
    prop: &Path,
    set: &str,
    via: &str,
    extra: &[&str],
    out: &Path,
    cache: &Path,
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ptxspec"));
    cmd.arg("specialize")
        .arg(prop)
        .args(["--set", set, "--via", via])
        .args(if via == "lto" {
            &["--arch", "sm_90"][..]
        } else {
            &[]
        })
        .args(extra)
        .arg("-o")
        .arg(out)
        .env("PTXSPEC_CACHE_DIR", cache);
    cmd
}

fn lto_gives_the_literals_machine_code_and_ptx_need_not() {
    let dir = compiled_examples();
    let cache = tempdir("lto-cache");
    let literal = literal_cubin();
    for bs in [8, 16, 32] {
        let lit = sass(&literal, &format!("matmul_literal_{bs}"));
        let (cubin, _) = specialize(
            &dir,
            "matmul",
            &format!("block_size_id={bs}"),
            "lto",
            &cache,
        );
        let lto = sass(&cubin, "matmul");
        let (ffma_lit, ffma_lto) = (count(&lit, "FFMA"), count(&lto, "FFMA"));
        assert_eq!(
            ffma_lto, ffma_lit,
            "block {bs}: LTO {ffma_lto} FFMAs, literal {ffma_lit}"
        );
        assert_eq!(
            count(&lto, "LDS"),
            count(&lit, "LDS"),
            "block {bs}: shared loads"
        );
        // The PTX route: immediates after NVVM ran; ptxas does not unroll
        // the loop NVVM kept, so it has fewer FFMAs (not asserted equal).
        let (ptx, _) = specialize(
            &dir,
            "matmul",
            &format!("block_size_id={bs}"),
            "ptx",
            &cache,
        );
        let ptx_cubin = assemble_to_cubin(&String::from_utf8(ptx).unwrap(), "sm_90");
        let via_ptx = sass(&ptx_cubin, "matmul");
        eprintln!(
            "matmul block {bs}: FFMA literal {ffma_lit}, LTO {ffma_lto}, PTX {}; instructions literal {}, LTO {}, PTX {}",
            count(&via_ptx, "FFMA"),
            instructions(&lit),
            instructions(&lto),
            instructions(&via_ptx)
        );
    }
    // The convolution with Sobel's coefficients: the zeros fold away as
    // they do in the literal (fewer multiply-adds and loads).
    let sobel = "coeff_id=1,0,-1,2,0,-2,1,0,-1";
    let (cubin, _) = specialize(&dir, "conv3x3", sobel, "lto", &cache);
    let (lto, lit) = (sass(&cubin, "conv3x3"), sass(&literal, "conv3x3_literal"));
    for op in ["FFMA", "FMUL", "FADD", "LDG"] {
        assert_eq!(
            count(&lto, op),
            count(&lit, op),
            "conv3x3 {op}: LTO\n{lto}\nliteral\n{lit}"
        );
    }
}

/// `ptxspec specialize IMAGE.prop ARGS... -o OUT`: the output's bytes, or
/// the error said.
fn specialize_with(prop: &Path, args: &[&str], out: &Path) -> Result<Vec<u8>, String> {
    let o = Command::new(env!("CARGO_BIN_EXE_ptxspec"))
        .arg("specialize")
        .arg(prop)
        .args(args)
        .arg("-o")
        .arg(out)
        .env("PTXSPEC_CACHE_DIR", out.with_extension("cache"))
        .output()
        .unwrap();
    match o.status.success() {
        true => Ok(std::fs::read(out).unwrap()),
        false => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
    }
}

/// `--arg` fixes by-value parameters (issue 44): through LTO, the
/// by-value matmul with its block size fixed has the literal kernel's
/// machine code (its FFMAs and shared loads, for each block size) under its
/// own name; through PTX, the loads become moves that ptxas assembles; the
/// convolution with an aggregate parameter is fixed the PTX way and refused
/// the LTO way; a family of wrong arguments each gets its error.
fn fixed_arguments_give_the_literals_machine_code() {
    let dir = compiled_with_lto("fixed-args", &["bench/baselines.cu"]);
    let prop = dir.join("baselines.prop");
    let literal = literal_cubin();
    for bs in [8, 16, 32] {
        let arg = format!("4={bs}");
        let out = dir.join(format!("matmul-{bs}.cubin"));
        let cubin = specialize_with(
            &prop,
            &[
                "--kernel",
                "matmul_param",
                "--arg",
                &arg,
                "--via",
                "lto",
                "--arch",
                "sm_90",
            ],
            &out,
        )
        .unwrap();
        let (fixed, lit) = (
            sass(&cubin, "matmul_param"),
            sass(&literal, &format!("matmul_literal_{bs}")),
        );
        for op in ["FFMA", "LDS"] {
            assert_eq!(
                count(&fixed, op),
                count(&lit, op),
                "block {bs}, {op}: fixed\n{fixed}\nliteral\n{lit}"
            );
        }
        assert!(!fixed.contains("ptxspec_fixed"), "{fixed}");
        let out = dir.join(format!("matmul-{bs}.ptx"));
        let ptx =
            specialize_with(&prop, &["--kernel", "matmul_param", "--arg", &arg], &out).unwrap();
        let ptx = String::from_utf8(ptx).unwrap();
        assert!(!ptx.contains("[matmul_param_param_4]"), "the load is gone");
        assert!(ptx.contains(&format!("mov.b32 %r20, {:#x};", bs)), "{ptx}");
        assemble(&ptx, "sm_90", "matmul_param with its block size fixed");
    }
    let sobel: String = [1.0f32, 0.0, -1.0, 2.0, 0.0, -2.0, 1.0, 0.0, -1.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .map(|b| format!("{b:02x}"))
        .collect();
    let coeff = format!("4=bytes:{sobel}");
    let conv = [
        "--kernel",
        "conv3x3_param",
        "--arg",
        "2=64",
        "--arg",
        &coeff,
    ];
    let ptx = specialize_with(&prop, &conv, &dir.join("conv.ptx")).unwrap();
    let ptx = String::from_utf8(ptx).unwrap();
    assert!(
        !ptx.contains("[conv3x3_param_param_4"),
        "every coefficient load is gone"
    );
    assemble(&ptx, "sm_90", "conv3x3_param with its coefficients fixed");
    let lto = [&conv[..], &["--via", "lto", "--arch", "sm_90"]].concat();
    let e = specialize_with(&prop, &lto, &dir.join("conv.cubin")).unwrap_err();
    assert!(
        e.contains("parameter 4 is an aggregate") && e.contains("--via ptx"),
        "{e}"
    );
    // Wrong arguments, each with its error (and no output).
    let handler_dir = compiled_with_lto("fixed-args-handler", &["matmul.cu"]);
    let handler_prop = handler_dir.join("matmul.prop");
    for (prop, args, says) in [
        (&prop, &["--arg", "4=16"][..], "name it with --kernel"),
        (
            &prop,
            &["--kernel", "matmul_param", "--arg", "9=1"],
            "there is no parameter 9",
        ),
        (
            &prop,
            &["--kernel", "matmul_param", "--arg", "0=5"],
            "holds a pointer",
        ),
        (
            &prop,
            &["--kernel", "matmul_param", "--arg", "x=5"],
            "expected INDEX=VALUE",
        ),
        (
            &prop,
            &["--kernel", "matmul_param", "--arg", "4=1.5"],
            "is not an integer",
        ),
        (
            &prop,
            &["--kernel", "matmul_param", "--arg", "4=4294967296"],
            "does not fit 32 bits",
        ),
        (
            &prop,
            &["--kernel", "matmul_param", "--arg", "4=1", "--arg", "4=2"],
            "given twice",
        ),
        (
            &prop,
            &["--kernel", "nope", "--arg", "4=1"],
            "has no such kernel",
        ),
        (
            &prop,
            &["--kernel", "conv3x3_param", "--arg", "4=1"],
            "write bytes: and its 36 bytes",
        ),
        (
            &handler_prop,
            &["--kernel", "matmul", "--arg", "4=0"],
            "its kernel_handler",
        ),
    ] {
        let out = dir.join("wrong.ptx");
        let e = specialize_with(prop, args, &out).unwrap_err();
        assert!(e.contains(says), "{args:?}: {e}");
        assert!(!out.exists(), "{args:?} wrote its output");
    }
}

/// Kernels whose `const T *__restrict__` inputs the GPU reads through its
/// read-only cache keep those loads once their sizes are fixed through LTO
/// (issue 64.2): every transformer kernel of the bench, each with all its
/// sizes fixed, has the literal kernel's `LDG.E.CONSTANT`s — the wrapper
/// the kernel is inlined into lost them before, its pointers carrying no
/// attribute (a layer norm: 140 in the literal, none fixed).
fn fixed_kernels_keep_the_literals_read_only_loads() {
    let source = kernels_dir().join("bench/transformer.cu");
    let (generic, literal) = (tempdir("ro-generic"), tempdir("ro-literal"));
    for (dir, extra) in [(&generic, &[][..]), (&literal, &["-D", "LITERAL"][..])] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["compile".as_ref(), "--lto".as_ref()];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        args.extend(["-o".as_ref(), dir.as_os_str(), source.as_os_str()]);
        cli_ok(&args);
    }
    // Each kernel, its image and its sizes as the bench fixes them.
    let kernels: [(&str, &str, &[&str]); 7] = [
        ("layernorm_forward", "transformer", &["6=8192", "7=768"]),
        ("softmax_forward", "transformer", &["2=98304", "3=1024"]),
        ("bias_backward", "transformer", &["2=8192", "3=2304"]),
        (
            "attention_permute",
            "transformer_1",
            &["4=8", "5=1024", "6=12", "7=64"],
        ),
        (
            "encoder_forward",
            "transformer_1",
            &["4=8", "5=1024", "6=768"],
        ),
        ("residual_forward", "transformer_1", &["3=6291456"]),
        ("gelu_forward", "transformer_1", &["2=25165824"]),
    ];
    for (kernel, image, sizes) in kernels {
        let link = |dir: &Path, sizes: &[&str], name: &str| {
            let mut args = vec!["--kernel", kernel, "--via", "lto", "--arch", "sm_90"];
            for s in sizes {
                args.extend(["--arg", s]);
            }
            let out = dir.join(format!("{kernel}-{name}.cubin"));
            let prop = dir.join(format!("{image}.prop"));
            sass(&specialize_with(&prop, &args, &out).unwrap(), kernel)
        };
        let (fixed, lit) = (
            link(&generic, sizes, "fixed"),
            link(&literal, &[], "literal"),
        );
        let read_only = |sass: &str| count(sass, "LDG") - count_plain_ldg(sass);
        assert!(read_only(&lit) > 0, "{kernel}: the literal has none\n{lit}");
        assert_eq!(
            read_only(&fixed),
            read_only(&lit),
            "{kernel}: read-only loads, fixed against literal\nfixed\n{fixed}\nliteral\n{lit}"
        );
    }
}

/// Kernels with specialization constants take their `kernel_handler` as an
/// 8-byte aggregate, which the LTO wrapper refused (issue 64.4), so their
/// arguments were fixed the PTX way only — where range facts NVVM has are
/// lost (a permute's 64-bit divisions stayed, ×1.14 of the literal). Now
/// the handler passes through as ptxspec's own class: GPT-2's four
/// permutes (`examples/gpt2/kernels.cu`: the channels and heads as
/// constants, batch and length as arguments), fixed through LTO with the
/// constants' defaults, have the literal build's machine code — as many
/// instructions and read-only loads.
fn kernels_with_a_handler_are_fixed_through_lto_at_the_literal() {
    let source = kernels_dir().join("../examples/gpt2/kernels.cu");
    let (generic, literal) = (tempdir("handler-generic"), tempdir("handler-literal"));
    let literal_sizes = [
        "-D",
        "GPT2_LITERAL",
        "-D",
        "GPT2_C=768",
        "-D",
        "GPT2_NH=12",
        "-D",
        "GPT2_B=4",
        "-D",
        "GPT2_T=1024",
        "-D",
        "GPT2_V=50257",
        "-D",
        "GPT2_VP=50304",
    ];
    for (dir, extra) in [(&generic, &[][..]), (&literal, &literal_sizes[..])] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["compile".as_ref(), "--lto".as_ref()];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        args.extend(["-o".as_ref(), dir.as_os_str(), source.as_os_str()]);
        cli_ok(&args);
    }
    let image_of = |dir: &Path, kernel: &str| {
        let first = std::fs::read_to_string(dir.join("kernels.ptx")).unwrap();
        match first.contains(&format!(".entry {kernel}(")) {
            true => dir.join("kernels.prop"),
            false => dir.join("kernels_1.prop"),
        }
    };
    for (kernel, batch, seq) in [
        ("attention_permute", 4, 5),
        ("attention_unpermute", 2, 3),
        ("attention_permute_backward", 4, 5),
        ("attention_unpermute_backward", 2, 3),
    ] {
        let (b, t) = (format!("{batch}=4"), format!("{seq}=1024"));
        let fixed = [
            "--kernel", kernel, "--arg", &b, "--arg", &t, "--via", "lto", "--arch", "sm_90",
        ];
        let out = generic.join(format!("{kernel}.cubin"));
        let fixed = sass(
            &specialize_with(&image_of(&generic, kernel), &fixed, &out)
                .unwrap_or_else(|e| panic!("{kernel} through LTO: {e}")),
            kernel,
        );
        let plain = ["--kernel", kernel, "--via", "lto", "--arch", "sm_90"];
        let out = literal.join(format!("{kernel}.cubin"));
        let lit = sass(
            &specialize_with(&image_of(&literal, kernel), &plain, &out).unwrap(),
            kernel,
        );
        let without_nops = |s: &str| instructions(s) - count(s, "NOP");
        assert_eq!(
            (
                without_nops(&fixed),
                count(&fixed, "LDG") - count_plain_ldg(&fixed)
            ),
            (
                without_nops(&lit),
                count(&lit, "LDG") - count_plain_ldg(&lit)
            ),
            "{kernel}: instructions and read-only loads, fixed against literal\nfixed\n{fixed}\nliteral\n{lit}"
        );
    }
}

/// Global loads in the SASS that do not go through the read-only cache
/// (`LDG` without `.CONSTANT`).
fn count_plain_ldg(sass: &str) -> usize {
    sass.lines()
        .filter(|l| {
            l.split_whitespace()
                .any(|w| (w == "LDG" || w.starts_with("LDG.")) && !w.contains(".CONSTANT"))
        })
        .count()
}

/// Divisions whose divisors the code knows only once it is specialized —
/// by specialization constants, by fixed arguments, and by products,
/// quotients and widenings of them, in 32 and 64 bits — the way
/// transformer code writes its permutes.
const DIVIDES: &str = r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> width_id{768};
constexpr ptxspec::specialization_id<int> heads_id{12};
extern "C" __global__ void by_constants(int *out, const int *in, ptxspec::kernel_handler h) {
  const int C = h.get_specialization_constant<width_id>();
  const int NH = h.get_specialization_constant<heads_id>();
  const int HS = C / NH;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = in[i];
  const long w = (long)v * 3 + in[i + 1];
  out[i] = v / HS + (v / C) % NH + v / (HS * NH * 3) + (int)(w / ((long)C * NH)) + (int)(w % HS);
}
extern "C" __global__ void by_arguments(int *out, const int *in, int seq, int heads) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = in[i];
  const long w = (long)v * 3 + in[i + 1];
  out[i] = v / seq + (v / 64) % seq + v / (64 * seq * heads) + (int)(w / ((long)seq * heads)) + (int)(w % heads);
}
extern "C" __global__ void by_both(int *out, const int *in, int seq, ptxspec::kernel_handler h) {
  const int C = h.get_specialization_constant<width_id>();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = in[i];
  out[i] = v / C + (v / seq) % C + v / (seq * C);
}
"#;

/// Integer divisions by a register in SASS: the reciprocal estimate a
/// 32-bit one starts from, or the call a 64-bit one makes.
fn divisions_in_sass(sass: &str) -> usize {
    count(sass, "MUFU") + count(sass, "CALL")
}

/// Issue 64's check, both routes: a division by a specialization constant
/// (`--set`, the native route) or by a fixed argument (`--arg`, the PTX
/// route) — also by a product, quotient or widening of such values — is
/// made a multiplication, so none is left in the SASS that ptxas makes of
/// the PTX, where the unspecialized kernels divide. Fails where either
/// route leaves one (the constants' route did not divide at all, neither
/// folded products).
fn divisions_by_known_values_leave_none_in_sass() {
    let dir = tempdir("divides");
    let prop = compiled_image(&dir, "divides", DIVIDES);
    let generic = std::fs::read_to_string(prop.with_extension("ptx")).unwrap();
    let generic = assemble_to_cubin(&generic, "sm_90");
    for kernel in ["by_constants", "by_arguments", "by_both"] {
        let n = divisions_in_sass(&sass(&generic, kernel));
        assert!(
            n >= 3,
            "{kernel}: the unspecialized kernel has {n} divisions: the test would prove nothing"
        );
    }
    // The SASS of `kernel` in the PTX that `specialize ARGS` writes,
    // assembled by ptxas.
    let specialized = |args: &[&str], kernel: &str| {
        let ptx = specialize_with(&prop, args, &dir.join(format!("{kernel}.ptx"))).unwrap();
        sass(
            &assemble_to_cubin(&String::from_utf8(ptx).unwrap(), "sm_90"),
            kernel,
        )
    };
    let set = ["--set", "width_id=768", "--set", "heads_id=12"];
    let fixed = [
        "--kernel",
        "by_arguments",
        "--arg",
        "2=1024",
        "--arg",
        "3=12",
    ];
    // Both at once: the native route's rewrite, then the argument's on its
    // output (each with temporaries of its own: ptxas refused the second's
    // where they shared names).
    let both = [&set[..], &["--kernel", "by_both", "--arg", "2=1024"]].concat();
    for (route, args, kernel) in [
        ("the native route", &set[..], "by_constants"),
        ("the PTX route", &fixed[..], "by_arguments"),
        ("both routes", &both[..], "by_both"),
    ] {
        let code = specialized(args, kernel);
        assert_eq!(divisions_in_sass(&code), 0, "{route}:\n{code}");
    }
}

/// Loops over a block whose size the code knows only once it is
/// specialized — a specialization constant's, a fixed argument's — as a
/// matmul's inner loop writes them: left to NVVM (which unrolls by four
/// and marks the rest nounroll) and kept rolled by the source's
/// `#pragma unroll 1`.
const BLOCK_LOOPS: &str = r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> block_id{16};
template <bool ROLLED>
__device__ float dot(const float *a, const float *b, int bs) {
  float acc = 0.f;
  const int t = threadIdx.x;
  if constexpr (ROLLED) {
#pragma unroll 1
    for (int k = 0; k < bs; ++k) acc += a[t * bs + k] * b[k * bs + t];
  } else {
#pragma unroll
    for (int k = 0; k < bs; ++k) acc += a[t * bs + k] * b[k * bs + t];
  }
  return acc;
}
extern "C" __global__ void by_constant(float *out, const float *a, const float *b, ptxspec::kernel_handler h) {
  out[threadIdx.x] = dot<false>(a, b, h.get_specialization_constant<block_id>());
}
extern "C" __global__ void rolled_by_constant(float *out, const float *a, const float *b, ptxspec::kernel_handler h) {
  out[threadIdx.x] = dot<true>(a, b, h.get_specialization_constant<block_id>());
}
extern "C" __global__ void by_argument(float *out, const float *a, const float *b, int bs) {
  out[threadIdx.x] = dot<false>(a, b, bs);
}
extern "C" __global__ void rolled_by_argument(float *out, const float *a, const float *b, int bs) {
  out[threadIdx.x] = dot<true>(a, b, bs);
}
"#;

/// Issue 64.1's check, both routes: a loop whose trip count only the
/// specialization makes known — a block size set as a constant (`--set`)
/// or fixed as an argument (`--arg`), the loop unrolled by four by NVVM or
/// kept rolled by the source — is unrolled completely in the SASS ptxas
/// makes of the specialized PTX (one FFMA per iteration, no branch back),
/// where the unspecialized kernels loop. Fails where the nounroll pragma
/// NVVM wrote stays (ptxas honours it: the native matmul ran ×1.10–1.16
/// of the literal so).
fn loops_counted_by_known_values_unroll_in_sass() {
    let dir = tempdir("block-loops");
    let prop = compiled_image(&dir, "loops", BLOCK_LOOPS);
    let generic = std::fs::read_to_string(prop.with_extension("ptx")).unwrap();
    assert!(
        generic.matches("\"nounroll\"").count() >= 4,
        "NVVM marked no loop nounroll: the test would prove nothing\n{generic}"
    );
    let generic = assemble_to_cubin(&generic, "sm_90");
    for kernel in [
        "by_constant",
        "rolled_by_constant",
        "by_argument",
        "rolled_by_argument",
    ] {
        let n = count(&sass(&generic, kernel), "FFMA");
        assert!(n < 16, "{kernel}: the unspecialized kernel has {n} FFMAs");
    }
    for bs in [8, 16, 32] {
        let set = format!("block_id={bs}");
        let arg = format!("3={bs}");
        for (route, args, kernel) in [
            ("the native route", vec!["--set", &set], "by_constant"),
            (
                "the native route",
                vec!["--set", &set],
                "rolled_by_constant",
            ),
            (
                "the PTX route",
                vec!["--kernel", "by_argument", "--arg", &arg],
                "by_argument",
            ),
            (
                "the PTX route",
                vec!["--kernel", "rolled_by_argument", "--arg", &arg],
                "rolled_by_argument",
            ),
        ] {
            let ptx =
                specialize_with(&prop, &args, &dir.join(format!("{kernel}-{bs}.ptx"))).unwrap();
            let code = sass(
                &assemble_to_cubin(&String::from_utf8(ptx).unwrap(), "sm_90"),
                kernel,
            );
            assert_eq!(
                count(&code, "FFMA"),
                bs,
                "{route}, {kernel}, block {bs}:\n{code}"
            );
        }
    }
}

/// Integer instructions that compute addresses in SASS: shifts-and-adds,
/// adds of three, adds of an immediate.
fn address_arithmetic_in_sass(sass: &str) -> usize {
    count(sass, "LEA") + count(sass, "IADD3") + count(sass, "VIADD")
}

/// Issue 64.1's native matmul (kernels/matmul.cu, the block size a
/// specialization constant): NVVM's PTX for an unknown block sign-extends
/// each shared address's 32-bit sum, and ptxas kept three integer
/// instructions a load in the unrolled loop. With the sums' extensions
/// distributed (their ranges proven: the thread index, the loop's count),
/// the block loop's addresses fold into offsets — at most one address
/// instruction a shared load, at blocks 16 and 32. Fails where the
/// extensions stay whole (113 for 40 loads at block 32 before).
fn shared_addresses_in_a_counted_loop_fold_in_sass() {
    let dir = tempdir("matmul-addresses");
    for (bs, ptx) in native_matmuls(&dir, [16, 32]) {
        let code = sass(&assemble_to_cubin(&ptx, "sm_90"), "matmul");
        // The tile loop may be versioned (`ptx::pointers`): its copy, as it
        // was, sits behind the guard, unrolled as well.
        let copies = match ptx.contains("the loop above as it was") {
            true => 2,
            false => 1,
        };
        let (loads, address) = (count(&code, "LDS"), address_arithmetic_in_sass(&code));
        assert_eq!(
            count(&code, "FFMA"),
            bs as usize * copies,
            "block {bs}: the loop is not unrolled\n{code}"
        );
        assert!(
            address <= loads,
            "block {bs}: {address} address instructions for {loads} shared loads\n{code}"
        );
    }
}

/// Issue 64.1's native matmul at blocks 16 and 32: its tile loop reads A at
/// `A + sext(row * n + t + tx) * 4`, a 32-bit sum PTX cannot say is free
/// of overflow, which ptxas widens again on every trip. Versioned by
/// `ptx::pointers` — a guard before the loop proves the sums stay in range
/// — the fast copy steps a 64-bit pointer by the tile's bytes (an `IADD3`
/// of `4 × block` with its carry, as the literal's SASS does), and the
/// original loop stays behind the guard. Fails where the address is
/// widened each trip (no such step).
fn tile_addresses_step_as_pointers_in_sass() {
    let dir = tempdir("matmul-pointers");
    for (bs, ptx) in native_matmuls(&dir, [16, 32]) {
        assert!(
            ptx.contains("bra $pxpt") && ptx.contains("the loop above as it was"),
            "block {bs}: no guarded copy of the tile loop"
        );
        let code = sass(&assemble_to_cubin(&ptx, "sm_90"), "matmul");
        let step = format!("0x{:x}", 4 * bs);
        let stepped = code.lines().any(|l| {
            let w: Vec<&str> = l
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|w| !w.is_empty())
                .collect();
            w.contains(&"IADD3")
                && w.iter().any(|x| x.starts_with('P') && x.len() == 2)
                && w.contains(&step.as_str())
        });
        assert!(
            stepped,
            "block {bs}: no 64-bit step of {step} bytes in the SASS\n{code}"
        );
    }
}

/// kernels/matmul.cu compiled in `dir`, its block size set to each of
/// `sizes` natively (`ptxspec specialize --set`): the PTX of each.
fn native_matmuls<const N: usize>(dir: &Path, sizes: [u32; N]) -> Vec<(u32, String)> {
    let prop = compiled_image(dir, "matmul", include_str!("../../../kernels/matmul.cu"));
    sizes
        .into_iter()
        .map(|bs| {
            let set = format!("block_size_id={bs}");
            let out = dir.join(format!("matmul-{bs}.ptx"));
            let ptx = specialize_with(&prop, &["--set", &set], &out).unwrap();
            (bs, String::from_utf8(ptx).unwrap())
        })
        .collect()
}

fn assemble_to_cubin(ptx: &str, arch: &str) -> Vec<u8> {
    let dir = tempdir("asm");
    let (input, output) = (dir.join("in.ptx"), dir.join("out.cubin"));
    std::fs::write(&input, ptx).unwrap();
    let st = Command::new(ptxas())
        .arg(format!("-arch={arch}"))
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::read(output).unwrap()
}

fn disk_cache_across_processes_corruption_and_two_at_once() {
    let dir = compiled_examples();
    let cache = tempdir("disk-cache");
    let (first, e1) = specialize(&dir, "matmul", "block_size_id=4", "lto", &cache);
    assert!(e1.contains("cubin: linked"), "{e1}");
    let (second, e2) = specialize(&dir, "matmul", "block_size_id=4", "lto", &cache);
    assert!(e2.contains("cubin: disk cache"), "{e2}");
    assert_eq!(first, second);
    // Every entry damaged: read as misses, linked again, stored again.
    let entries = |cache: &Path| -> Vec<PathBuf> {
        walk(cache)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "entry"))
            .collect()
    };
    for e in entries(&cache) {
        let mut b = std::fs::read(&e).unwrap();
        let last = b.len() - 1;
        b[last] ^= 0xff;
        std::fs::write(&e, b).unwrap();
    }
    let (third, e3) = specialize(&dir, "matmul", "block_size_id=4", "lto", &cache);
    assert!(
        e3.contains("cubin: linked"),
        "a damaged entry is rebuilt: {e3}"
    );
    assert_eq!(third, first);
    let (_, e4) = specialize(&dir, "matmul", "block_size_id=4", "lto", &cache);
    assert!(e4.contains("cubin: disk cache"), "{e4}");
    // Two processes linking the same new value set at once: both succeed
    // with the same cubin, one entry results, nothing temporary is left.
    let before = entries(&cache).len();
    let spawn = |n: usize| {
        let out = dir.join(format!("race{n}.cubin"));
        specialize_command(
            &dir.join("matmul.prop"),
            "block_size_id=2",
            "lto",
            &[],
            &out,
            &cache,
        )
        .spawn()
        .unwrap()
    };
    let (mut a, mut b) = (spawn(1), spawn(2));
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    assert_eq!(
        std::fs::read(dir.join("race1.cubin")).unwrap(),
        std::fs::read(dir.join("race2.cubin")).unwrap()
    );
    assert_eq!(entries(&cache).len(), before + 1);
    let temporary: Vec<PathBuf> = walk(&cache)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".tmp"))
        })
        .collect();
    assert!(temporary.is_empty(), "{temporary:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Whether a CUDA toolkit on this machine would be found anyway.
/// Whether this machine has a CUDA toolkit where ptxspec looks for one:
/// the tests that need a library to be missing (or found elsewhere first)
/// are then reported ignored, never passed without running.
fn system_toolkit() -> bool {
    ["/usr/local/cuda/lib64", "/opt/cuda/lib64"]
        .iter()
        .any(|d| Path::new(d).is_dir())
}

fn a_missing_library_is_named_with_how_to_get_it() {
    let dir = compiled_examples();
    let home = tempdir("no-home");
    // `envs` set, `unset` removed (a library no variable names is looked
    // for, and on this machine not found).
    let run_with =
        |args: &[&std::ffi::OsStr], envs: &[(&str, &std::ffi::OsStr)], unset: &[&str]| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ptxspec"));
            for u in unset {
                c.env_remove(u);
            }
            c.args(args)
                .env_remove("LD_LIBRARY_PATH")
                .env_remove("VIRTUAL_ENV")
                .env_remove("CUDA_PATH")
                .env_remove("CUDA_HOME")
                .env("HOME", &home)
                .env("PTXSPEC_CACHE_DIR", home.join("cache"))
                .envs(envs.iter().copied())
                .output()
                .unwrap()
        };
    let run = |args: &[&std::ffi::OsStr], env: (&str, &str)| {
        run_with(args, &[(env.0, env.1.as_ref())], &[])
    };
    let prop = dir.join("matmul.prop");
    let out = dir.join("x.cubin");
    let specialize_lto = [
        "specialize".as_ref(),
        prop.as_os_str(),
        "--set".as_ref(),
        "block_size_id=3".as_ref(),
        "--via".as_ref(),
        "lto".as_ref(),
        "--arch".as_ref(),
        "sm_90".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ];
    let o = run(
        &specialize_lto,
        ("PTXSPEC_NVJITLINK", "/nonexistent/libnvJitLink.so.12"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(
        o.status.code(),
        Some(1),
        "a clean error, not a panic: {err}"
    );
    // The file the variable names, and no other copy found elsewhere.
    assert!(
        err.contains("PTXSPEC_NVJITLINK=\"/nonexistent/libnvJitLink.so.12\": no such file"),
        "{err}"
    );
    assert!(!out.exists());
    // Only nvJitLink (a lone copy: no libNVVM beside it), no NVRTC: the
    // error names both compilers that could make the definitions.
    let lone = home.join("lone");
    std::fs::create_dir_all(&lone).unwrap();
    let linker = lone.join("libnvJitLink.so.12");
    // A hard link where it can be (the library is 90 MB; a CI machine's disk
    // is not endless): another name for the file, in a folder of its own.
    let original = std::env::var_os("PTXSPEC_NVJITLINK").expect("PTXSPEC_NVJITLINK");
    if std::fs::hard_link(&original, &linker).is_err() {
        std::fs::copy(&original, &linker).unwrap();
    }
    let o = run_with(
        &specialize_lto,
        &[("PTXSPEC_NVJITLINK", linker.as_os_str())],
        &["PTXSPEC_NVVM", "PTXSPEC_NVRTC"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("libNVVM or libnvrtc not found"), "{err}");
    assert!(
        err.contains("nvidia-cuda-nvcc-cu12") && err.contains("nvidia-cuda-nvrtc-cu12"),
        "{err}"
    );
    assert!(!out.exists());
    let src = kernels_dir().join("matmul.cu");
    let compiled = home.join("o");
    let compile = [
        "compile".as_ref(),
        "-o".as_ref(),
        compiled.as_os_str(),
        src.as_os_str(),
    ];
    let o = run_with(&compile, &[], &["PTXSPEC_NVRTC"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("libnvrtc not found") && err.contains("nvidia-cuda-nvrtc-cu12"),
        "{err}"
    );
    // NVRTC's wheel has no CUDA headers: the advice names their wheels too.
    assert!(
        err.contains("nvidia-cuda-runtime-cu12") && err.contains("cuda_fp16.h"),
        "{err}"
    );
    assert!(!home.join("o").exists());
    // Named but not there: the variable's error, not a copy from elsewhere.
    let o = run(&compile, ("PTXSPEC_NVRTC", "/nonexistent/libnvrtc.so.12"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("PTXSPEC_NVRTC=\"/nonexistent/libnvrtc.so.12\": no such file"),
        "{err}"
    );
    assert!(!home.join("o").exists());
}

/// Compiles `source` (LTO-IR too) and makes its images.
fn images_of(source: &std::path::Path, lto: bool) -> Vec<Image> {
    let opts = CompileOptions {
        lto,
        ..Default::default()
    };
    let (_, images) =
        compile::compile_and_post_link(&[source.to_path_buf()], &opts, &Default::default())
            .unwrap();
    images
        .into_iter()
        .map(|i| {
            let mut img = Image::new(i.stem, i.ptx, &i.props.to_text()).unwrap();
            if let Some(ir) = i.ltoir {
                img = img.with_ltoir(&ir.to_bytes()).unwrap();
            }
            img
        })
        .collect()
}

fn a_debug_lto_build_for_a_device_links_now_and_logs() {
    let images = images_of(&kernels_dir().join("matmul.cu"), true);
    let logged = Arc::new(std::sync::Mutex::new(String::new()));
    let sink = Arc::clone(&logged);
    let opts = BuildOptions::default()
        .with_debug(true)
        .with_log(move |s: &str| sink.lock().unwrap().push_str(s));
    let mut input = KernelBundle::from_images(images).with_mode(SpecMode::Lto);
    input
        .set_specialization_constant(&ptxspec::SpecId::<i32>::new("block_size_id"), 24)
        .unwrap();
    let exe = ptxspec::build_with(&input, &[Device::profile(0, (9, 0))], &opts).unwrap();
    let log = exe.build_log();
    assert!(
        log.contains("ptxas info") && log.contains("matmul"),
        "{log}"
    );
    assert_eq!(*logged.lock().unwrap(), log);
}

/// A link in this process records its stages as spans of the trace, in
/// order and each within the call: the wait for the linker (one link at a
/// time), the inputs added, the link completed.
fn link_stages_are_spans_of_the_trace() {
    let dir = tempdir("link-stages");
    let file = dir.join("trace.json");
    ptxspec_core::trace::start(&file).unwrap();
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";
    let called = std::time::Instant::now();
    let linked = nvjitlink::link(
        &[(nvjitlink::InputKind::Ptx, ptx.as_bytes(), "k.ptx")],
        &["-arch=sm_90".to_string()],
    );
    let took = called.elapsed().as_micros() as u64;
    ptxspec_core::trace::stop().unwrap();
    assert!(linked.is_ok(), "{:?}", linked.err());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).expect("a JSON trace");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let mut last_end = 0;
    let mut first_start = None;
    for stage in [
        "link stage: wait for the linker",
        "link stage: add inputs",
        "link stage: complete (optimize, ptxas)",
    ] {
        let e = events
            .iter()
            .find(|e| e["name"] == stage)
            .unwrap_or_else(|| panic!("no {stage:?} in {events:?}"));
        let (ts, dur) = (e["ts"].as_u64().unwrap(), e["dur"].as_u64().unwrap());
        assert!(
            e["ph"] == "X" && ts >= last_end,
            "{stage:?} out of order: {e}"
        );
        first_start.get_or_insert(ts);
        last_end = ts + dur;
    }
    let spanned = last_end - first_start.unwrap_or(0);
    assert!(
        spanned <= took,
        "stages over {spanned} µs of a call of {took} µs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn dynamic_parallelism_resolves_with_the_device_runtime() {
    let images = images_of(&here().join("tests/corpus/dynamic_parallelism.cu"), false);
    let img = &images[0];
    assert!(img.needs_device_runtime());
    assert_eq!(
        img.placement(),
        ptxspec_core::image::Delivery::GlobalBuffer,
        "kernels launched from device code keep a pointer"
    );
    let native =
        ptxspec_core::postlink::specialize("dp.ptx", img.ptx(), img.default_values()).unwrap();
    let devrt = std::fs::read(toolkit::cudadevrt().unwrap()).unwrap();
    let opts = ["-arch=sm_90".to_string()];
    for ptx in [img.ptx(), native.as_str()] {
        let linked = nvjitlink::link(
            &[
                (nvjitlink::InputKind::Ptx, ptx.as_bytes(), "dp.ptx"),
                (nvjitlink::InputKind::Library, &devrt, "libcudadevrt.a"),
            ],
            &opts,
        );
        assert!(linked.is_ok(), "{:?}", linked.err());
        // Without the library the launch function is undefined.
        let e = nvjitlink::link(
            &[(nvjitlink::InputKind::Ptx, ptx.as_bytes(), "dp.ptx")],
            &opts,
        )
        .unwrap_err();
        assert!(e.to_string().contains("LaunchDevice"), "{e}");
    }
}

fn build_support_compiles_a_folder_once() {
    let dir = tempdir("cuda-folder");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::copy(kernels_dir().join("matmul.cu"), src.join("matmul.cu")).unwrap();
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("kernels.rs");
    ptxspec_build::CudaBuild::new(&src)
        .lto(true)
        .embed(&out)
        .unwrap();
    let code = std::fs::read_to_string(&out).unwrap();
    assert!(
        code.contains(r#"const NAMES: &str = "matmulmatmulmatmul_rolled";"#)
            && code.contains("EmbeddedImage::v1(NAMES.split_at(0).1.split_at(6).0, "),
        "{code}"
    );
    assert!(code.contains(", include_bytes!("), "{code}");
    let key = out_dir.join("ptxspec-units/matmul.key");
    let stamp = std::fs::metadata(&key).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    ptxspec_build::CudaBuild::new(&src)
        .lto(true)
        .embed(&out)
        .unwrap();
    assert_eq!(
        std::fs::metadata(&key).unwrap().modified().unwrap(),
        stamp,
        "unchanged: not recompiled"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), code);
    // A change of the source recompiles it.
    let text = std::fs::read_to_string(src.join("matmul.cu")).unwrap();
    std::fs::write(src.join("matmul.cu"), text.replace("int, 16)", "int, 8)")).unwrap();
    ptxspec_build::CudaBuild::new(&src)
        .lto(true)
        .embed(&out)
        .unwrap();
    assert_ne!(std::fs::metadata(&key).unwrap().modified().unwrap(), stamp);
    // A compile error is an error naming the file.
    std::fs::write(src.join("bad.cu"), "__global__ void k() { int x = ; }").unwrap();
    let e = ptxspec_build::CudaBuild::new(&src).embed(&out).unwrap_err();
    assert!(e.to_string().contains("bad.cu"), "{e}");
}

fn the_default_architecture_is_not_deprecated() {
    // NVRTC 12 warns on every compilation for targets before sm_75.
    let header = compile::header_dir(None).unwrap();
    let src = std::fs::read_to_string(kernels_dir().join("tiny.cu")).unwrap();
    let unit = compile::compile_unit("tiny.cu", &src, &CompileOptions::default(), &header)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(unit.log.is_empty(), "NVRTC said: {}", unit.log);
    assert!(unit.ptx.contains(".target sm_75"), "{}", &unit.ptx[..300]);
    // Asked for, Volta still compiles (with NVRTC 12's warning).
    let volta = CompileOptions {
        arch: "compute_70".into(),
        ..Default::default()
    };
    let unit = compile::compile_unit("tiny.cu", &src, &volta, &header).unwrap();
    assert!(unit.ptx.contains(".target sm_70"));
}

fn wheels_are_found_through_the_python3_on_path() {
    // A python3 (not an activated venv: VIRTUAL_ENV unset) whose
    // site-packages holds NVIDIA's NVRTC wheel.
    let dir = tempdir("python-on-path");
    let site = dir.join("site-packages");
    let nvrtc = PathBuf::from(std::env::var_os("PTXSPEC_NVRTC").expect("PTXSPEC_NVRTC"));
    std::fs::create_dir_all(site.join("nvidia/cuda_nvrtc")).unwrap();
    std::os::unix::fs::symlink(nvrtc.parent().unwrap(), site.join("nvidia/cuda_nvrtc/lib"))
        .unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python3");
    std::fs::write(&python, format!("#!/bin/sh\necho {}\n", site.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let compile = |out: &Path, path: &std::ffi::OsStr| {
        Command::new(env!("CARGO_BIN_EXE_ptxspec"))
            .args(["compile".as_ref(), "-o".as_ref(), out.as_os_str()])
            .arg(kernels_dir().join("tiny.cu"))
            .env_remove("PTXSPEC_NVRTC")
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("VIRTUAL_ENV")
            .env_remove("CONDA_PREFIX")
            .env("HOME", &dir)
            .env("PATH", path)
            .output()
            .unwrap()
    };
    let o = compile(&dir.join("out"), &path);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.join("out/tiny.ptx").is_file());
    // Without the wheel there, the error names the folder it looked in.
    std::fs::remove_file(site.join("nvidia/cuda_nvrtc/lib")).unwrap();
    let o = compile(&dir.join("out2"), &path);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&site.display().to_string()), "{err}");
}

fn build_scripts_embed_images_as_compile_wrote_them() {
    let dir = compiled_examples();
    let out = tempdir("embed-images").join("kernels.rs");
    ptxspec_build::embed_images_dir(&dir, &out).unwrap_or_else(|e| panic!("{e}"));
    let code = std::fs::read_to_string(&out).unwrap();
    // The registrations slice one string of the images' names.
    let names = code
        .split_once("const NAMES: &str = \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(names, _)| names)
        .unwrap_or_else(|| panic!("no NAMES in:\n{code}"));
    let name = |expr: &str| -> String {
        let (at, len) = expr
            .strip_prefix("NAMES.split_at(")
            .and_then(|r| r.strip_suffix(").0"))
            .and_then(|r| r.split_once(").1.split_at("))
            .unwrap_or_else(|| panic!("not a slice of NAMES: {expr}"));
        let (at, len): (usize, usize) = (at.parse().unwrap(), len.parse().unwrap());
        names[at..at + len].to_string()
    };
    // Each with the kernels its sources define (matmul.cu has two).
    for (image, kernels) in [
        ("matmul", &["matmul", "matmul_rolled"][..]),
        ("conv3x3", &["conv3x3"][..]),
    ] {
        let ptx = std::fs::read_to_string(dir.join(format!("{image}.ptx"))).unwrap();
        let prop = std::fs::read_to_string(dir.join(format!("{image}.prop"))).unwrap();
        let ltoir = std::fs::canonicalize(dir.join(format!("{image}.ltoir"))).unwrap();
        let sha256 = ptxspec_core::digest::Digest::of(&std::fs::read(&ltoir).unwrap()).0;
        let middle = format!(
            ", {ptx:?}, {prop:?}, include_bytes!({:?}), &[",
            ltoir.display().to_string()
        );
        let end = format!("], Some(false), Some({sha256:?})) }}");
        let line = code
            .lines()
            .find(|l| l.contains(&middle))
            .unwrap_or_else(|| panic!("{image} not embedded as written:\n{code}"));
        let (head, rest) = line.split_once(&middle).unwrap();
        let (listed, tail) = rest.split_once("], ").unwrap();
        assert_eq!(format!("], {tail}"), end, "{image}");
        let id = head.rsplit_once("v1(").unwrap().1;
        assert_eq!(name(id), image);
        let listed: Vec<String> = listed.split(", ").map(name).collect();
        assert_eq!(listed, kernels, "{image}");
    }
    // Every generated file declares the typed constants (round 5, 4: a
    // crate moving to committed images stopped compiling): the same module
    // as embedding the sources gives.
    assert!(
        code.contains("pub mod spec_ids {")
            && code.contains(
                "pub const BLOCK_SIZE_ID: ::ptxspec::SpecId<i32> = ::ptxspec::SpecId::new(\"block_size_id\");"
            ),
        "no typed constants:\n{code}"
    );
    // The same folder given as PTX to post-link: refused, not embedded
    // with no constants.
    let e = ptxspec_build::embed_ptx_dir(&dir, &out).unwrap_err();
    assert!(
        e.to_string().contains("a device image post-linked already"),
        "{e}"
    );
    // A damaged image fails the build script, not the program.
    let prop = dir.join("matmul.prop");
    let text = std::fs::read_to_string(&prop).unwrap();
    assert!(text.contains("\nall=2|"), "{text}");
    std::fs::write(&prop, text.replace("\nall=2|", "\nall=1|7\nx=2|")).unwrap();
    let e = ptxspec_build::embed_images_dir(&dir, &out).unwrap_err();
    assert!(e.to_string().contains("matmul.prop"), "{e}");
}

/// A `kernel_handler` the kernel did not receive as a parameter — a local
/// variable of the kernel, of a device function it calls, or one made by a
/// helper — is refused with what to do instead, in every shape.
fn a_handler_that_is_not_a_parameter_says_what_to_do() {
    let dir = tempdir("local-handler");
    let head = "#include \"ptxspec.cuh\"\nconstexpr ptxspec::specialization_id<int> sc{7};\n";
    let shapes = [
        (
            "in_kernel",
            "extern \"C\" __global__ void k(int *o) { ptxspec::kernel_handler h; \
             *o = h.get_specialization_constant<sc>(); }",
        ),
        (
            "in_device_function",
            "__device__ __noinline__ int get() { ptxspec::kernel_handler h; \
             return h.get_specialization_constant<sc>(); }\n\
             extern \"C\" __global__ void k(int *o) { *o = get(); }",
        ),
        (
            "made_by_a_helper",
            "__device__ __noinline__ ptxspec::kernel_handler make() { return ptxspec::kernel_handler{}; }\n\
             extern \"C\" __global__ void k(int *o) { *o = make().get_specialization_constant<sc>(); }",
        ),
    ];
    for (name, body) in shapes {
        let src = dir.join(format!("{name}.cu"));
        std::fs::write(&src, format!("{head}{body}\n")).unwrap();
        let out = dir.join(format!("out-{name}"));
        let o = cli(&[
            "compile".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
            src.as_os_str(),
        ]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {e}");
        assert!(
            e.contains("a kernel_handler must be the kernel's last parameter"),
            "{name}: {e}"
        );
        assert!(!out.exists(), "{name}");
    }
}

fn errors_in_compiled_ptx_say_where_that_ptx_is() {
    // One unit of two: its call of the other's function is unresolved.
    let dir = tempdir("keep-ptx");
    let src = kernels_dir().join("two_tu_kernel.cu");
    let out = dir.join("out");
    let compile = |extra: &[&std::ffi::OsStr]| {
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["compile".as_ref(), "-o".as_ref(), out.as_os_str()];
        args.extend(extra);
        args.push(src.as_os_str());
        cli(&args)
    };
    let o = compile(&[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("link_program_error") && e.contains("two_tu_kernel.ptx:"),
        "{e}"
    );
    assert!(
        e.contains("note: two_tu_kernel.ptx is NVRTC's PTX of ")
            && e.contains("`ptxspec compile --keep-ptx DIR` writes it"),
        "{e}"
    );
    let kept = dir.join("ptx");
    let o = compile(&["--keep-ptx".as_ref(), kept.as_os_str()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains(&format!("written to {}", kept.display())), "{e}");
    // The place the error names is the call in the kept file.
    let place = e
        .split_whitespace()
        .find(|w| w.starts_with("two_tu_kernel.ptx:"))
        .unwrap();
    let line: usize = place.split(':').nth(1).unwrap().parse().unwrap();
    let ptx = std::fs::read_to_string(kept.join("two_tu_kernel.ptx")).unwrap();
    assert!(
        ptx.lines().nth(line - 1).unwrap().contains("call"),
        "line {line} of the kept PTX is not the call"
    );
    assert!(!out.exists());
    // Round 5, 6: two sources of one stem keep two files (the second
    // numbered as images are), and the error points into its own unit's.
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(
        a.join("k.cu"),
        "extern \"C\" __global__ void fine(int *o) { *o = 1; }\n",
    )
    .unwrap();
    std::fs::copy(&src, b.join("k.cu")).unwrap();
    std::fs::copy(kernels_dir().join("two_tu.cuh"), b.join("two_tu.cuh")).unwrap();
    let kept2 = dir.join("ptx2");
    let o = cli(&[
        "compile".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        "--keep-ptx".as_ref(),
        kept2.as_os_str(),
        a.join("k.cu").as_os_str(),
        b.join("k.cu").as_os_str(),
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    let place = e
        .split_whitespace()
        .find(|w| w.starts_with("k_1.ptx:"))
        .unwrap_or_else(|| panic!("the error names no k_1.ptx: {e}"));
    let line: usize = place.split(':').nth(1).unwrap().parse().unwrap();
    let first = std::fs::read_to_string(kept2.join("k.ptx")).unwrap();
    let second = std::fs::read_to_string(kept2.join("k_1.ptx")).unwrap();
    assert!(
        first.contains("fine") && !second.contains(".entry fine"),
        "{first}"
    );
    assert!(
        second.lines().nth(line - 1).unwrap().contains("call"),
        "line {line} of k_1.ptx is not the call: {e}"
    );
}

fn an_lto_value_that_would_not_reach_the_code_is_an_error() {
    use ptxspec_core::props::{ImageProps, LTO_SYMBOLS_SET, PropertySets};
    let dir = compiled_examples();
    let prop = dir.join("matmul.prop");
    let text = std::fs::read_to_string(&prop).unwrap();
    let specialize = || specialize_matmul_lto(&dir);
    // The symbol renamed in the .prop: the LTO-IR's stays undefined.
    let mut sets = PropertySets::parse(&text).unwrap();
    let mut info = ImageProps::read(&sets).unwrap();
    for s in &mut info.lto_symbols {
        s.symbol = format!("{}_renamed", s.symbol);
    }
    sets.remove(LTO_SYMBOLS_SET);
    info.write(&mut sets);
    std::fs::write(&prop, sets.to_text()).unwrap();
    let (o, out) = specialize();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("Unresolved extern variable") && e.contains("8lto_slotI"),
        "{e}"
    );
    assert!(!out.exists());
    // The symbols missing from the .prop: nvJitLink would link without the
    // value, warning "Unresolved extern variable".
    let mut sets = PropertySets::parse(&text).unwrap();
    sets.remove(LTO_SYMBOLS_SET);
    std::fs::write(&prop, sets.to_text()).unwrap();
    let (o, out) = specialize();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("Unresolved extern variable"), "{e}");
    assert!(!out.exists());
    // The .prop as compile wrote it links.
    std::fs::write(&prop, &text).unwrap();
    let (o, out) = specialize();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.is_file());
}

fn each_image_links_only_its_own_units() {
    // tiny's getter declaration stands in the linked module under matmul,
    // which declared it first: tiny's LTO-IR held matmul's unit too.
    let dir = compiled_with_lto("own-units", &["matmul.cu", "tiny.cu"]);
    let units = |image: &str| -> Vec<String> {
        let bytes = std::fs::read(dir.join(format!("{image}.ltoir"))).unwrap();
        ptxspec_core::lto::LtoIr::from_bytes(&bytes)
            .unwrap()
            .units
            .into_iter()
            .map(|(name, _)| {
                Path::new(&name)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    };
    assert_eq!(units("tiny"), ["tiny.cu"]);
    assert_eq!(units("matmul"), ["matmul.cu"]);
}

/// A unit's LTO-IR holds all of its functions, also kernels that went into
/// another image and what they reach in other units (SYCL_EXTERNAL
/// functions, `__device__` variables): every image links those units too,
/// whatever its own kernels reach. Shapes: a function of another unit, a
/// variable of another unit, a chain of three units, and a kernel with a
/// constant whose unit's other kernel calls out. Each image of each case
/// links through LTO (ptxas said "Unresolved extern function" where the
/// unit was missing).
fn every_image_links_the_units_its_units_reach() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        (
            "function",
            &[
                (
                    "k.cu",
                    "__device__ double helper(double x);\n\
                     extern \"C\" __global__ void fp(double *o) { o[threadIdx.x] = helper(threadIdx.x); }\n\
                     extern \"C\" __global__ void plain(int *o) { o[threadIdx.x] = threadIdx.x; }\n",
                ),
                (
                    "h.cu",
                    "__device__ double helper(double x) { return x * 7.0; }\n",
                ),
            ],
        ),
        (
            "variable",
            &[
                (
                    "k.cu",
                    "extern __device__ double table[4];\n\
                     extern \"C\" __global__ void fp(double *o) { o[threadIdx.x] = table[threadIdx.x & 3] * threadIdx.x; }\n\
                     extern \"C\" __global__ void plain(int *o) { o[threadIdx.x] = threadIdx.x; }\n",
                ),
                ("t.cu", "__device__ double table[4] = {1, 2, 3, 4};\n"),
            ],
        ),
        (
            "chain",
            &[
                (
                    "k.cu",
                    "__device__ double middle(double x);\n\
                     extern \"C\" __global__ void fp(double *o) { o[threadIdx.x] = middle(threadIdx.x); }\n\
                     extern \"C\" __global__ void plain(int *o) { o[threadIdx.x] = threadIdx.x; }\n",
                ),
                (
                    "m.cu",
                    "__device__ double last(double x);\n\
                     __device__ double middle(double x) { return last(x) + 1.0; }\n",
                ),
                (
                    "l.cu",
                    "__device__ double last(double x) { return x * 3.0; }\n",
                ),
            ],
        ),
        (
            "constants",
            &[
                (
                    "k.cu",
                    "#include \"ptxspec.cuh\"\n\
                     constexpr ptxspec::specialization_id<int> scale_id{3};\n\
                     __device__ double helper(double x);\n\
                     extern \"C\" __global__ void fp(double *o) { o[threadIdx.x] = helper(threadIdx.x); }\n\
                     extern \"C\" __global__ void reads(int *o, ptxspec::kernel_handler h) {\n\
                       o[threadIdx.x] = h.get_specialization_constant<scale_id>();\n\
                     }\n",
                ),
                (
                    "h.cu",
                    "__device__ double helper(double x) { return x * 7.0; }\n",
                ),
            ],
        ),
    ];
    for (name, units) in cases {
        let src = tempdir(&format!("reach-{name}-src"));
        let out = tempdir(&format!("reach-{name}"));
        let paths: Vec<PathBuf> = units
            .iter()
            .map(|(file, text)| {
                let p = src.join(file);
                std::fs::write(&p, text).unwrap();
                p
            })
            .collect();
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "compile".as_ref(),
            "--lto".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ];
        args.extend(paths.iter().map(|p| p.as_os_str()));
        cli_ok(&args);
        let mut props: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "prop"))
            .collect();
        props.sort();
        // fp64 splits the kernels into two images.
        assert_eq!(props.len(), 2, "{name}: {props:?}");
        for prop in &props {
            let cubin = out.join(format!(
                "{}.cubin",
                prop.file_stem().unwrap().to_string_lossy()
            ));
            let o = cli(&[
                "specialize".as_ref(),
                prop.as_os_str(),
                "--via".as_ref(),
                "lto".as_ref(),
                "--arch".as_ref(),
                "sm_90".as_ref(),
                "-o".as_ref(),
                cubin.as_os_str(),
            ]);
            assert!(
                o.status.success(),
                "{name}: {}: {}",
                prop.display(),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// `PTXSPEC_TRACE=FILE`: the command writes a Chrome trace — one JSON
/// object a person opens in Perfetto — holding the cache tiers' look-ups
/// and the link (a span with its duration and the cubin's bytes, its
/// stages spans within it); a second
/// run finds the cubin in the disk cache and says so; a folder, or a file
/// in a folder that does not exist, is an error naming the variable.
fn a_trace_holds_the_look_ups_and_the_link() {
    let dir = compiled_examples();
    let cache = tempdir("trace-cache");
    let traced = |trace: &Path| {
        let out = cache.join("t.cubin");
        specialize_command(
            &dir.join("matmul.prop"),
            "block_size_id=4",
            "lto",
            &[],
            &out,
            &cache,
        )
        .env("PTXSPEC_TRACE", trace)
        .output()
        .unwrap()
    };
    let names = |trace: &Path| -> Vec<(String, serde_json::Value)> {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(trace).unwrap()).expect("a JSON trace");
        v["traceEvents"]
            .as_array()
            .expect("traceEvents")
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or_default().to_string(),
                    e.clone(),
                )
            })
            .collect()
    };
    let first = cache.join("first.json");
    let o = traced(&first);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let events = names(&first);
    let link = events
        .iter()
        .find(|(n, _)| n == "link (nvJitLink)")
        .unwrap_or_else(|| panic!("no link in {events:?}"));
    let (start, end) = {
        let ts = link.1["ts"].as_u64().unwrap();
        (ts, ts + link.1["dur"].as_u64().unwrap())
    };
    // The CLI links in a worker process (files are untrusted input): the
    // worker's life is a span within the link (its stages are the worker's;
    // `link_stages_are_spans_of_the_trace` sees them in a process that links
    // itself).
    let (_, worker) = events
        .iter()
        .find(|(n, _)| n == "nvJitLink in a worker process")
        .unwrap_or_else(|| panic!("no worker's span in {events:?}"));
    let ts = worker["ts"].as_u64().unwrap();
    assert!(
        worker["ph"] == "X" && ts >= start && ts + worker["dur"].as_u64().unwrap() <= end,
        "the worker's span outside the link {link:?}: {worker}"
    );
    assert!(
        link.1["dur"].as_u64().is_some() && link.1["ph"] == "X",
        "{link:?}"
    );
    assert!(
        link.1["args"]["bytes"]
            .as_str()
            .is_some_and(|b| b.parse::<u64>().unwrap() > 0)
    );
    assert!(
        events
            .iter()
            .any(|(n, _)| n == "cubin look-up: memory miss"),
        "{events:?}"
    );
    assert!(
        events.iter().any(|(n, _)| n == "cubin look-up: disk miss"),
        "{events:?}"
    );
    let second = cache.join("second.json");
    assert!(traced(&second).status.success());
    let events = names(&second);
    assert!(
        events.iter().any(|(n, _)| n == "cubin look-up: disk hit"),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|(n, _)| n.starts_with("link")),
        "{events:?}"
    );
    for bad in [cache.clone(), cache.join("nowhere/t.json")] {
        let o = traced(&bad);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains("PTXSPEC_TRACE"), "{e}");
    }
}

/// `ptxspec specialize matmul.prop --set block_size_id=8 --via lto --arch
/// sm_90` in `dir`, with `extra` arguments, into `out`.
fn specialize_matmul(dir: &Path, extra: &[&str], out: &Path) -> std::process::Output {
    let _ = std::fs::remove_file(out);
    let prop = dir.join("matmul.prop");
    specialize_command(
        &prop,
        "block_size_id=8",
        "lto",
        extra,
        out,
        &dir.join("cache"),
    )
    .output()
    .unwrap()
}

/// [`specialize_matmul`] into `dir/x.cubin`: its output and that path.
fn specialize_matmul_lto(dir: &Path) -> (std::process::Output, PathBuf) {
    let out = dir.join("x.cubin");
    (specialize_matmul(dir, &[], &out), out)
}

fn damaged_or_mismatched_image_files_are_named_before_use() {
    let dir = compiled_examples();
    let ltoir = dir.join("matmul.ltoir");
    let good = std::fs::read(&ltoir).unwrap();
    let expect_named = |file: &Path, what: &str| {
        let (o, out) = specialize_matmul_lto(&dir);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {e}");
        assert!(
            e.contains(&file.display().to_string()) && e.contains("SHA-256"),
            "{what}: {e}"
        );
        assert!(!out.exists(), "{what}");
    };
    // One flipped bit, anywhere: in the container's header, in the bitcode.
    for at in [0, 17, good.len() / 2, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        std::fs::write(&ltoir, &bad).unwrap();
        expect_named(&ltoir, &format!("bit flipped at {at}"));
    }
    // Another image's LTO-IR (it links silently without the hash).
    std::fs::copy(dir.join("conv3x3.ltoir"), &ltoir).unwrap();
    expect_named(&ltoir, "conv3x3's LTO-IR");
    std::fs::write(&ltoir, &good).unwrap();
    // The PTX edited.
    let ptx = dir.join("matmul.ptx");
    let text = std::fs::read_to_string(&ptx).unwrap();
    std::fs::write(&ptx, text.replace(".version", "// edited\n.version")).unwrap();
    expect_named(&ptx, "edited PTX");
    std::fs::write(&ptx, &text).unwrap();
    // An .ltoir whose hash the .prop does not record is not linked.
    let prop = dir.join("matmul.prop");
    let props = std::fs::read_to_string(&prop).unwrap();
    let mut sets = ptxspec_core::props::PropertySets::parse(&props).unwrap();
    let files = sets.get(ptxspec_core::props::FILES_SET).unwrap().clone();
    sets.remove(ptxspec_core::props::FILES_SET);
    for (k, v) in files.iter().filter(|(k, _)| *k != "ltoir") {
        sets.set_mut(ptxspec_core::props::FILES_SET)
            .insert(k, v.clone());
    }
    std::fs::write(&prop, sets.to_text()).unwrap();
    let (o, _) = specialize_matmul_lto(&dir);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("records no SHA-256"), "{e}");
    std::fs::write(&prop, &props).unwrap();
    let (o, out) = specialize_matmul_lto(&dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.is_file());
}

/// Hostile input that passes the hash (the .prop rewritten to match): the
/// damaged LTO-IR reaches nvJitLink, which may crash, abort or exit — in
/// the CLI's toolkit worker, so that `ptxspec` itself always ends with an
/// error naming what it was linking.
fn a_toolkit_crash_on_hostile_lto_ir_is_an_error_not_a_dead_process() {
    use ptxspec_core::props::{ImageFile, PropertySets, record_file_hash};
    let dir = compiled_examples();
    let (ltoir, prop) = (dir.join("matmul.ltoir"), dir.join("matmul.prop"));
    let (good, props) = (
        std::fs::read(&ltoir).unwrap(),
        std::fs::read_to_string(&prop).unwrap(),
    );
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut died = 0;
    for round in 0..10 {
        let mut bad = good.clone();
        // A few bytes of the bitcode changed (past the container's header,
        // which ptxspec reads itself).
        for _ in 0..4 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = 64 + (seed as usize) % (bad.len() - 64);
            bad[at] = (seed >> 32) as u8;
        }
        std::fs::write(&ltoir, &bad).unwrap();
        let mut sets = PropertySets::parse(&props).unwrap();
        record_file_hash(&mut sets, ImageFile::LtoIr, &bad);
        std::fs::write(&prop, sets.to_text()).unwrap();
        let _ = std::fs::remove_dir_all(dir.join("cache"));
        let (o, _) = specialize_matmul_lto(&dir);
        let e = String::from_utf8_lossy(&o.stderr);
        // Exit 0 (the damage did not matter) or 1 with a message; never a
        // signal, never another status.
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "round {round}: {:?}: {e}",
            o.status
        );
        if o.status.code() == Some(1) {
            assert!(e.contains("ptxspec: error:"), "round {round}: {e}");
        }
        if e.contains("toolkit worker") {
            died += 1;
            assert!(e.contains("died while linking"), "round {round}: {e}");
            if died == 1 {
                eprintln!("{e}");
            }
        }
    }
    eprintln!("the toolkit worker died in {died} of 10 rounds; ptxspec reported each");
    std::fs::write(&ltoir, &good).unwrap();
    std::fs::write(&prop, &props).unwrap();
}

/// Whether an ELF cubin has a code section for `kernel` (`.text.<kernel>`
/// in its section names, NUL-terminated).
fn has_kernel(cubin: &[u8], kernel: &str) -> bool {
    let name = format!(".text.{kernel}\0");
    cubin.windows(name.len()).any(|w| w == name.as_bytes())
}

/// nvJitLink compiles one kernel of an image with `-kernels-used`; a lone
/// name matches as a substring (`matmul` keeps `matmul_rolled`), a list of
/// it and a name that matches nothing keeps exactly it — checked here on
/// the nvJitLink this machine loads.
fn one_kernel_of_an_image_is_linked_alone() {
    use ptxspec_core::image::{LtoIrFile, read_written};
    use ptxspec_core::lto::{LinkRequest, cubin};
    let dir = compiled_examples();
    let run = |extra: &[&str], out: &Path| {
        let o = specialize_matmul(&dir, extra, out);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (whole, alone) = (dir.join("whole.cubin"), dir.join("alone.cubin"));
    assert_eq!(run(&[], &whole).0, Some(0));
    assert_eq!(run(&["--kernel", "matmul"], &alone).0, Some(0));
    let (whole, alone) = (std::fs::read(whole).unwrap(), std::fs::read(alone).unwrap());
    assert!(has_kernel(&whole, "matmul") && has_kernel(&whole, "matmul_rolled"));
    assert!(has_kernel(&alone, "matmul"), "the kernel asked for");
    assert!(
        !has_kernel(&alone, "matmul_rolled"),
        "only the kernel asked for"
    );
    assert!(alone.len() < whole.len());
    // Its SASS is the whole cubin's for that kernel.
    assert_eq!(sass(&alone, "matmul"), sass(&whole, "matmul"));
    // A kernel the image lacks, and --kernel without --via lto.
    let (code, err) = run(&["--kernel", "nope"], &dir.join("x.cubin"));
    assert_eq!(code, Some(1));
    assert!(
        err.contains("has no such kernel, or several of that C++ name (it has matmul"),
        "{err}"
    );
    // nvJitLink's own matching, the reason for the second name.
    let image = read_written(&dir.join("matmul.prop"), LtoIrFile::Required)
        .unwrap()
        .image;
    let lto = image.ltoir().unwrap();
    let definitions = image.lto_definitions(image.default_blob()).unwrap();
    let lone = cubin(&LinkRequest {
        ltoir: &lto.ir,
        // Not from the caches.
        ltoir_identity: ptxspec_core::digest::Digest::of(b"a link of this test's own"),
        definitions: &definitions,
        arch: 90,
        options: &["-kernels-used=matmul".into()],
        toolkit: &Default::default(),
        kernel: None,
        arguments: None,
    })
    .unwrap();
    assert!(
        has_kernel(&lone.bytes, "matmul_rolled"),
        "a lone -kernels-used=matmul no longer matches matmul_rolled: this nvJitLink matches exactly, \
         and the second name in lto::kernels_used is no longer needed"
    );
}

fn main() -> std::process::ExitCode {
    // (name, test, ignored because this machine has a CUDA toolkit, which
    // would be found where the test needs a library missing)
    let tests: Vec<(&str, fn(), bool)> = vec![
        (
            "lto_gives_the_literals_machine_code_and_ptx_need_not",
            lto_gives_the_literals_machine_code_and_ptx_need_not as fn(),
            false,
        ),
        (
            "fixed_arguments_give_the_literals_machine_code",
            fixed_arguments_give_the_literals_machine_code as fn(),
            false,
        ),
        (
            "fixed_kernels_keep_the_literals_read_only_loads",
            fixed_kernels_keep_the_literals_read_only_loads as fn(),
            false,
        ),
        (
            "kernels_with_a_handler_are_fixed_through_lto_at_the_literal",
            kernels_with_a_handler_are_fixed_through_lto_at_the_literal as fn(),
            false,
        ),
        (
            "divisions_by_known_values_leave_none_in_sass",
            divisions_by_known_values_leave_none_in_sass as fn(),
            false,
        ),
        (
            "loops_counted_by_known_values_unroll_in_sass",
            loops_counted_by_known_values_unroll_in_sass as fn(),
            false,
        ),
        (
            "shared_addresses_in_a_counted_loop_fold_in_sass",
            shared_addresses_in_a_counted_loop_fold_in_sass as fn(),
            false,
        ),
        (
            "tile_addresses_step_as_pointers_in_sass",
            tile_addresses_step_as_pointers_in_sass as fn(),
            false,
        ),
        (
            "disk_cache_across_processes_corruption_and_two_at_once",
            disk_cache_across_processes_corruption_and_two_at_once as fn(),
            false,
        ),
        (
            "a_missing_library_is_named_with_how_to_get_it",
            a_missing_library_is_named_with_how_to_get_it as fn(),
            system_toolkit(),
        ),
        (
            "a_debug_lto_build_for_a_device_links_now_and_logs",
            a_debug_lto_build_for_a_device_links_now_and_logs as fn(),
            false,
        ),
        (
            "link_stages_are_spans_of_the_trace",
            link_stages_are_spans_of_the_trace as fn(),
            false,
        ),
        (
            "dynamic_parallelism_resolves_with_the_device_runtime",
            dynamic_parallelism_resolves_with_the_device_runtime as fn(),
            false,
        ),
        (
            "build_support_compiles_a_folder_once",
            build_support_compiles_a_folder_once as fn(),
            false,
        ),
        (
            "the_default_architecture_is_not_deprecated",
            the_default_architecture_is_not_deprecated as fn(),
            false,
        ),
        (
            "wheels_are_found_through_the_python3_on_path",
            wheels_are_found_through_the_python3_on_path as fn(),
            system_toolkit(),
        ),
        (
            "build_scripts_embed_images_as_compile_wrote_them",
            build_scripts_embed_images_as_compile_wrote_them as fn(),
            false,
        ),
        (
            "a_trace_holds_the_look_ups_and_the_link",
            a_trace_holds_the_look_ups_and_the_link as fn(),
            false,
        ),
        (
            "every_image_links_the_units_its_units_reach",
            every_image_links_the_units_its_units_reach as fn(),
            false,
        ),
        (
            "a_handler_that_is_not_a_parameter_says_what_to_do",
            a_handler_that_is_not_a_parameter_says_what_to_do as fn(),
            false,
        ),
        (
            "errors_in_compiled_ptx_say_where_that_ptx_is",
            errors_in_compiled_ptx_say_where_that_ptx_is as fn(),
            false,
        ),
        (
            "an_lto_value_that_would_not_reach_the_code_is_an_error",
            an_lto_value_that_would_not_reach_the_code_is_an_error as fn(),
            false,
        ),
        (
            "each_image_links_only_its_own_units",
            each_image_links_only_its_own_units as fn(),
            false,
        ),
        (
            "damaged_or_mismatched_image_files_are_named_before_use",
            damaged_or_mismatched_image_files_are_named_before_use as fn(),
            false,
        ),
        (
            "a_toolkit_crash_on_hostile_lto_ir_is_an_error_not_a_dead_process",
            a_toolkit_crash_on_hostile_lto_ir_is_an_error_not_a_dead_process as fn(),
            false,
        ),
        (
            "one_kernel_of_an_image_is_linked_alone",
            one_kernel_of_an_image_is_linked_alone as fn(),
            false,
        ),
    ];
    let found_here: Vec<&str> = tests
        .iter()
        .filter(|(_, _, found)| *found)
        .map(|(name, _, _)| *name)
        .collect();
    harness::run_unless(
        "toolchain",
        tests
            .into_iter()
            .map(|(name, test, _)| (name, test, harness::NVIDIA))
            .collect(),
        |name| {
            found_here.contains(&name).then(|| {
                "this machine has a CUDA toolkit (/usr/local/cuda or /opt/cuda), which ptxspec finds \
                 where the test needs a library missing"
                    .into()
            })
        },
    )
}
