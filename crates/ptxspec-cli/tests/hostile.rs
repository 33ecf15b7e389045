//! The second hostile round (issue 32): each case found by the adversarial
//! review against the landed CLI and library, as a test that failed on the
//! code before its fix. The rule: a clean error naming what and where, or
//! the correct result — never merged constants, a silently wrong value, an
//! overwritten input or special file, or unbounded time.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use common::*;
use ptxspec_core::compile::{self, CompileOptions};
use ptxspec_core::postlink::{self, Options, Split};

/// NVRTC's PTX of `source` (the device header on the include path), named
/// `name` (`dir/k.ptx`: the post-link's unit and image names come from it).
fn ptx_of(name: &str, source: &str) -> (String, String) {
    let header = compile::header_dir(Some(&tempdir("hostile-header"))).unwrap();
    let unit = compile::compile_unit(name, source, &CompileOptions::default(), &header)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (name.to_string(), unit.ptx)
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// Writes `source` as `dir/name`, then `ptxspec compile`s it into `out`.
fn compiled(dir: &Path, name: &str, source: &str) -> PathBuf {
    compiled_with(dir, name, source, &[])
}

/// [`compiled`] with more `ptxspec compile` options.
fn compiled_with(dir: &Path, name: &str, source: &str, options: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join(name);
    std::fs::write(&src, source).unwrap();
    let out = dir.join("out");
    let mut args = vec![os("compile"), os("-o"), out.as_os_str()];
    args.extend(options.iter().map(|o| os(o)));
    args.push(src.as_os_str());
    cli_ok(&args);
    out
}

const INT_SC: &str = r#"#include "ptxspec.cuh"
static constexpr ptxspec::specialization_id<int> sc{7};
extern "C" __global__ void ka(int *out, ptxspec::kernel_handler h) { *out = h.get_specialization_constant<sc>(); }
"#;
const FLOAT_SC: &str = r#"#include "ptxspec.cuh"
static constexpr ptxspec::specialization_id<float> sc{1.5f};
extern "C" __global__ void kb(float *out, ptxspec::kernel_handler h) { *out = h.get_specialization_constant<sc>(); }
"#;

/// 1. Internal constants of two units whose files share a stem would both be
///    `sc@k`: refused, naming both files, in every split.
fn two_units_of_one_file_stem_are_refused_not_merged() {
    let a = ptx_of("a/k.ptx", INT_SC);
    let b = ptx_of("b/k.ptx", FLOAT_SC);
    for split in [Split::Off, Split::Auto, Split::PerKernel] {
        let opts = Options {
            split,
            ..Default::default()
        };
        let e = postlink::post_link(vec![a.clone(), b.clone()], &opts).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("a/k.ptx") && msg.contains("b/k.ptx") && msg.contains("sc@k"),
            "{split:?}: {msg}"
        );
    }
    // Stems that differ keep the constants apart, as README promises.
    let b = ptx_of("b/j.ptx", FLOAT_SC);
    let images = post_link(vec![a, b], postlink::Mode::Emulated, Split::Off);
    let ids: Vec<&str> = images[0]
        .layout
        .constants()
        .iter()
        .map(|p| p.constant.symbolic_id())
        .collect();
    assert_eq!(ids, ["sc@k", "sc@j"]);
}

/// 2. One explicit ID on an int in one unit and a float in another, or an
///    explicit ID equal to another constant's own name: an error naming the ID,
///    never one merged constant.
fn one_id_on_two_different_constants_is_refused() {
    let int = ptx_of(
        "i.ptx",
        r#"#include "ptxspec.cuh"
PTXSPEC_SPECIALIZATION_ID_NAMED(a, "shared.id", int, 3);
extern "C" __global__ void ki(int *out, ptxspec::kernel_handler h) { *out = h.get_specialization_constant<a>(); }
"#,
    );
    let float = ptx_of(
        "f.ptx",
        r#"#include "ptxspec.cuh"
PTXSPEC_SPECIALIZATION_ID_NAMED(b, "shared.id", float, 3.0f);
extern "C" __global__ void kf(float *out, ptxspec::kernel_handler h) { *out = h.get_specialization_constant<b>(); }
"#,
    );
    let e = postlink::post_link(vec![int.clone(), float], &Options::default()).unwrap_err();
    assert!(
        e.to_string().contains("'shared.id' is declared twice"),
        "{e}"
    );
    // The same type, another default.
    let other_default = ptx_of(
        "g.ptx",
        r#"#include "ptxspec.cuh"
PTXSPEC_SPECIALIZATION_ID_NAMED(c, "shared.id", int, 4);
extern "C" __global__ void kg(int *out, ptxspec::kernel_handler h) { *out = h.get_specialization_constant<c>(); }
"#,
    );
    let e = postlink::post_link(vec![int.clone(), other_default], &Options::default()).unwrap_err();
    assert!(e.to_string().contains("default values"), "{e}");
    // An explicit ID that is another constant's own name.
    let named = ptx_of(
        "n.ptx",
        r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> sc{5};
PTXSPEC_SPECIALIZATION_ID_NAMED(other, "sc", float, 2.5f);
extern "C" __global__ void kn(float *out, ptxspec::kernel_handler h) {
  *out = h.get_specialization_constant<sc>() + h.get_specialization_constant<other>();
}
"#,
    );
    let e = postlink::post_link(vec![named], &Options::default()).unwrap_err();
    assert!(e.to_string().contains("'sc' is declared twice"), "{e}");
    // One constant in a shared header, read by two units: still one.
    let shared = |unit: &str, kernel: &str| {
        ptx_of(
            &format!("{unit}.ptx"),
            &format!(
                r#"#include "ptxspec.cuh"
inline constexpr ptxspec::specialization_id<int> shared_sc{{9}};
extern "C" __global__ void {kernel}(int *out, ptxspec::kernel_handler h) {{ *out = h.get_specialization_constant<shared_sc>(); }}
"#
            ),
        )
    };
    let images = post_link(
        vec![shared("u1", "k1"), shared("u2", "k2")],
        postlink::Mode::Emulated,
        Split::Off,
    );
    assert_eq!(images[0].layout.constants().len(), 1);
}

/// 3. `__half` and `__nv_bfloat16` constants (read through the composite
///    getter, `…I6__halfE…`) are 16-bit floats: `--set h=1` bakes half 1.0
///    (0x3C00), not the integer 1; 1.5 is taken.
fn half_and_bfloat16_constants_take_float_values() {
    let dir = tempdir("hostile-half");
    let out = compiled(
        &dir,
        "h.cu",
        r#"#include "ptxspec.cuh"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
constexpr ptxspec::specialization_id<__half> hid{__half_raw{0x4000}};
constexpr ptxspec::specialization_id<__nv_bfloat16> bid{__nv_bfloat16_raw{0x4000}};
extern "C" __global__ void kh(__half *out, __nv_bfloat16 *bout, ptxspec::kernel_handler h) {
  *out = h.get_specialization_constant<hid>();
  *bout = h.get_specialization_constant<bid>();
}
"#,
    );
    let prop = out.join("h.prop");
    for (set, want) in [
        ("hid=1", "0x3C00"),
        ("hid=1.5", "0x3E00"),
        ("hid=-2", "0xC000"),
        ("bid=1", "0x3F80"),
        ("bid=-1.5", "0xBFC0"),
    ] {
        let spec = dir.join("s.ptx");
        let _ = std::fs::remove_file(&spec);
        cli_ok(&[
            os("specialize"),
            prop.as_os_str(),
            os("--set"),
            os(set),
            os("--via"),
            os("ptx"),
            os("-o"),
            spec.as_os_str(),
        ]);
        let text = std::fs::read_to_string(&spec).unwrap();
        assert!(
            text.contains(&format!("mov.b16 %rs1, {want};"))
                || text.contains(&format!("mov.b16 %rs2, {want};")),
            "{set}: no {want} in\n{text}"
        );
    }
    // Past the largest half: an error, not infinity.
    let e = cli(&[
        os("specialize"),
        prop.as_os_str(),
        os("--set"),
        os("hid=70000"),
        os("--via"),
        os("ptx"),
        os("-o"),
        dir.join("t.ptx").as_os_str(),
    ]);
    assert!(!e.status.success());
    assert!(
        String::from_utf8_lossy(&e.stderr).contains("__half"),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
    // The Rust side: SpecId<F16> and SpecId<BF16> are their types.
    let image = ptxspec::image::Image::read(&prop).unwrap();
    let mut input = ptxspec::KernelBundle::from_images([image]);
    input
        .set_specialization_constant(
            &ptxspec::SpecId::<ptxspec::F16>::new("hid"),
            ptxspec::F16(0x3c00),
        )
        .unwrap();
    input
        .set_specialization_constant(
            &ptxspec::SpecId::<ptxspec::BF16>::new("bid"),
            ptxspec::BF16(0x3f80),
        )
        .unwrap();
    assert!(
        input
            .set_specialization_constant(
                &ptxspec::SpecId::<ptxspec::BF16>::new("hid"),
                ptxspec::BF16(0)
            )
            .is_err()
    );
}

/// 7. A `float` from text is rounded once, as C's `strtof`:
///    1.0000000596046448 is just above the midpoint of 1 and the next float,
///    so it is 0x3F800001 (through `double` first it was 0x3F800000).
fn a_float_from_text_is_rounded_once() {
    use ptxspec_core::layout::{ScalarKind, text::parse_value};
    let leaf = [(0, ScalarKind::F32)];
    let bits = |t: &str| {
        u32::from_le_bytes(
            parse_value(t, 4, &leaf, &[0; 4])
                .unwrap()
                .try_into()
                .unwrap(),
        )
    };
    assert_eq!(bits("1.0000000596046448"), 0x3F80_0001);
    assert_eq!(bits("1.00000005960464477539062499"), 0x3F80_0000);
    assert_eq!(bits("16777217"), 0x4B80_0000);
    assert_eq!(bits("0x1000001"), 0x4B80_0000);
    assert_eq!(bits("0x1000003"), 0x4B80_0002);
    let half = [(0, ScalarKind::F16)];
    let hbits = |t: &str| {
        u16::from_le_bytes(
            parse_value(t, 2, &half, &[0; 2])
                .unwrap()
                .try_into()
                .unwrap(),
        )
    };
    // Through float first, 1 + 2^-11 + 2^-40 rounded to 1 + 2^-11 (the
    // half midpoint) and then down to 1.0: once, it is above the midpoint.
    assert_eq!(hbits("1.000488281250909494701772928237915039062"), 0x3C01);
}

/// 4. The kernel_handler found by what the code does with the kernel's
///    parameters, never by position (issue 40.11: a handler passed by
///    reference to a device function that takes it second silently made the
///    user's pointer the buffer). For every way the handler reaches a getter
///    — directly, by value or by reference through one or two device
///    functions, taken first or last there, by pointer, in a debug build
///    (`-G`: through the stack and `this`) — a kernel whose handler is last
///    gets that parameter as its buffer, and one whose handler is first is
///    refused, for C++ names and `extern "C"` ones. A handler inside a
///    struct passed by reference cannot be traced: refused either way.
fn the_handler_is_found_by_data_flow_for_every_way_it_reaches_a_getter() {
    // (what, device functions, the kernel's body; `H` is the handler, `O`
    // the user's pointer)
    let ways: [(&str, &str, &str); 8] = [
        ("directly", "", "*O = H.get_specialization_constant<sc>();"),
        (
            "by value",
            "__device__ __noinline__ void put(float *o, ptxspec::kernel_handler h) { *o = h.get_specialization_constant<sc>(); }",
            "put(O, H);",
        ),
        (
            "by value, taken first",
            "__device__ __noinline__ void put(ptxspec::kernel_handler h, float *o) { *o = h.get_specialization_constant<sc>(); }",
            "put(H, O);",
        ),
        (
            "by reference, taken second",
            "__device__ __noinline__ void put(float *o, const ptxspec::kernel_handler &h) { *o = h.get_specialization_constant<sc>(); }",
            "put(O, H);",
        ),
        (
            "by reference, taken first",
            "__device__ __noinline__ void put(const ptxspec::kernel_handler &h, float *o) { *o = h.get_specialization_constant<sc>(); }",
            "put(H, O);",
        ),
        (
            "by pointer",
            "__device__ __noinline__ void put(float *o, const ptxspec::kernel_handler *h) { *o = h->get_specialization_constant<sc>(); }",
            "put(O, &H);",
        ),
        (
            "by reference through two functions",
            "__device__ __noinline__ float get(const ptxspec::kernel_handler &h) { return h.get_specialization_constant<sc>(); }\n\
             __device__ __noinline__ void put(float *o, const ptxspec::kernel_handler &h) { *o = get(h); }",
            "put(O, H);",
        ),
        (
            "by value, then by reference",
            "__device__ __noinline__ float get(const ptxspec::kernel_handler &h) { return h.get_specialization_constant<sc>(); }\n\
             __device__ __noinline__ void put(float *o, ptxspec::kernel_handler h) { *o = get(h); }",
            "put(O, H);",
        ),
    ];
    let dir = tempdir("hostile-handler-shapes");
    let header = compile::header_dir(Some(&dir)).unwrap();
    let mut cases = 0;
    for (what, device, body) in ways {
        for linkage in ["extern \"C\"", ""] {
            for debug in [false, true] {
                for last in [true, false] {
                    let params = if last {
                        "float *O, ptxspec::kernel_handler H"
                    } else {
                        "ptxspec::kernel_handler H, float *O"
                    };
                    let src = format!(
                        "#include \"ptxspec.cuh\"\nconstexpr ptxspec::specialization_id<float> sc{{7}};\n\
                         {device}\n{linkage} __global__ void kh({params}) {{ {body} }}\n"
                    );
                    let opts = CompileOptions {
                        extra: if debug { vec!["-G".into()] } else { vec![] },
                        ..CompileOptions::default()
                    };
                    let unit = compile::compile_unit("h.cu", &src, &opts, &header)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let shape = format!("{what} ({linkage}, debug {debug}, handler last {last})");
                    let result = postlink::post_link(
                        vec![("h.ptx".to_string(), unit.ptx)],
                        &Options::default(),
                    );
                    match (last, result) {
                        (true, Ok(images)) => {
                            let k = &images[0].kernels[0];
                            assert_eq!(k.buffer_param(), Some(1), "{shape}");
                            assemble(&images[0].ptx, "sm_90", &shape);
                        }
                        (false, Err(e)) => {
                            assert!(e.to_string().contains("last parameter"), "{shape}: {e}")
                        }
                        (true, Err(e)) => panic!("{shape}: refused: {e}"),
                        (false, Ok(images)) => panic!(
                            "{shape}: accepted, buffer {:?}",
                            images[0].kernels[0].buffer_param()
                        ),
                    }
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 64);
    // Inside a struct passed by reference: not traced, refused.
    let src = "#include \"ptxspec.cuh\"\nconstexpr ptxspec::specialization_id<float> sc{7};\n\
               struct Both { float *o; ptxspec::kernel_handler h; };\n\
               __device__ __noinline__ void put(const Both &b) { *b.o = b.h.get_specialization_constant<sc>(); }\n\
               extern \"C\" __global__ void ks(float *O, ptxspec::kernel_handler H) { Both b{O, H}; put(b); }\n";
    let unit = compile::compile_unit("s.cu", src, &CompileOptions::default(), &header).unwrap();
    let e = postlink::post_link(vec![("s.ptx".to_string(), unit.ptx)], &Options::default())
        .unwrap_err();
    assert!(
        e.to_string().contains("cannot be traced") || e.to_string().contains("kernel_handler"),
        "{e}"
    );
}

/// 5. A getter behind an indirect call (a function-pointer table): the
///    kernel cannot be traced; an error naming where the address is taken,
///    not a kernel without a buffer whose callee reads one.
fn getters_behind_an_indirect_call_are_refused() {
    let src = r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> sc{7};
__device__ __noinline__ int get(ptxspec::kernel_handler h) { return h.get_specialization_constant<sc>(); }
typedef int (*getter_t)(ptxspec::kernel_handler);
__device__ getter_t table[1] = {get};
extern "C" __global__ void ki(int *out, int which, ptxspec::kernel_handler h) { *out = table[which](h); }
"#;
    let e = postlink::post_link(vec![ptx_of("ind.ptx", src)], &Options::default()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("its address is taken at ind.ptx:") && msg.contains("function pointer"),
        "{msg}"
    );
}

/// `ptxspec specialize IMAGE.prop --set ARG --via ptx -o OUT`: the
/// specialized PTX, or the error's text.
fn specialize_ptx(prop: &Path, arg: &str, out: &Path) -> Result<String, String> {
    let _ = std::fs::remove_file(out);
    let o = cli(&[
        os("specialize"),
        prop.as_os_str(),
        os("--set"),
        os(arg),
        os("--via"),
        os("ptx"),
        os("-o"),
        out.as_os_str(),
    ]);
    match o.status.success() {
        true => Ok(std::fs::read_to_string(out).unwrap()),
        false => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
    }
}

/// 6. Composite values on the command line are parsed against the
///    constant (the scalars every kernel of the module reads), the same in
///    every image: `struct S {int a, b, c}` read as `.a`/`.c` by one kernel
///    and `.b` by another takes `7,8,9` in both images. Where no kernel reads
///    a member, numbers cannot be matched to members: refused, pointing to
///    `bytes:`, in every image alike (`7` set `.a` in one image and `.c` in
///    another).
fn composite_values_are_parsed_against_the_constant_in_every_image() {
    let dir = tempdir("hostile-composite");
    let all = compiled_with(
        &dir.join("all"),
        "s.cu",
        r#"#include "ptxspec.cuh"
struct S { int a, b, c; };
constexpr ptxspec::specialization_id<S> sid{S{1, 2, 3}};
extern "C" __global__ void k1(int *out, ptxspec::kernel_handler h) { S s = h.get_specialization_constant<sid>(); out[0] = s.a; out[1] = s.c; }
extern "C" __global__ void k2(int *out, ptxspec::kernel_handler h) { S s = h.get_specialization_constant<sid>(); out[0] = s.b; }
"#,
        &["--split", "per_kernel"],
    );
    for k in ["k1", "k2"] {
        let ptx = specialize_ptx(
            &all.join(format!("{k}.prop")),
            "sid=7,8,9",
            &dir.join("s.ptx"),
        )
        .unwrap_or_else(|e| panic!("{k}: {e}"));
        for v in ["0x00000007", "0x00000008", "0x00000009"] {
            assert!(ptx.contains(v), "{k}: no {v}");
        }
    }
    let gap = compiled_with(
        &dir.join("gap"),
        "s.cu",
        r#"#include "ptxspec.cuh"
struct S { int a, b, c; };
constexpr ptxspec::specialization_id<S> sid{S{1, 2, 3}};
extern "C" __global__ void k1(int *out, ptxspec::kernel_handler h) { out[0] = h.get_specialization_constant<sid>().a; }
extern "C" __global__ void k2(int *out, ptxspec::kernel_handler h) { out[0] = h.get_specialization_constant<sid>().c; }
"#,
        &["--split", "per_kernel"],
    );
    for k in ["k1", "k2"] {
        let prop = gap.join(format!("{k}.prop"));
        for arg in ["sid=7,8,9", "sid=7", "sid=7,9"] {
            let e = specialize_ptx(&prop, arg, &dir.join("s.ptx")).unwrap_err();
            assert!(
                e.contains("only partly known") && e.contains("bytes 4 to 8"),
                "{k} {arg}: {e}"
            );
        }
        let ptx = specialize_ptx(
            &prop,
            "sid=bytes:070000000800000009000000",
            &dir.join("s.ptx"),
        )
        .unwrap();
        assert!(
            ptx.contains("0x00000007") || ptx.contains("0x00000009"),
            "{k}"
        );
    }
}

/// A unit of hand-written PTX declaring `.common .global .align A .b8
/// buf[N]`, with a kernel that writes its last byte.
fn common_unit(kernel: &str, align: u32, size: u32) -> String {
    format!(
        ".version 7.0\n.target sm_70\n.address_size 64\n\
         .common .global .align {align} .b8 buf[{size}];\n\
         .visible .entry {kernel}()\n{{\n\t.reg .b16 %rs<2>;\n\tmov.u16 %rs1, 1;\n\
         \tst.global.u8 [buf+{last}], %rs1;\n\tret;\n}}\n",
        last = size - 1
    )
}

/// 9. `.common` variables resolve to the largest declaration and its
///    alignment, as CUDA's linker does (the first, of 16 bytes, let the other
///    unit's code write past it).
fn common_variables_resolve_to_the_largest_declaration() {
    for order in [
        [("small.ptx", 4, 16), ("large.ptx", 16, 64)],
        [("large.ptx", 16, 64), ("small.ptx", 4, 16)],
    ] {
        let inputs: Vec<(String, String)> = order
            .iter()
            .map(|&(name, align, size)| {
                (
                    name.to_string(),
                    common_unit(name.trim_end_matches(".ptx"), align, size),
                )
            })
            .collect();
        let images = post_link(inputs, postlink::Mode::Emulated, Split::Off);
        let ptx = &images[0].ptx;
        let decls: Vec<&str> = ptx.lines().filter(|l| l.contains(" buf[")).collect();
        assert_eq!(
            decls,
            [".common .global .align 16 .b8 buf[64];"],
            "{order:?}"
        );
        assemble(ptx, "sm_70", "common");
    }
}

/// 10. A `.prop` (untrusted: its PTX and LTO-IR hashes intact) whose kernel
///     signatures name a kernel neither file defines, or other parameters than
///     the PTX declares: refused when read, never an empty cubin and exit 0.
fn kernel_signatures_are_checked_against_the_code() {
    let dir = tempdir("hostile-ghost");
    let src = dir.join("g.cu");
    std::fs::write(
        &src,
        r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> sc{7};
extern "C" __global__ void real(int *out, ptxspec::kernel_handler h) { *out = h.get_specialization_constant<sc>(); }
"#,
    )
    .unwrap();
    let out = dir.join("out");
    cli_ok(&[
        os("compile"),
        os("--lto"),
        os("-o"),
        out.as_os_str(),
        src.as_os_str(),
    ]);
    let prop = out.join("g.prop");
    let text = std::fs::read_to_string(&prop).unwrap();
    let real_line = text
        .lines()
        .find(|l| l.starts_with("real="))
        .unwrap()
        .to_string();
    let tampered = [
        // Another kernel's name for the same signature.
        text.replace(&real_line, &real_line.replacen("real=", "ghost=", 1)),
        // The signature of a kernel with one parameter more.
        text.replace(
            &real_line,
            &format!("{real_line}\nreal2={}", &real_line[5..]),
        ),
    ];
    for (n, t) in tampered.iter().enumerate() {
        let bad = out.join(format!("bad{n}"));
        std::fs::create_dir_all(&bad).unwrap();
        for ext in ["ptx", "ltoir"] {
            std::fs::copy(out.join(format!("g.{ext}")), bad.join(format!("g.{ext}"))).unwrap();
        }
        std::fs::write(bad.join("g.prop"), t).unwrap();
        let cubin = bad.join("g.cubin");
        let o = cli(&[
            os("specialize"),
            bad.join("g.prop").as_os_str(),
            os("--set"),
            os("sc=3"),
            os("--via"),
            os("lto"),
            os("--arch"),
            os("sm_90"),
            os("--kernel"),
            os(if n == 0 { "ghost" } else { "real2" }),
            os("-o"),
            cubin.as_os_str(),
        ]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{n}: {stderr}");
        assert!(
            stderr.contains("does not define") || stderr.contains("the PTX declares"),
            "{n}: {stderr}"
        );
        assert!(!cubin.exists(), "{n}");
    }
}

/// 11. IDs the property-set format cannot hold (`a=b`, `[sec]`, a line
///     break) are refused at post-link, naming the ID — not written so that the
///     `.prop` fails to read or reads back without the constant.
fn ids_a_property_file_cannot_hold_are_refused() {
    for id in ["a=b", "[sec]", "line\\nbreak"] {
        let src = format!(
            r#"#include "ptxspec.cuh"
PTXSPEC_SPECIALIZATION_ID_NAMED(c, "{id}", int, 1);
extern "C" __global__ void k(int *out, ptxspec::kernel_handler h) {{ *out = h.get_specialization_constant<c>(); }}
"#
        );
        let e =
            postlink::post_link(vec![ptx_of("ids.ptx", &src)], &Options::default()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("cannot be written into the image's property file")
                && msg.contains("ids.ptx:"),
            "{id}: {msg}"
        );
    }
    // Anything else is an ID, and round-trips (spaces, '|', '#', unicode).
    let src = r#"#include "ptxspec.cuh"
PTXSPEC_SPECIALIZATION_ID_NAMED(c, "a b|c#d ü", int, 1);
extern "C" __global__ void k(int *out, ptxspec::kernel_handler h) { *out = h.get_specialization_constant<c>(); }
"#;
    let images = post_link(
        vec![ptx_of("ok.ptx", src)],
        postlink::Mode::Emulated,
        Split::Off,
    );
    let back = ptxspec::image::Image::new("ok", images[0].ptx.clone(), &images[0].props.to_text())
        .unwrap();
    assert_eq!(
        back.specialization_constants().collect::<Vec<_>>(),
        ["a b|c#d ü"]
    );
}

/// 13. `compile` writes the device header into a private folder made
///     afresh (mode 0700, never one that exists: a planted symlink is not
///     followed) and removes it at the end; before, it was
///     `$TMPDIR/ptxspec-include-<pid>`, written through whatever was there, and
///     left behind.
fn the_header_folder_is_private_fresh_and_removed() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempdir("hostile-tmpdir");
    let victim = tmp.join("victim.txt");
    std::fs::write(&victim, "someone else's file").unwrap();
    // Links planted at every name the old code could have used for the
    // next few process IDs.
    let next_pid = std::process::id();
    let planted_names: Vec<String> = (next_pid..next_pid + 200)
        .map(|pid| format!("ptxspec-include-{pid}"))
        .collect();
    for name in &planted_names {
        let planted = tmp.join(name);
        std::fs::create_dir_all(&planted).unwrap();
        let _ = std::os::unix::fs::symlink(&victim, planted.join("ptxspec.cuh"));
    }
    let src = tmp.join("t.cu");
    std::fs::write(
        &src,
        "#include \"ptxspec.cuh\"\nextern \"C\" __global__ void k(int *o) { *o = 1; }\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptxspec"))
        .args([
            os("compile"),
            os("-o"),
            tmp.join("out").as_os_str(),
            src.as_os_str(),
        ])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "someone else's file"
    );
    let left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ptxspec-include-") && !planted_names.contains(n))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // In-process: private, distinct, gone once dropped.
    let a = compile::header_dir(None).unwrap();
    let b = compile::header_dir(None).unwrap();
    assert_ne!(a.to_path_buf(), b.to_path_buf());
    assert_eq!(
        std::fs::metadata(&*a).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::read_to_string(a.join("ptxspec.cuh")).unwrap(),
        compile::HEADER
    );
    let path = a.to_path_buf();
    drop(a);
    assert!(!path.exists());
}

/// An image with one `int` constant `sc`, compiled into `dir/out`.
fn small_image(dir: &Path) -> PathBuf {
    compiled(dir, "small.cu", ONE_CONSTANT_KERNEL).join("small.prop")
}

/// 14. Outputs that are not regular files are written through, never
///     replaced: a link of one's own to `/dev/full` reports no space (it
///     "succeeded"), a FIFO stays a FIFO and its reader gets the bytes. A
///     link to a regular file is never resolved (in a shared folder it may be
///     anyone's): the link itself is replaced by the output, its target kept.
fn special_outputs_are_written_through_not_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempdir("hostile-special");
    let prop = small_image(&dir);
    let specialize = |out: &Path, set: &str| {
        cli(&[
            os("specialize"),
            prop.as_os_str(),
            os("--set"),
            os(set),
            os("--via"),
            os("ptx"),
            os("-o"),
            out.as_os_str(),
        ])
    };
    let is_link = |p: &Path| {
        std::fs::symlink_metadata(p)
            .unwrap()
            .file_type()
            .is_symlink()
    };
    let full = dir.join("to-full");
    std::os::unix::fs::symlink("/dev/full", &full).unwrap();
    let o = specialize(&full, "sc=3");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("No space left on device"),
        "{e}"
    );
    assert!(is_link(&full));
    let target = dir.join("target.ptx");
    std::fs::write(&target, "old").unwrap();
    let link = dir.join("link.ptx");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(specialize(&link, "sc=3").status.success());
    assert!(!is_link(&link));
    assert!(
        std::fs::read_to_string(&link)
            .unwrap()
            .contains("0x00000003")
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let written = specialize(&fifo, "sc=4").status.success();
    if !written {
        // Let the reader go (it waits for a writer), then fail.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo));
    }
    let read = reader.join().unwrap();
    assert!(written && read.contains("0x00000004"), "{read}");
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

/// 15. `aspect-filter IN -o IN` (or through a link) would write over the
///     table whose rows the next post-link uses to remove stale images:
///     refused, the table unchanged.
fn aspect_filter_never_writes_over_its_input() {
    let dir = tempdir("hostile-filter");
    let prop = small_image(&dir);
    let table = prop.with_file_name("table.txt");
    let before = std::fs::read(&table).unwrap();
    let link = dir.join("link.txt");
    std::os::unix::fs::symlink(&table, &link).unwrap();
    for out in [&table, &link] {
        let o = cli(&[
            os("aspect-filter"),
            os("--target=sm_80"),
            table.as_os_str(),
            os("-o"),
            out.as_os_str(),
        ]);
        assert!(!o.status.success());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("that is the input"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(std::fs::read(&table).unwrap(), before);
    }
}

/// 16. A stale table row naming a folder, `..`, the journal or another
///     file the post-link did not write: skipped — the run succeeds, the folder
///     is never wedged behind a journal, and the next post-link and reader work.
fn stale_rows_that_name_no_image_file_never_wedge_the_folder() {
    let dir = tempdir("hostile-stale");
    let prop = small_image(&dir);
    let out = prop.parent().unwrap().to_path_buf();
    let ptx = out.join("small.ptx");
    let again = dir.join("again");
    std::fs::create_dir_all(&again).unwrap();
    let input = again.join("in.ptx");
    // PTX to post-link again into `out` (the image's PTX is post-linked
    // already: NVRTC's output of the same source instead).
    let (_, nvrtc) = ptx_of("in.ptx", ONE_CONSTANT_KERNEL);
    std::fs::write(&input, nvrtc).unwrap();
    std::fs::create_dir_all(out.join("afolder.ptx")).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    std::fs::write(
        out.join("table.txt"),
        "[Code|Properties|Symbols]\nafolder.ptx|..|.ptxspec-journal\nnotes.txt|small.prop|table.txt\n",
    )
    .unwrap();
    for _ in 0..2 {
        cli_ok(&[
            os("post-link"),
            os("-o"),
            out.as_os_str(),
            input.as_os_str(),
        ]);
        assert!(!out.join(".ptxspec-journal").exists());
        assert!(out.join("afolder.ptx").is_dir());
        assert_eq!(
            std::fs::read_to_string(out.join("notes.txt")).unwrap(),
            "mine"
        );
        assert!(out.join("in.prop").is_file());
        cli_ok(&[os("inspect"), out.join("in.prop").as_os_str()]);
    }
    // Of the old image, what the old table listed went; what it did not,
    // stayed.
    assert!(!out.join("small.prop").exists());
    assert!(ptx.exists());
}

/// 17. Readers take time about linear in what they read: a `.prop` of
///     200 000 empty property sets (1.9 MB) and a `table.txt` of 100 000 rows
///     took over 20 s each (quadratic lookups); the bounds here are far above
///     what linear work takes in a debug build, far below quadratic.
fn many_sets_and_rows_are_read_in_linear_time() {
    let dir = tempdir("hostile-quadratic");
    let mut prop = String::with_capacity(2 << 20);
    for i in 0..200_000 {
        prop.push_str(&format!("[set {i}]\n"));
    }
    let started = std::time::Instant::now();
    let sets = ptxspec_core::props::PropertySets::parse(&prop).unwrap();
    assert_eq!(sets.iter().count(), 200_000);
    assert!(sets.get("set 199999").is_some());
    let path = dir.join("many.prop");
    std::fs::write(&path, &prop).unwrap();
    let _ = cli(&[os("inspect"), path.as_os_str()]);
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());

    let prop = small_image(&dir.join("img"));
    let out = prop.parent().unwrap().to_path_buf();
    let mut table = String::from("[Code|Properties|Symbols]\n");
    for i in 0..100_000 {
        table.push_str(&format!("x{i}.ptx|x{i}.prop|x{i}.sym\n"));
    }
    std::fs::write(out.join("table.txt"), table).unwrap();
    let (_, nvrtc) = ptx_of(
        "in.ptx",
        "#include \"ptxspec.cuh\"\nextern \"C\" __global__ void k(int *o) { *o = 1; }\n",
    );
    let input = dir.join("in.ptx");
    std::fs::write(&input, nvrtc).unwrap();
    let started = std::time::Instant::now();
    cli_ok(&[
        os("post-link"),
        os("-o"),
        out.as_os_str(),
        input.as_os_str(),
    ]);
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
}

/// 18b. The data-flow analyses of a kernel's parameters (which may hold an
///     address, which are read only through the read-only cache) went over
///     the whole body until nothing changed: a parameter passed down a chain
///     of moves written backwards took a pass a link — 8 000 moves 15 s,
///     quadratic. Each instruction is looked at again only when what it
///     reads grew: linear. Within a bound far above linear work in a debug
///     build, far below quadratic; the answers those of a short chain.
fn parameter_analyses_are_linear_in_a_chain_written_backwards() {
    let n = 40_000;
    let kernel = |end: &str| {
        let mut body = String::with_capacity(n * 32);
        // %c1 from %c2 first, ..., %c<n+1> from the parameter last.
        for k in 1..=n {
            body.push_str(&format!("\tmov.u64 %c{k}, %c{};\n", k + 1));
        }
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{{\n\
             .reg .b64 %c<{}>;\n.reg .f32 %f<2>;\n.reg .pred %q<2>;\n{body}\tld.param.u64 %c{}, [p];\n{end}\n\tret;\n}}\n",
            n + 2,
            n + 1
        )
    };
    let started = std::time::Instant::now();
    for (end, address, read_only) in [
        ("\tld.global.nc.f32 %f1, [%c1];", true, true),
        ("\tld.global.f32 %f1, [%c1];", true, false),
        ("\tsetp.eq.s64 %q1, %c1, 0;", false, false),
    ] {
        let p = ptxspec::arguments::KernelParams::from_ptx(&kernel(end), "k").unwrap();
        assert_eq!(
            (p.may_hold_address(0), p.read_only(0)),
            (address, read_only),
            "{end}"
        );
    }
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
}

/// 18. `--split per_kernel` of a 2 MB module of 2 000 kernels reserved the
///     whole module's size for every image and kept them until written (4 GB
///     of address space for ~30 MB of use): it aborted under a 3 GB limit. Each
///     image is sized by its own text now.
fn per_kernel_images_are_sized_by_their_own_text() {
    let dir = tempdir("hostile-per-kernel");
    let mut ptx = String::from(".version 7.0\n.target sm_70\n.address_size 64\n");
    for k in 0..2000 {
        ptx.push_str(&format!(
            ".visible .entry k{k}(.param .u64 p)\n{{\n\t.reg .b32 %r<2>;\n"
        ));
        for j in 0..40 {
            ptx.push_str(&format!("\tmov.u32 %r1, {j};\n"));
        }
        ptx.push_str("\tret;\n}\n");
    }
    assert!(ptx.len() > 1 << 20, "{}", ptx.len());
    let input = dir.join("many.ptx");
    std::fs::write(&input, &ptx).unwrap();
    let out = dir.join("out");
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -v 3000000 && exec \"$0\" post-link --split per_kernel -o '{}' '{}'",
            out.display(),
            input.display()
        ))
        .arg(env!("CARGO_BIN_EXE_ptxspec"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.join("k1999.ptx").is_file());
}

/// 19. A reader that has gone (`ptxspec inspect … | head -0`): the command
///     stops quietly (it panicked "failed printing to stdout: Broken pipe",
///     exit 101). The report is larger than a pipe holds, so the write fails.
fn a_closed_stdout_ends_the_command_quietly() {
    let dir = tempdir("hostile-pipe");
    let mut prop = String::new();
    for i in 0..20_000 {
        prop.push_str(&format!("[set {i}]\n"));
    }
    let path = dir.join("many.prop");
    std::fs::write(&path, prop).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ptxspec"))
        .args([os("inspect"), path.as_os_str()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Two getter calls that share the statements passing their arguments
/// (found by `fuzz/run.sh`, target `ptx_postlink`; the fuzzer's input,
/// minimized): both rewrites delete the same stores, which panicked in the
/// post-link ("overlapping edits"; in a release build a slice out of
/// order). The same edit made twice is now one: each call becomes its
/// load, and the image written reads back; rewrites that truly conflict
/// are an error naming the line (`ptx::print`'s tests). The fuzzer's input
/// stores one argument with `st.param4`, no opcode of PTX's, which the
/// post-link read as a store while it matched opcode prefixes; read through
/// the instruction model it is none, and the call's missing argument is an
/// error naming the line — so the shared stores are checked with that one
/// spelled as PTX spells it.
fn getter_calls_sharing_their_arguments_are_rewritten_once() {
    let path = here().join("tests/data/fuzz/getters_share_arguments.ptx");
    let fuzzed = std::fs::read_to_string(&path).unwrap();
    let e = ptxspec_core::postlink::post_link(
        vec![("shared.ptx".into(), fuzzed.clone())],
        &ptxspec_core::postlink::Options::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("shared.ptx:19") && e.contains("no st.param stores"),
        "{e}"
    );
    let text = fuzzed.replace("st.param4 ", "st.param.b64 ");
    assert_ne!(text, fuzzed, "the fuzzer's st.param4 is in the file");
    let images = ptxspec_core::postlink::post_link(
        vec![("shared.ptx".into(), text)],
        &ptxspec_core::postlink::Options::default(),
    )
    .unwrap();
    let ptx = &images[0].ptx;
    assert!(!ptx.contains("call"), "every getter call rewritten: {ptx}");
    ptxspec_core::ptx::parse("out.ptx", ptx.clone()).unwrap();
    let out = tempdir("shared-getters");
    let o = cli(&[
        "post-link".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        path.as_os_str(),
    ]);
    // The CLI does not take it for PTX (no .version, no .target): refused
    // before the post-link, cleanly.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(stderr.contains("expected PTX"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `ptxspec::image::Image::read` takes an image's files only as its `.prop`
///  recorded them: for each file the `.prop` hashes (the PTX, the LTO-IR),
///  one byte changed, the file of another image put in its place, or the
///  file removed, is an error naming that file — never an image read from
///  the wrong code.
fn an_image_is_read_only_from_the_files_its_properties_recorded() {
    let dir = tempdir("image-read");
    let one = compiled_with(&dir.join("one"), "k.cu", INT_SC, &["--lto"]).join("k.prop");
    let other = compiled_with(&dir.join("other"), "k.cu", FLOAT_SC, &["--lto"]).join("k.prop");
    let image = ptxspec::image::Image::read(&one).unwrap();
    assert_eq!(image.id(), "k");
    assert!(image.has_ltoir());
    assert_eq!(image.kernels()[0].name, "ka");
    assert_eq!(image.default_values(), 7i32.to_le_bytes());
    for ext in ["ptx", "ltoir"] {
        let file = one.with_extension(ext);
        let good = std::fs::read(&file).unwrap();
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 1;
        let others = std::fs::read(other.with_extension(ext)).unwrap();
        for (what, bytes) in [
            ("one byte changed", Some(flipped)),
            ("another image's", Some(others)),
            ("removed", None),
        ] {
            match &bytes {
                Some(b) => std::fs::write(&file, b).unwrap(),
                None => std::fs::remove_file(&file).unwrap(),
            }
            let e = ptxspec::image::Image::read(&one).unwrap_err();
            let named = match &e {
                ptxspec::Error::BadImage { image, .. } => image.contains(&format!("k.{ext}")),
                ptxspec::Error::File { what, .. } => {
                    bytes.is_none() && what.contains(&format!("k.{ext}"))
                }
                _ => false,
            };
            assert!(named, ".{ext} {what}: {e:?}");
            std::fs::write(&file, &good).unwrap();
        }
        assert_eq!(ptxspec::image::Image::read(&one).unwrap(), image);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Round 4, 13. Outputs are whole or absent: a key pair, a specialized
/// image and a post-link's folder written by a process that the system
/// stops mid-write (a file-size limit of 0: the first write kills it, as a
/// full disk ends a write) leave nothing at their names — no empty or
/// short key that the retry would then refuse as existing — and the same
/// command run again writes them whole.
fn an_output_killed_mid_write_leaves_nothing_at_its_name() {
    let dir = tempdir("hostile-killed");
    let prop = small_image(&dir);
    let limited = |args: &[&OsStr]| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg("ulimit -f 0; exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_ptxspec"))
            .args(args)
            .output()
            .unwrap()
    };
    let secret = dir.join("s.key");
    let public = dir.join("p.pub");
    let keygen = [
        os("cache"),
        os("keygen"),
        os("--secret"),
        secret.as_os_str(),
        os("--public"),
        public.as_os_str(),
    ];
    let out = dir.join("sc3.ptx");
    let specialize = [
        os("specialize"),
        prop.as_os_str(),
        os("--set"),
        os("sc=3"),
        os("--via"),
        os("ptx"),
        os("-o"),
        out.as_os_str(),
    ];
    for (what, args, outputs) in [
        ("cache keygen", &keygen[..], vec![&secret, &public]),
        ("specialize", &specialize[..], vec![&out]),
    ] {
        let o = limited(args);
        assert!(!o.status.success(), "{what} ran past its file-size limit");
        for path in &outputs {
            assert!(
                std::fs::symlink_metadata(path).is_err(),
                "{what} left {} behind, {:?} bytes",
                path.display(),
                std::fs::metadata(path).map(|m| m.len())
            );
        }
        cli_ok(args);
        for path in &outputs {
            assert!(
                std::fs::metadata(path).unwrap().len() > 0,
                "{what}: {}",
                path.display()
            );
        }
    }
    let key = std::fs::read_to_string(&secret).unwrap();
    assert_eq!(key.trim().len(), 64, "{key}");
}

/// Round 4, 12. A path that names the process's own standard output —
/// `/dev/stdout`, or a link of one's own to it (`/proc/self/fd/1`, or to
/// `/dev/stdout`) — is written through to that output, whether it is a
/// pipe or a regular file the caller redirected to; the link stays a link.
fn standard_output_through_links_gets_the_output() {
    let dir = tempdir("hostile-stdout");
    let prop = small_image(&dir);
    let links = dir.join("dev");
    std::fs::create_dir_all(&links).unwrap();
    let via_proc = links.join("stdout");
    std::os::unix::fs::symlink("/proc/self/fd/1", &via_proc).unwrap();
    let via_dev = links.join("out");
    std::os::unix::fs::symlink("/dev/stdout", &via_dev).unwrap();
    let chained = links.join("chained");
    std::os::unix::fs::symlink("out", &chained).unwrap();
    for target in [
        PathBuf::from("/dev/stdout"),
        via_proc.clone(),
        via_dev.clone(),
        chained.clone(),
    ] {
        let args = [
            os("specialize"),
            prop.as_os_str(),
            os("--set"),
            os("sc=5"),
            os("--via"),
            os("ptx"),
            os("-o"),
            target.as_os_str(),
        ];
        // Standard output a pipe.
        let o = cli_ok(&args);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("0x00000005"), "{}: {text}", target.display());
        // Standard output a regular file.
        let file = dir.join("captured.txt");
        std::fs::write(&file, "before\n").unwrap();
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_ptxspec"))
            .args(args)
            .stdout(f)
            .status()
            .unwrap();
        assert!(status.success());
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("before\n") && text.contains("0x00000005"),
            "{}: {text}",
            target.display()
        );
        for link in [&via_proc, &via_dev, &chained] {
            assert!(
                std::fs::symlink_metadata(link)
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
        }
    }
}

/// Runs the CLI with `args`, killing it after `limit`: (finished, output).
fn cli_within(args: &[&OsStr], limit: std::time::Duration) -> (bool, std::process::Output) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ptxspec"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let finished = loop {
        if child.try_wait().unwrap().is_some() {
            break true;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (finished, child.wait_with_output().unwrap())
}

/// Round 4, 10. A NUL byte in a source — in code, in a comment, in a
/// string, on the first line or deep in a 20 MB file — is an error naming
/// the file, line and column, with a bounded excerpt (not the source); the
/// same for PTX (a NUL in a comment was written into the image); a source
/// beyond the stated limit is refused by its size before it is read.
fn nul_bytes_and_oversized_sources_are_named_and_bounded() {
    let dir = tempdir("hostile-nul");
    let padding = "// padding line of a large source\n".repeat(20 << 20 >> 5);
    for (name, text, line) in [
        ("code.cu", "int x;\nint y\0 = 1;\n".to_string(), 2),
        ("comment.cu", "// a comment \0 here\n".to_string(), 1),
        (
            "string.cu",
            "#include <cstdio>\n\nconst char *s = \"a\0b\";\n".to_string(),
            3,
        ),
        (
            "large.cu",
            format!("{padding}int z\0;\n"),
            padding.lines().count() + 1,
        ),
    ] {
        let src = dir.join(name);
        std::fs::write(&src, &text).unwrap();
        let out = dir.join("out");
        let o = cli(&[os("compile"), os("-o"), out.as_os_str(), src.as_os_str()]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{name}");
        assert!(e.contains(&src.display().to_string()), "{name}: {e}");
        assert!(e.contains(&format!("line {line}, column")), "{name}: {e}");
        assert!(e.len() < 4096, "{name}: {} bytes of stderr", e.len());
    }
    // PTX: in a comment, in code.
    for (name, ptx) in [
        (
            "comment.ptx",
            ".version 7.0\n.target sm_70\n.address_size 64\n// a \0 comment\n",
        ),
        (
            "code.ptx",
            ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry k()\n{\0 ret;\n}\n",
        ),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, ptx).unwrap();
        let out = dir.join(format!("{name}.out"));
        let o = cli(&[os("post-link"), p.as_os_str(), os("-o"), out.as_os_str()]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{name}: post-linked");
        assert!(e.contains("NUL byte") && e.contains(name), "{name}: {e}");
    }
    // Beyond the limit: refused by size, the file never read (sparse).
    let big = dir.join("big.cu");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(ptxspec_core::compile::MAX_SOURCE_BYTES + 1)
        .unwrap();
    let (finished, o) = cli_within(
        &[
            os("compile"),
            os("-o"),
            dir.join("big-out").as_os_str(),
            big.as_os_str(),
        ],
        std::time::Duration::from_secs(60),
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(finished && !o.status.success(), "{e}");
    assert!(
        e.contains("more than a CUDA C++ source ptxspec compiles"),
        "{e}"
    );
}

/// Round 4, 11 and round 5, 3. Special files never hang a command: an
/// `#include` of a FIFO (quoted or angled, directly or from another header,
/// through a folder given in every spelling NVRTC takes — `-I DIR`, `-IDIR`,
/// `-I=DIR`, `--include-path=DIR`, `--include-path DIR` —, a pre-include in
/// each of its spellings, a file named by a macro defined in the source or
/// by `-D`), a FIFO given as the source, and a FIFO where the post-link
/// finds `OUT/table.txt` end at once in an error naming the file — no
/// temporary folder left behind. An include named by a macro the walk
/// cannot resolve, and options that make NVRTC open files nothing checks
/// (precompiled headers), are refused before NVRTC runs.
fn special_files_never_hang_a_command() {
    let dir = tempdir("hostile-fifo");
    let fifo = |p: &Path| {
        assert!(
            std::process::Command::new("mkfifo")
                .arg(p)
                .status()
                .unwrap()
                .success()
        );
    };
    let inc = dir.join("inc");
    std::fs::create_dir_all(&inc).unwrap();
    fifo(&dir.join("f.h"));
    fifo(&inc.join("g.h"));
    std::fs::write(dir.join("via.h"), "#include \"f.h\"\n").unwrap();
    let limit = std::time::Duration::from_secs(60);
    for (name, text, names) in [
        (
            "quoted.cu",
            "#include \"f.h\"\n__global__ void k() {}\n",
            "f.h",
        ),
        (
            "angled.cu",
            "#include <g.h>\n__global__ void k() {}\n",
            "g.h",
        ),
        (
            "nested.cu",
            "#include \"via.h\"\n__global__ void k() {}\n",
            "f.h",
        ),
    ] {
        let src = dir.join(name);
        std::fs::write(&src, text).unwrap();
        let (finished, o) = cli_within(
            &[
                os("compile"),
                os("-I"),
                inc.as_os_str(),
                os("-o"),
                dir.join("out").as_os_str(),
                src.as_os_str(),
            ],
            limit,
        );
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(finished, "{name}: the compile hung on a FIFO");
        assert!(
            !o.status.success() && e.contains(names) && e.contains("not a regular file"),
            "{name}: {e}"
        );
    }
    // Every spelling of NVRTC's options that name a file or a folder.
    let angled = dir.join("angled.cu");
    std::fs::write(&angled, "#include <g.h>\n__global__ void k() {}\n").unwrap();
    let plain = dir.join("plain.cu");
    std::fs::write(&plain, "__global__ void k() {}\n").unwrap();
    let by_macro = dir.join("by_macro.cu");
    std::fs::write(
        &by_macro,
        "#define HEADER \"f.h\"\n#include HEADER\n__global__ void k() {}\n",
    )
    .unwrap();
    let by_option = dir.join("by_option.cu");
    std::fs::write(&by_option, "#include HEADER\n__global__ void k() {}\n").unwrap();
    let by_has_include = dir.join("by_has_include.cu");
    std::fs::write(
        &by_has_include,
        "#define HEADER <g.h>\n#if __has_include(HEADER)\n#endif\n__global__ void k() {}\n",
    )
    .unwrap();
    let inc_s = inc.display().to_string();
    let fifo_header = dir.join("f.h").display().to_string();
    let cases: Vec<(Vec<String>, &Path, &str)> = vec![
        (vec![format!("-Xnvrtc=-I={inc_s}")], &angled, "g.h"),
        (vec![format!("-Xnvrtc=-I{inc_s}")], &angled, "g.h"),
        (
            vec!["-Xnvrtc".into(), format!("--include-path={inc_s}")],
            &angled,
            "g.h",
        ),
        (
            vec![
                "-Xnvrtc".into(),
                "--include-path".into(),
                "-Xnvrtc".into(),
                inc_s.clone(),
            ],
            &angled,
            "g.h",
        ),
        (
            vec![format!("-Xnvrtc=--pre-include={fifo_header}")],
            &plain,
            "f.h",
        ),
        (
            vec![format!("-Xnvrtc=-include={fifo_header}")],
            &plain,
            "f.h",
        ),
        (vec![], &by_macro, "f.h"),
        (vec!["-Xnvrtc=-DHEADER=\"f.h\"".into()], &by_option, "f.h"),
        (vec![format!("-Xnvrtc=-I={inc_s}")], &by_has_include, "g.h"),
    ];
    let out_dir = dir.join("out");
    for (options, src, names) in &cases {
        let mut args = vec![os("compile")];
        args.extend(options.iter().map(|o| os(o)));
        args.extend([os("-o"), out_dir.as_os_str(), src.as_os_str()]);
        let (finished, o) = cli_within(&args, limit);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            finished,
            "{options:?} {}: the compile hung on a FIFO",
            src.display()
        );
        assert!(
            !o.status.success() && e.contains(names) && e.contains("not a regular file"),
            "{options:?} {}: {e}",
            src.display()
        );
    }
    // What cannot be checked before NVRTC opens it is refused.
    let unresolved = dir.join("unresolved.cu");
    std::fs::write(
        &unresolved,
        "#define NAME(x) #x\n#include NAME(f.h)\n__global__ void k() {}\n",
    )
    .unwrap();
    for (options, src, says) in [
        (vec![], &unresolved, "names its file by a macro"),
        (vec!["-Xnvrtc=--pch".to_string()], &plain, "\"--pch\""),
        (
            vec![format!("-Xnvrtc=--use-pch={fifo_header}")],
            &plain,
            "not supported through ptxspec",
        ),
    ] {
        let mut args = vec![os("compile")];
        args.extend(options.iter().map(|o| os(o)));
        args.extend([os("-o"), out_dir.as_os_str(), src.as_os_str()]);
        let (finished, o) = cli_within(&args, limit);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            finished && !o.status.success() && e.contains(says),
            "{options:?}: {e}"
        );
    }
    let source_fifo = dir.join("source.cu");
    fifo(&source_fifo);
    let (finished, o) = cli_within(
        &[
            os("compile"),
            os("-o"),
            dir.join("out").as_os_str(),
            source_fifo.as_os_str(),
        ],
        limit,
    );
    assert!(
        finished && !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The output folder's table a FIFO.
    let out = dir.join("post");
    std::fs::create_dir_all(&out).unwrap();
    fifo(&out.join("table.txt"));
    let ptx = dir.join("k.ptx");
    std::fs::write(
        &ptx,
        ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n",
    )
    .unwrap();
    let (finished, o) = cli_within(
        &[os("post-link"), ptx.as_os_str(), os("-o"), out.as_os_str()],
        limit,
    );
    assert!(
        finished,
        "post-link hung on a FIFO table.txt: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Round 4, 7. Errors blame what is wrong: a setting that is not valid
/// (the trusted-keys file, the store's URL, a timeout) is named by its
/// variable, not as the image's `.ltoir` the user did not give; an
/// architecture this toolkit cannot compile for is named with the ones it
/// can (libNVVM said "unsupported option").
fn errors_name_the_setting_or_the_architecture_at_fault() {
    let dir = tempdir("hostile-blame");
    let out = compiled_with(&dir, "lto.cu", ONE_CONSTANT_KERNEL, &["--lto"]);
    let prop = out.join("lto.prop");
    let cubin = dir.join("x.cubin");
    let specialize = |arch: &str, env: &[(&str, &str)]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_ptxspec"));
        c.args([
            os("specialize"),
            prop.as_os_str(),
            os("--set"),
            os("sc=3"),
            os("--via"),
            os("lto"),
            os("--arch"),
            os(arch),
            os("-o"),
            cubin.as_os_str(),
        ]);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    for (variable, env) in [
        (
            "PTXSPEC_CACHE_TRUSTED_KEYS",
            vec![
                ("PTXSPEC_REMOTE_CACHE", "redis://127.0.0.1:1"),
                ("PTXSPEC_CACHE_TRUSTED_KEYS", "/nonexistent/keys"),
            ],
        ),
        (
            "PTXSPEC_REMOTE_CACHE",
            vec![("PTXSPEC_REMOTE_CACHE", "redis://:pw@host:notaport")],
        ),
        (
            "PTXSPEC_CACHE_MAX_MB",
            vec![("PTXSPEC_CACHE_MAX_MB", "lots")],
        ),
    ] {
        let o = specialize("sm_90", &env);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{variable}: {e}");
        assert!(e.contains(variable), "{variable}: {e}");
        assert!(
            !e.contains(".ltoir"),
            "{variable} blamed on the image's file: {e}"
        );
    }
    let o = specialize("sm_99", &[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("--arch sm_99: not an architecture this toolkit compiles for"),
        "{e}"
    );
    assert!(
        e.contains("sm_90") && !e.contains("unsupported option"),
        "{e}"
    );
}

/// Round 4, 9 and round 5, 10. A pointer the kernel passes to a function
/// it does not inline, moves about before using, or subtracts from another
/// before indexing with the difference (`begin[(end - begin) - 1]`) is a
/// pointer: a number for it is refused (`--arg 0=4096` baked `mov.b64
/// %rd1, 0x1000` into the code), through PTX and LTO alike — the question
/// a safe launch asks. A number the kernel only compares or scales is still
/// fixed, and so is a value it only stores (device memory is data: only its
/// use as an address in the kernel makes one).
fn pointers_that_escape_are_never_fixed() {
    const ESCAPES: &str = r#"
__device__ __noinline__ void sink(int *p, int v) { *p = v; }
__device__ int *kept;
extern "C" __global__ void passes(int *p, int n) { if (n > 0) sink(p, n); }
extern "C" __global__ void stores(int *p, long long n) { if (n > 3) kept = p; }
extern "C" __global__ void indexes(float *x, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}
extern "C" __global__ void last(int *out, const int *begin, const int *end) {
  out[0] = begin[(end - begin) - 1];
}
"#;
    let dir = tempdir("hostile-escapes");
    let out = compiled_with(&dir, "escapes.cu", ESCAPES, &["--lto"]);
    let prop = out.join("escapes.prop");
    let run = |kernel: &str, arg: &str, via: &[&str]| {
        let mut args = vec![
            os("specialize"),
            prop.as_os_str(),
            os("--kernel"),
            os(kernel),
            os("--arg"),
            os(arg),
        ];
        args.extend(via.iter().map(|v| os(v)));
        let target = dir.join(format!("{kernel}-{}.out", via.len()));
        args.extend([os("-o"), target.as_os_str()]);
        cli(&args)
    };
    for via in [
        &["--via", "ptx"][..],
        &["--via", "lto", "--arch", "sm_90"][..],
    ] {
        for (kernel, arg) in [
            ("passes", "0=4096"),
            ("indexes", "0=4096"),
            ("last", "1=4096"),
            ("last", "2=4096"),
        ] {
            let o = run(kernel, arg, via);
            let e = String::from_utf8_lossy(&o.stderr);
            assert!(
                !o.status.success(),
                "{kernel} {arg} {via:?}: a pointer fixed: {e}"
            );
            assert!(
                e.contains("pointer") || e.contains("as an address"),
                "{kernel} {via:?}: {e}"
            );
        }
        for (kernel, arg) in [
            ("passes", "1=5"),
            ("stores", "1=7"),
            ("stores", "0=4096"),
            ("indexes", "1=1024"),
        ] {
            let o = run(kernel, arg, via);
            assert!(
                o.status.success(),
                "{kernel} {arg} {via:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// Issue 55.2: divisions by a fixed argument become multiplications in the
/// PTX way — signed and unsigned, 32 and 64 bits, quotient and remainder,
/// a power of two, an odd divisor and a negative one — so that no integer
/// `div` or `rem` by them stays (ptxas keeps a division by an immediate a
/// division, where NVVM multiplies); ptxas assembles the result.
fn divisions_by_fixed_arguments_become_multiplications() {
    const DIVIDES: &str = r#"
extern "C" __global__ void permute(int *out, const int *in, int n, int c, unsigned u, long long w, unsigned long long v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int a = i / c, b = i % c;
    unsigned x = (unsigned)i / u, y = (unsigned)i % u;
    long long k = (long long)i / w, r = (long long)i % w;
    unsigned long long z = (unsigned long long)i / v;
    out[i] = in[a] + b + (int)x + (int)y + (int)k + (int)r + (int)z;
  }
}
"#;
    let dir = tempdir("divisions");
    let out = compiled(&dir, "divides.cu", DIVIDES);
    let prop = out.join("divides.prop");
    let ptxas = ptxas();
    for (c, u, w, v) in [
        ("768", "12", "-3", "64"),
        ("-7", "1", "4096", "1000003"),
        ("1", "2147483648", "-1", "18446744073709551615"),
    ] {
        let target = dir.join(format!("fixed-{c}-{u}.ptx"));
        let o = cli(&[
            os("specialize"),
            prop.as_os_str(),
            os("--kernel"),
            os("permute"),
            os("--arg"),
            os(&format!("3={c}")),
            os("--arg"),
            os(&format!("4={u}")),
            os("--arg"),
            os(&format!("5={w}")),
            os("--arg"),
            os(&format!("6={v}")),
            os("--via"),
            os("ptx"),
            os("-o"),
            target.as_os_str(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let ptx = std::fs::read_to_string(&target).unwrap();
        let left: Vec<&str> = ptx
            .split(';')
            .map(str::trim)
            .filter(|i| {
                let op = i
                    .split_whitespace()
                    .find(|w| !w.starts_with('@'))
                    .unwrap_or("");
                (op.starts_with("div.") || op.starts_with("rem."))
                    && ["s32", "u32", "s64", "u64"].iter().any(|t| op.ends_with(t))
            })
            .collect();
        assert!(
            left.is_empty(),
            "divisions left for {c} {u} {w} {v}: {left:?}"
        );
        assert!(ptx.contains("mul.hi.") || c == "1", "{ptx}");
        run_tool(
            &ptxas,
            &[
                os("-arch=sm_90"),
                target.as_os_str(),
                os("-o"),
                dir.join("fixed.cubin").as_os_str(),
            ],
            "the PTX with its divisions rewritten",
        );
    }
}

/// Round 5, 2. A rewrite's temporaries are declared in the body's own
/// scope: a kernel whose body opens with a nested `{ }` block, its division
/// by the fixed argument after the block (and one inside another block
/// later), is specialized into PTX that ptxas assembles — and the command
/// assembles what it writes itself (nvJitLink), so that no rewrite writes
/// text ptxas refuses.
fn rewrites_after_a_nested_block_assemble() {
    const NESTED: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\n\
.visible .entry k(\n\t.param .u64 k_param_0,\n\t.param .u32 k_param_1,\n\t.param .u64 k_param_2\n)\n{\n\
{\n\t.reg .b32 %t<2>;\n\tmov.u32 %t1, 1;\n}\n\
\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<8>;\n\
\tld.param.u64 %rd1, [k_param_0];\n\tld.param.u32 %r1, [k_param_1];\n\tld.param.u64 %rd3, [k_param_2];\n\
\tmov.u32 %r2, %tid.x;\n\tdiv.u32 %r3, %r2, %r1;\n\
{\n\t.reg .b64 %u<2>;\n\tcvt.u64.u32 %u1, %r2;\n\trem.u64 %rd4, %u1, %rd3;\n}\n\
\tcvt.u32.u64 %r4, %rd4;\n\tadd.s32 %r5, %r3, %r4;\n\
\tcvta.to.global.u64 %rd2, %rd1;\n\tst.global.u32 [%rd2], %r5;\n\tret;\n}\n";
    let dir = tempdir("nested-block");
    let input = dir.join("nested.ptx");
    std::fs::write(&input, NESTED).unwrap();
    let out = dir.join("out");
    cli_ok(&[
        os("post-link"),
        os("-o"),
        out.as_os_str(),
        input.as_os_str(),
    ]);
    let prop = out.join("nested.prop");
    let target = dir.join("fixed.ptx");
    let o = cli(&[
        os("specialize"),
        prop.as_os_str(),
        os("--kernel"),
        os("k"),
        os("--arg"),
        os("1=768"),
        os("--arg"),
        os("2=12"),
        os("--via"),
        os("ptx"),
        os("-o"),
        target.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ptx = std::fs::read_to_string(&target).unwrap();
    assert!(
        ptx.contains("mul.hi.u32") && ptx.contains("mul.hi.u64"),
        "{ptx}"
    );
    run_tool(
        &ptxas(),
        &[
            os("-arch=sm_90"),
            target.as_os_str(),
            os("-o"),
            dir.join("fixed.cubin").as_os_str(),
        ],
        "the PTX of a kernel opening with a nested block, its divisions rewritten",
    );
}

/// Round 5, 9: every echo of input is bounded and escaped — a `cache warm`
/// list whose line is megabytes long with a NUL and a direction override
/// in it is said (the line it works on, the error naming it) in a few
/// kilobytes, the NUL and the override escaped, never raw.
fn echoes_of_input_are_bounded() {
    let dir = tempdir("hostile-echo");
    let list = dir.join("warm.txt");
    let line = format!("a\0\u{202e}{}y.prop sm_90 a=1\n", "x".repeat(5 << 20));
    std::fs::write(&list, line).unwrap();
    let o = cli(&[os("cache"), os("warm"), list.as_os_str()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(o.stderr.len() < 20_000, "{} bytes said", o.stderr.len());
    assert!(
        !e.contains('\0') && !e.contains('\u{202e}'),
        "raw controls said"
    );
    assert!(e.contains("\\u{0}") && e.contains("more bytes"), "{e}");
}

/// Issue 55.3: every kernel from the command line — a kernel named by its
/// C++ name (qualified or not) to `--kernel`, a generic LTO cubin of an
/// image without constants (`--via lto`, nothing fixed), NVRTC options
/// passed with `-Xnvrtc` (`--use_fast_math` reaches NVRTC: `sinf` becomes
/// `sin.approx`), and `inspect` listing each kernel's parameters with their
/// index, size and kind (what `--arg INDEX` names).
fn kernels_by_cpp_name_generic_lto_nvrtc_options_and_parameters() {
    const SRC: &str = r#"
namespace ns {
__global__ void layer(float *x, int n) { int i = threadIdx.x; if (i < n) x[i] = sinf(x[i]) * 2.0f; }
}
"#;
    let dir = tempdir("every-kernel");
    let out = compiled_with(&dir, "plain.cu", SRC, &["--lto"]);
    let prop = out.join("plain.prop");
    for name in ["layer", "ns::layer"] {
        let target = dir.join("fixed.ptx");
        let o = cli(&[
            os("specialize"),
            prop.as_os_str(),
            os("--kernel"),
            os(name),
            os("--arg"),
            os("1=64"),
            os("-o"),
            target.as_os_str(),
        ]);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            std::fs::read_to_string(&target).unwrap().contains("0x40"),
            "{name}"
        );
    }
    let nope = dir.join("nope.ptx");
    let o = cli(&[
        os("specialize"),
        prop.as_os_str(),
        os("--kernel"),
        os("nope"),
        os("--arg"),
        os("1=1"),
        os("-o"),
        nope.as_os_str(),
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("_ZN2ns5layerEPfi"), "{e}");
    // The generic LTO cubin: nothing set, nothing fixed.
    let cubin = dir.join("generic.cubin");
    let o = cli(&[
        os("specialize"),
        prop.as_os_str(),
        os("--via"),
        os("lto"),
        os("--arch"),
        os("sm_90"),
        os("-o"),
        cubin.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&cubin).unwrap().starts_with(b"\x7fELF"));
    // -Xnvrtc reaches NVRTC.
    let fast = compiled_with(
        &dir.join("fast"),
        "plain.cu",
        SRC,
        &["-Xnvrtc", "--use_fast_math"],
    );
    let slow = compiled_with(&dir.join("slow"), "plain.cu", SRC, &[]);
    let ptx = |d: &Path| std::fs::read_to_string(d.join("plain.ptx")).unwrap();
    assert!(ptx(&fast).contains("sin.approx"), "{}", ptx(&fast));
    assert!(!ptx(&slow).contains("sin.approx"));
    let o = cli(&[
        os("compile"),
        os("-o"),
        dir.join("bad").as_os_str(),
        os("-Xnvrtc=--no-such-option"),
        dir.join("plain.cu").as_os_str(),
    ]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--no-such-option"));
    // inspect: the parameters.
    let o = cli_ok(&[os("inspect"), prop.as_os_str()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("parameter 0: 8 bytes, pointer"), "{text}");
    assert!(text.contains("parameter 1: 4 bytes, uint32"), "{text}");
    let o = cli_ok(&[
        os("inspect"),
        os("--json"),
        out.join("plain.ptx").as_os_str(),
    ]);
    let json = String::from_utf8_lossy(&o.stdout);
    assert!(
        json.contains(
            "\"parameters\":{\"_ZN2ns5layerEPfi\":[{\"index\":0,\"size\":8,\"kind\":\"pointer\"}"
        ),
        "{json}"
    );
}

/// Issue 55.3: a kernel taking an empty tag by value (as `std::bool_constant`
/// is passed) goes through LTO — with the tag left as it is and with it
/// fixed, with the kernel named by its C++ name: each link gives a cubin
/// whose one kernel is the kernel (NVVM inlined it into the wrapper) —
/// while a kernel taking a struct of data by value is refused through LTO
/// with the reason and the PTX way named, and the PTX way fixes it.
fn an_empty_tag_goes_through_lto() {
    const SRC: &str = r#"
template <bool B> struct bool_constant { static constexpr bool value = B; };
struct Coeff { float a, b, c; };
__global__ void scale(float *x, int n, bool_constant<true> t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = decltype(t)::value ? 2.0f * x[i] : x[i];
}
__global__ void poly(float *x, int n, Coeff c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = c.a * x[i] * x[i] + c.b * x[i] + c.c;
}
"#;
    let dir = tempdir("empty-tag");
    let out = compiled_with(&dir, "tag.cu", SRC, &["--lto"]);
    let prop = out.join("tag.prop");
    let lto = |kernel: &str, args: &[&str], target: &Path| {
        let mut argv = vec![
            os("specialize"),
            prop.as_os_str(),
            os("--via"),
            os("lto"),
            os("--arch"),
            os("sm_90"),
            os("--kernel"),
            os(kernel),
        ];
        for a in args {
            argv.push(os("--arg"));
            argv.push(os(a));
        }
        argv.push(os("-o"));
        argv.push(target.as_os_str());
        cli(&argv)
    };
    for (args, name) in [
        (&["1=4096"][..], "tag left"),
        (&["1=4096", "2=bytes:01"][..], "tag fixed"),
        (&["2=bytes:01"][..], "tag alone"),
    ] {
        let cubin = dir.join("scale.cubin");
        let _ = std::fs::remove_file(&cubin);
        let o = lto("scale", args, &cubin);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let bytes = std::fs::read(&cubin).unwrap();
        assert!(bytes.starts_with(b"\x7fELF"), "{name}");
        let mangled = b"_Z5scalePfi13bool_constantILb1EE";
        assert!(
            bytes.windows(mangled.len()).any(|w| w == mangled),
            "{name}: the kernel's name in the cubin"
        );
        assert!(
            !bytes.windows(23).any(|w| w == b"ptxspec_fixed_arguments"),
            "{name}: the wrapper renamed"
        );
    }
    let refused = lto("poly", &["1=4096"], &dir.join("poly.cubin"));
    let e = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && e.contains("parameter 2 is an aggregate of 12 bytes passed by value")
            && e.contains("--via ptx"),
        "{e}"
    );
    let ptx = dir.join("poly.ptx");
    let o = cli(&[
        os("specialize"),
        prop.as_os_str(),
        os("--kernel"),
        os("poly"),
        os("--arg"),
        os("2=bytes:0000803f0000004000004040"),
        os("-o"),
        ptx.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assemble(
        &std::fs::read_to_string(&ptx).unwrap(),
        "sm_90",
        "poly with its coefficients fixed the PTX way",
    );
}

fn main() -> std::process::ExitCode {
    harness::run(
        "hostile",
        vec![
            (
                "two_units_of_one_file_stem_are_refused_not_merged",
                two_units_of_one_file_stem_are_refused_not_merged as fn(),
                harness::NVIDIA,
            ),
            (
                "one_id_on_two_different_constants_is_refused",
                one_id_on_two_different_constants_is_refused as fn(),
                harness::NVIDIA,
            ),
            (
                "half_and_bfloat16_constants_take_float_values",
                half_and_bfloat16_constants_take_float_values as fn(),
                harness::NVIDIA,
            ),
            (
                "a_float_from_text_is_rounded_once",
                a_float_from_text_is_rounded_once as fn(),
                harness::NOTHING,
            ),
            (
                "the_handler_is_found_by_data_flow_for_every_way_it_reaches_a_getter",
                the_handler_is_found_by_data_flow_for_every_way_it_reaches_a_getter as fn(),
                harness::NVIDIA,
            ),
            (
                "getters_behind_an_indirect_call_are_refused",
                getters_behind_an_indirect_call_are_refused as fn(),
                harness::NVIDIA,
            ),
            (
                "composite_values_are_parsed_against_the_constant_in_every_image",
                composite_values_are_parsed_against_the_constant_in_every_image as fn(),
                harness::NVIDIA,
            ),
            (
                "common_variables_resolve_to_the_largest_declaration",
                common_variables_resolve_to_the_largest_declaration as fn(),
                harness::NVIDIA,
            ),
            (
                "kernel_signatures_are_checked_against_the_code",
                kernel_signatures_are_checked_against_the_code as fn(),
                harness::NVIDIA,
            ),
            (
                "ids_a_property_file_cannot_hold_are_refused",
                ids_a_property_file_cannot_hold_are_refused as fn(),
                harness::NVIDIA,
            ),
            (
                "the_header_folder_is_private_fresh_and_removed",
                the_header_folder_is_private_fresh_and_removed as fn(),
                harness::NVIDIA,
            ),
            (
                "special_outputs_are_written_through_not_replaced",
                special_outputs_are_written_through_not_replaced as fn(),
                harness::NVIDIA,
            ),
            (
                "aspect_filter_never_writes_over_its_input",
                aspect_filter_never_writes_over_its_input as fn(),
                harness::NVIDIA,
            ),
            (
                "stale_rows_that_name_no_image_file_never_wedge_the_folder",
                stale_rows_that_name_no_image_file_never_wedge_the_folder as fn(),
                harness::NVIDIA,
            ),
            (
                "many_sets_and_rows_are_read_in_linear_time",
                many_sets_and_rows_are_read_in_linear_time as fn(),
                harness::NVIDIA,
            ),
            (
                "parameter_analyses_are_linear_in_a_chain_written_backwards",
                parameter_analyses_are_linear_in_a_chain_written_backwards as fn(),
                harness::NOTHING,
            ),
            (
                "per_kernel_images_are_sized_by_their_own_text",
                per_kernel_images_are_sized_by_their_own_text as fn(),
                harness::NOTHING,
            ),
            (
                "a_closed_stdout_ends_the_command_quietly",
                a_closed_stdout_ends_the_command_quietly as fn(),
                harness::NOTHING,
            ),
            (
                "getter_calls_sharing_their_arguments_are_rewritten_once",
                getter_calls_sharing_their_arguments_are_rewritten_once as fn(),
                harness::NOTHING,
            ),
            (
                "an_image_is_read_only_from_the_files_its_properties_recorded",
                an_image_is_read_only_from_the_files_its_properties_recorded as fn(),
                harness::NVIDIA,
            ),
            (
                "an_output_killed_mid_write_leaves_nothing_at_its_name",
                an_output_killed_mid_write_leaves_nothing_at_its_name as fn(),
                harness::NVIDIA,
            ),
            (
                "standard_output_through_links_gets_the_output",
                standard_output_through_links_gets_the_output as fn(),
                harness::NVIDIA,
            ),
            (
                "nul_bytes_and_oversized_sources_are_named_and_bounded",
                nul_bytes_and_oversized_sources_are_named_and_bounded as fn(),
                harness::NOTHING,
            ),
            (
                "special_files_never_hang_a_command",
                special_files_never_hang_a_command as fn(),
                harness::NOTHING,
            ),
            (
                "errors_name_the_setting_or_the_architecture_at_fault",
                errors_name_the_setting_or_the_architecture_at_fault as fn(),
                harness::NVIDIA,
            ),
            (
                "pointers_that_escape_are_never_fixed",
                pointers_that_escape_are_never_fixed as fn(),
                harness::NVIDIA,
            ),
            (
                "divisions_by_fixed_arguments_become_multiplications",
                divisions_by_fixed_arguments_become_multiplications as fn(),
                harness::NVIDIA,
            ),
            (
                "echoes_of_input_are_bounded",
                echoes_of_input_are_bounded as fn(),
                harness::NOTHING,
            ),
            (
                "rewrites_after_a_nested_block_assemble",
                rewrites_after_a_nested_block_assemble as fn(),
                harness::NVIDIA,
            ),
            (
                "kernels_by_cpp_name_generic_lto_nvrtc_options_and_parameters",
                kernels_by_cpp_name_generic_lto_nvrtc_options_and_parameters as fn(),
                harness::NVIDIA,
            ),
            (
                "an_empty_tag_goes_through_lto",
                an_empty_tag_goes_through_lto as fn(),
                harness::NVIDIA,
            ),
        ],
    )
}
