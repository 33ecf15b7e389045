//! The post-link on PTX it did not write: the corpus of `tests/corpus` (see
//! its README) and the example kernels, compiled here by NVRTC for sm_80
//! and sm_90, with and without `-rdc=true`, plain, `-G` and `-lineinfo`;
//! each module post-linked emulated (the buffer in the parameter space and
//! in global memory) and AOT. Every image must assemble with ptxas for its
//! architecture without `-c` (images that call CUDA's device runtime, which
//! only a link resolves, with `-c`); a module without getters kept whole
//! comes out byte for byte.

mod common;

use std::path::PathBuf;

use common::*;
use ptxspec_core::compile::{self, CompileOptions};
use ptxspec_core::postlink::{self, BufferPlacement, Mode, Options, Split};
use ptxspec_core::toolkit::nvrtc;

/// Sources that only sm_90 compiles (Hopper barriers, clusters).
const SM90_ONLY: &[&str] = &["hopper_barrier.cu", "clusters.cu"];

/// Translation units that are compiled and post-linked together: the
/// examples of two units go with their helpers.
fn groups() -> Vec<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [
        here().join("tests/corpus"),
        kernels_dir(),
        kernels_dir().join("test_only"),
    ] {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cu"))
            .collect();
        found.sort();
        files.extend(found);
    }
    let partner = |name: &str| match name {
        "features.cu" => Some("features_helper.cu"),
        "two_tu_kernel.cu" => Some("two_tu_helper.cu"),
        _ => None,
    };
    files
        .iter()
        .filter(|f| {
            !matches!(
                f.file_name().unwrap().to_str(),
                Some("features_helper.cu" | "two_tu_helper.cu")
            )
        })
        .map(|f| {
            let mut g = vec![f.clone()];
            if let Some(p) = partner(f.file_name().unwrap().to_str().unwrap()) {
                g.push(f.with_file_name(p));
            }
            g
        })
        .collect()
}

/// Everything one group of sources goes through; returns failures, and
/// counts.
fn check_group(group: &[PathBuf], header: &std::path::Path) -> (Vec<String>, usize, usize) {
    let name = group[0].file_name().unwrap().to_string_lossy().into_owned();
    let archs: &[u32] = if SM90_ONLY.contains(&name.as_str()) {
        &[90]
    } else {
        &[80, 90]
    };
    let mut failures = Vec::new();
    let (mut modules, mut images) = (0, 0);
    for &arch in archs {
        // Several units, or device-side launches, need relocatable code.
        let rdc_only = group.len() > 1 || name == "dynamic_parallelism.cu";
        for rdc in [false, true] {
            if rdc_only && !rdc {
                continue;
            }
            for flag in ["", "-G", "-lineinfo"] {
                let what = format!(
                    "{name} sm_{arch}{}{}",
                    if rdc { " -rdc" } else { "" },
                    if flag.is_empty() {
                        String::new()
                    } else {
                        format!(" {flag}")
                    }
                );
                let opts = CompileOptions {
                    arch: format!("compute_{arch}"),
                    include: vec![group[0].parent().unwrap().to_path_buf(), kernels_dir()],
                    ..Default::default()
                };
                let mut options: Vec<String> = compile::nvrtc_options(&opts, header, false)
                    .expect("the CUDA headers")
                    .into_iter()
                    .filter(|o| o != "-rdc=true")
                    .collect();
                if rdc {
                    options.push("-rdc=true".into());
                }
                if !flag.is_empty() {
                    options.push(flag.into());
                }
                let mut inputs: Vec<(String, String)> = Vec::new();
                for src in group {
                    let file = src.file_name().unwrap().to_string_lossy().into_owned();
                    let text = std::fs::read_to_string(src).unwrap();
                    match nvrtc::compile(&text, &file, &options, nvrtc::Output::Ptx) {
                        Ok(c) => inputs.push((
                            file.replace(".cu", ".ptx"),
                            String::from_utf8(c.code).unwrap(),
                        )),
                        Err(e) => failures.push(format!("{what}: NVRTC: {e}")),
                    }
                }
                if inputs.len() != group.len() {
                    continue;
                }
                modules += 1;
                let ptx = inputs[0].1.clone();
                let whole_input = inputs.len() == 1
                    && assembles(&ptx, &format!("sm_{arch}"), false, &what).is_ok();
                for (mode, buffer) in [
                    (Mode::Emulated, BufferPlacement::Auto),
                    (Mode::Emulated, BufferPlacement::Global),
                    (Mode::Aot, BufferPlacement::Global),
                ] {
                    let post = Options {
                        mode,
                        split: Split::Auto,
                        buffer,
                    };
                    let out = match postlink::post_link(inputs.clone(), &post) {
                        Ok(o) => o,
                        Err(e) => {
                            failures.push(format!("{what} {mode:?} {buffer:?}: post-link: {e}"));
                            continue;
                        }
                    };
                    let getters = inputs
                        .iter()
                        .any(|(_, p)| p.contains("2020SpecConstantValue"));
                    if !getters && inputs.len() == 1 && out.len() == 1 && out[0].ptx != ptx {
                        failures.push(format!(
                            "{what} {mode:?}: a module without getters kept whole changed"
                        ));
                    }
                    if whole_input && !getters {
                        // Where the input assembled whole, so must each image.
                        for img in &out {
                            if let Err(e) = assembles(&img.ptx, &format!("sm_{arch}"), false, &what)
                            {
                                failures.push(format!(
                                    "{what} {mode:?} {buffer:?} image {}: {e}",
                                    img.stem
                                ));
                            }
                        }
                    }
                    for img in &out {
                        images += 1;
                        if img.ptx.contains("2020SpecConstantValue") {
                            failures.push(format!(
                                "{what} {mode:?}: image {} keeps a getter",
                                img.stem
                            ));
                        }
                        let relocatable = img.info.needs_device_runtime;
                        if let Err(e) =
                            assembles(&img.ptx, &format!("sm_{arch}"), relocatable, &what)
                        {
                            failures.push(format!(
                                "{what} {mode:?} {buffer:?} image {}: ptxas: {e}",
                                img.stem
                            ));
                        }
                        if mode == Mode::Emulated {
                            match postlink::specialize("n.ptx", &img.ptx, img.layout.default_blob())
                            {
                                Ok(native) => {
                                    if let Err(e) = assembles(
                                        &native,
                                        &format!("sm_{arch}"),
                                        relocatable,
                                        &what,
                                    ) {
                                        failures.push(format!(
                                            "{what} {buffer:?} image {} specialized: ptxas: {e}",
                                            img.stem
                                        ));
                                    }
                                }
                                Err(e) => {
                                    failures.push(format!("{what} {buffer:?} specialize: {e}"))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (failures, modules, images)
}

fn corpus_post_links_and_assembles_in_every_build() {
    let header = compile::header_dir(None).unwrap();
    let groups = groups();
    assert!(groups.len() >= 18, "{groups:?}");
    // Two workers: the CI machine has two cores.
    let chunks: Vec<Vec<Vec<PathBuf>>> = (0..2)
        .map(|k| groups.iter().skip(k).step_by(2).cloned().collect())
        .collect();
    let results: Vec<(Vec<String>, usize, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                let header = &header;
                s.spawn(move || {
                    let mut all = (Vec::new(), 0, 0);
                    for group in chunk {
                        let (f, m, i) = check_group(group, header);
                        all.0.extend(f);
                        all.1 += m;
                        all.2 += i;
                    }
                    all
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failures: Vec<&String> = results.iter().flat_map(|r| &r.0).collect();
    let modules: usize = results.iter().map(|r| r.1).sum();
    let images: usize = results.iter().map(|r| r.2).sum();
    eprintln!(
        "corpus: {} groups of sources, {modules} builds, {images} images assembled",
        groups.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Modern sm_90 syntax the lexer must take as it is (the PTX ISA's `::`
/// qualifiers, vector operands, predicate pairs, cluster directives).
fn hopper_syntax_round_trips() {
    let ptx = ".version 8.0\n.target sm_90a\n.address_size 64\n\
        .visible .entry k(.param .u64 p) .explicitcluster .reqnctapercluster 2, 1, 1\n{\n\
        .reg .b32 %r<4>; .reg .b64 %rd<4>; .reg .pred %p<3>; .shared .align 8 .b8 bar[8];\n\
        mov.u32 %r1, bar;\n\
        mbarrier.init.shared::cta.b64 [%r1], 1;\n\
        fence.proxy.async.shared::cta;\n\
        mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [%r1], 16;\n\
        @!%p1 bra $L__done;\n\
        ld.param.u64 %rd2, [p];\n\
        ld.global.L1::no_allocate.v2.u32 {%r2, %r3}, [%rd2];\n\
        setp.lt.s32 %p1|%p2, %r2, %r3;\n\
        barrier.cluster.arrive.release.aligned;\n\
        barrier.cluster.wait.acquire.aligned;\n\
        $L__done:\n ret;\n}\n";
    let out = post_link(
        vec![("h.ptx".into(), ptx.into())],
        Mode::Emulated,
        Split::Auto,
    );
    assert_eq!(out[0].ptx, ptx, "no getters: byte for byte");
    let m = ptxspec_core::ptx::parse("h.ptx", ptx.to_string()).unwrap();
    let ptxspec_core::ptx::ItemKind::Function(f) = &m.items[3].kind else {
        panic!()
    };
    let ops: Vec<&str> = f
        .body
        .as_ref()
        .unwrap()
        .stmts
        .iter()
        .map(|s| m.text(s.op))
        .collect();
    assert!(ops.contains(&"mbarrier.init.shared::cta.b64"), "{ops:?}");
    assert!(ops.contains(&"ld.global.L1::no_allocate.v2.u32"), "{ops:?}");
    assert!(ops.contains(&"fence.proxy.async.shared::cta"), "{ops:?}");
}

/// Errors the issue asked for: an empty input, and a call nobody defines.
fn empty_inputs_and_unresolved_calls_are_errors() {
    for text in [
        "",
        "// nothing\n",
        ".version 8.0\n.target sm_90\n.address_size 64\n",
    ] {
        let e = postlink::post_link(vec![("e.ptx".into(), text.into())], &Options::default())
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("e.ptx: no PTX functions or variables"),
            "{e}"
        );
    }
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
        .extern .func helper();\n.extern .func (.param .b32 r) vprintf(.param .b64 a, .param .b64 b);\n\
        .extern .global .u32 counter;\n.extern .shared .align 4 .b8 dyn[];\n\
        .visible .entry k(.param .u64 p)\n{\n .reg .b32 %r<2>;\n call helper;\n\
        ld.global.u32 %r1, [counter];\n ret;\n}\n";
    let e =
        postlink::post_link(vec![("u.ptx".into(), ptx.into())], &Options::default()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("link_program_error: 2 undefined symbols"),
        "{msg}"
    );
    let line_of = |needle: &str| ptx.lines().position(|l| l.contains(needle)).unwrap() + 1;
    assert!(
        msg.contains(&format!("u.ptx:{}:2: helper", line_of("call helper"))),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("u.ptx:{}:", line_of("[counter]"))) && msg.contains("counter"),
        "{msg}"
    );
    assert!(!msg.contains("vprintf") && !msg.contains("dyn"), "{msg}");
}

/// A debug build of two translation units: both units' line information,
/// the first unit's DWARF, a warning saying so, and an image ptxas takes.
fn debug_builds_of_two_units() {
    let header = compile::header_dir(None).unwrap();
    let opts = CompileOptions {
        arch: "compute_80".into(),
        include: vec![kernels_dir()],
        ..Default::default()
    };
    let ptx = |file: &str| {
        let text = std::fs::read_to_string(kernels_dir().join(file)).unwrap();
        let mut o = compile::nvrtc_options(&opts, &header, false).expect("the CUDA headers");
        o.push("-G".into());
        (
            file.replace(".cu", ".ptx"),
            String::from_utf8(
                nvrtc::compile(&text, file, &o, nvrtc::Output::Ptx)
                    .unwrap()
                    .code,
            )
            .unwrap(),
        )
    };
    let images = post_link(
        vec![ptx("two_tu_kernel.cu"), ptx("two_tu_helper.cu")],
        Mode::Emulated,
        Split::Off,
    );
    assert_eq!(images.len(), 1);
    let img = &images[0];
    assert!(
        img.warnings.iter().any(|w| w.contains("DWARF")
            && w.contains("two_tu_helper")
            && w.contains("is dropped: a post-link of several -G units")),
        "{:?}",
        img.warnings
    );
    // Both units' files, numbered apart.
    assert!(img.ptx.matches(".file").count() >= 3, "{}", img.ptx);
    assemble(&img.ptx, "sm_80", "two -G units");
}

fn main() -> std::process::ExitCode {
    harness::run(
        "corpus",
        vec![
            (
                "corpus_post_links_and_assembles_in_every_build",
                corpus_post_links_and_assembles_in_every_build as fn(),
                harness::NVIDIA,
            ),
            (
                "hopper_syntax_round_trips",
                hopper_syntax_round_trips as fn(),
                harness::NOTHING,
            ),
            (
                "empty_inputs_and_unresolved_calls_are_errors",
                empty_inputs_and_unresolved_calls_are_errors as fn(),
                harness::NOTHING,
            ),
            (
                "debug_builds_of_two_units",
                debug_builds_of_two_units as fn(),
                harness::NVIDIA,
            ),
        ],
    )
}
