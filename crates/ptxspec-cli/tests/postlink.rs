//! End-to-end tests of the post-link on real NVRTC output: layouts against
//! a golden file, every output image assembled by ptxas, linking, and bad
//! input.

mod common;

use common::*;
use ptxspec_core::layout::Layout;
use ptxspec_core::postlink::BufferPlacement;
use ptxspec_core::postlink::{self, Mode, Options, PostLinkError, Split};
use ptxspec_core::props::{DEFAULT_VALUES_SET, PropertySets, SPEC_CONSTANTS_SET};
use std::path::{Path, PathBuf};

fn spec_const_text(sets: &PropertySets) -> String {
    let mut only = PropertySets::default();
    for (name, set) in sets.iter() {
        if [SPEC_CONSTANTS_SET, DEFAULT_VALUES_SET].contains(&name) {
            for (n, v) in set.iter() {
                only.set_mut(name).insert(n, v.clone());
            }
        }
    }
    only.to_text()
}

/// A layout as people read it: each constant's offset and descriptors,
/// then the default blob in hex.
fn layout_text(layout: &Layout) -> String {
    let mut out = String::new();
    for p in layout.constants() {
        let descriptors: Vec<String> = p
            .descriptors
            .iter()
            .map(|d| format!("<{:#x}, {}, {}>", d.id, d.offset, d.size))
            .collect();
        out.push_str(&format!(
            "{} at {}: {}\n",
            p.constant.symbolic_id(),
            p.offset,
            descriptors.join(" ")
        ));
    }
    let hex: Vec<String> = layout
        .default_blob()
        .chunks(16)
        .map(|row| {
            row.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    out.push_str(&format!("defaults:\n  {}\n", hex.join("\n  ")));
    out
}

/// The layouts of the examples (one image each) equal the golden file
/// `tests/data/example_layouts.txt`, written once and checked by hand
/// against the constants each `.cu` file declares: offsets, descriptors
/// (padding as <0xffffffff, ...>) and default bytes. `PTXSPEC_BLESS=1`
/// rewrites it after an intended change; review the diff.
fn example_layouts_equal_their_golden_file() {
    let mut got = String::new();
    for &ex in EXAMPLES {
        let images = post_link(vec![kernel_ptx(ex)], Mode::Emulated, Split::Off);
        assert_eq!(images.len(), 1, "{ex}");
        got.push_str(&format!("[{ex}]\n{}\n", layout_text(&images[0].layout)));
    }
    let golden = here().join("tests/data/example_layouts.txt");
    if std::env::var_os("PTXSPEC_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&golden, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&golden).unwrap();
    assert!(
        want == got,
        "the examples' layouts differ from {} (after an intended change: PTXSPEC_BLESS=1, then review the diff):\n{got}",
        golden.display()
    );
}

/// Every example in every mode and buffer placement, and each emulated
/// image specialized with its defaults (the runtime's native mode), is
/// accepted by ptxas without `-c`.
/// Module-scope items whose tokens touch (no white space between one
/// item's end and the next's start, as the fuzzer's module had `)\n;` and
/// `.global` with nothing between) stay apart in every image the post-link
/// writes, whichever items it drops between them or joins from other
/// units: a generated family — each example with every item glued to the
/// one before, and with every other one glued — as one unit and as two,
/// each image parsing again and assembling for sm_90 where the glued input
/// does. (The output once read `.address_size 64.global .align 4`.)
fn items_whose_tokens_touch_stay_apart_in_every_image() {
    use ptxspec_core::ptx::{Item, ItemKind};
    /// Whether item i (of the items and the source) is glued to the one
    /// before.
    type Glue<'a> = &'a dyn Fn(&[Item], &str, usize) -> bool;
    let header = |k: &ItemKind| {
        matches!(
            k,
            ItemKind::Version | ItemKind::Target | ItemKind::AddressSize
        )
    };
    // Item i written without the white space and comments before it
    // where `glue(items, i)` says so: it then touches the item before.
    let glued = |text: &str, glue: Glue| {
        let m = ptxspec_core::ptx::parse("g.ptx", text.to_string()).unwrap();
        let mut out = String::new();
        for (i, item) in m.items.iter().enumerate() {
            match i > 0 && glue(&m.items, &m.src, i) {
                true => out.push_str(m.text(item.span)),
                false => out.push_str(&m.src[item.full.range()]),
            }
        }
        out
    };
    // Glued to a getter's declaration (which the post-link drops, so the
    // item before the declaration and the one after meet); glued to every
    // item that is not the header (which the lexer needs apart).
    let after_getter = |items: &[Item], src: &str, i: usize| {
        src[items[i - 1].span.range()].contains("SpecConstantValue")
    };
    let after_any =
        |items: &[Item], _: &str, i: usize| !header(&items[i - 1].kind) && !header(&items[i].kind);
    let ways: [(&str, Glue); 2] = [
        ("after each getter declaration", &after_getter),
        ("after each item", &after_any),
    ];
    for ex in EXAMPLES {
        let (name, text) = kernel_ptx(ex);
        // Glued inputs the post-link refuses (`.version 8.0.target` is
        // no directive) say nothing here; some of each example's must pass.
        let mut post_linked = 0;
        for (way, glue) in ways {
            let input = glued(&text, glue);
            if input == text {
                continue;
            }
            let input_assembles = assembles(&input, "sm_90", true, ex).is_ok();
            let lines: Vec<&str> = input.lines().collect();
            let halves = |at: usize| (lines[..at].join("\n"), lines[at..].join("\n"));
            let units: Vec<Vec<(String, String)>> = match lines.len() > 1 {
                true => {
                    let (a, b) = halves(lines.len() / 2);
                    vec![
                        vec![(name.clone(), input.clone())],
                        vec![("a.ptx".into(), a), ("b.ptx".into(), b)],
                    ]
                }
                false => vec![vec![(name.clone(), input.clone())]],
            };
            for (n, inputs) in units.into_iter().enumerate() {
                let Ok(images) = postlink::post_link(inputs, &Options::default()) else {
                    continue;
                };
                post_linked += 1;
                for img in images {
                    let what = format!("{ex}, glued {way}, {} unit(s)", n + 1);
                    if let Err(e) = ptxspec_core::ptx::parse("out.ptx", img.ptx.clone()) {
                        panic!("{what}: the written PTX does not parse: {e}\n{}", img.ptx);
                    }
                    if input_assembles && n == 0 {
                        assemble(&img.ptx, "sm_90", &what);
                    }
                }
            }
        }
        assert!(post_linked > 0, "{ex}: no glued input post-linked");
    }
}

fn every_image_of_every_example_assembles_for_sm70_and_sm90() {
    type Inputs = Vec<(String, String)>;
    let cases: Vec<(String, Inputs, Split)> = EXAMPLES
        .iter()
        .map(|&ex| (ex.to_string(), vec![kernel_ptx(ex)], Split::Auto))
        .chain([(
            "two_tu".to_string(),
            vec![kernel_ptx("two_tu_kernel"), kernel_ptx("two_tu_helper")],
            Split::Off,
        )])
        .collect();
    for (ex, inputs, split) in cases {
        for mode in [Mode::Emulated, Mode::Aot] {
            for buffer in PLACEMENTS {
                let opts = Options {
                    mode,
                    split,
                    buffer,
                };
                for img in post_link_with(inputs.clone(), &opts) {
                    assert!(
                        !img.ptx.contains("2020SpecConstantValue"),
                        "{ex}: getter left"
                    );
                    let what = format!("{ex} {mode:?} {buffer:?}");
                    for arch in ["sm_70", "sm_90"] {
                        assemble(&img.ptx, arch, &format!("{what} {arch}"));
                    }
                    if mode == Mode::Emulated {
                        let native =
                            postlink::specialize("n.ptx", &img.ptx, img.layout.default_blob())
                                .unwrap();
                        assert!(!native.contains("ptxspec_buf"), "{what}");
                        assemble(&native, "sm_90", &format!("{what} specialized"));
                    }
                }
            }
        }
    }
}

fn two_translation_units_number_like_one() {
    let single = post_link(
        vec![kernel_ptx("two_tu_single")],
        Mode::Emulated,
        Split::Off,
    );
    for order in [
        ["two_tu_kernel", "two_tu_helper"],
        ["two_tu_helper", "two_tu_kernel"],
    ] {
        let linked = post_link(
            order.iter().map(|n| kernel_ptx(n)).collect(),
            Mode::Emulated,
            Split::Off,
        );
        assert_eq!(linked.len(), 1);
        assert_eq!(
            linked[0].layout.default_blob(),
            single[0].layout.default_blob(),
            "{order:?}"
        );
        assert_eq!(
            spec_const_text(&linked[0].props),
            spec_const_text(&single[0].props),
            "{order:?}"
        );
        // The buffer reaches the helper through the kernel's last parameter.
        let k = &linked[0].kernels[0];
        assert_eq!((k.name.as_str(), k.buffer_param()), ("two_tu", Some(3)));
    }
}

/// The shared NVRTC example, with its getter renamed to DPC++'s markup.
fn nvrtc_example() -> String {
    std::fs::read_to_string(here().join("tests/data/nvrtc-getter-example.ptx"))
        .unwrap()
        .replace(
            "_Z10__spec_getIiET_",
            "_Z37__sycl_getScalar2020SpecConstantValueIiET_",
        )
        .replace(
            "_Z10__spec_getI1AET_",
            "_Z40__sycl_getComposite2020SpecConstantValueI1AET_",
        )
}

fn emulated_loads_and_aot_immediates_of_the_nvrtc_example() {
    let input = vec![("k.ptx".to_string(), nvrtc_example())];
    let global = Options {
        split: Split::Off,
        buffer: BufferPlacement::Global,
        ..Default::default()
    };
    let emu = post_link_with(input.clone(), &global).remove(0);
    // id_int at 0; id_A {int, float, float} at 4: its pieces at 4, 8, 12.
    for load in [
        "ld.global.nc.b32 %r1, [%ptxspec_buf+0];",
        "ld.global.nc.b32 %r2, [%ptxspec_buf+4];",
        "ld.global.nc.f32 %f1, [%ptxspec_buf+8];",
        "ld.global.nc.f32 %f2, [%ptxspec_buf+12];",
    ] {
        assert!(emu.ptx.contains(load), "missing {load}:\n{}", emu.ptx);
    }
    assert_eq!(emu.kernels[0].buffer_param(), Some(2));
    assert!(!emu.ptx.contains("call.uni"));
    // AOT: the defaults 42, 1, 2.0f, 3.0f as immediates.
    let aot = post_link(input.clone(), Mode::Aot, Split::Off).remove(0);
    for mov in [
        "mov.b32 %r1, 0x0000002A;",
        "mov.b32 %r2, 0x00000001;",
        "mov.b32 %f1, 0x40000000;",
        "mov.b32 %f2, 0x40400000;",
    ] {
        assert!(aot.ptx.contains(mov), "missing {mov}:\n{}", aot.ptx);
    }
    assert!(!aot.ptx.contains("ptxspec_buf"));
    // AOT: DPC++'s mark that values cannot be set.
    assert!(
        aot.props
            .to_text()
            .contains("[SYCL/misc properties]\nspecConstsReplacedWithDefault=1|1\n")
    );
    // The buffer in the parameter space: the kernel's last parameter holds
    // the 16 bytes of values, read with ld.param; the signature says so.
    let param = post_link_with(
        input,
        &Options {
            buffer: BufferPlacement::Param,
            ..global
        },
    )
    .remove(0);
    for load in [
        "mov.u64 %ptxspec_buf, k_param_2; ld.param.b32 %r1, [%ptxspec_buf+0];",
        "ld.param.f32 %f2, [%ptxspec_buf+12];",
        ".param .align 4 .b8 k_param_2[16]",
    ] {
        assert!(param.ptx.contains(load), "missing {load}:\n{}", param.ptx);
    }
    let sig = &param.kernels[0];
    let buffer = &sig.params[sig.buffer_param().unwrap()];
    assert_eq!((buffer.size, buffer.align), (16, 4));
    assert_eq!(param.placement, ptxspec_core::image::Delivery::ParamSpace);
    for p in [&emu.ptx, &aot.ptx, &param.ptx] {
        assemble(p, "sm_70", "nvrtc example");
    }
}

fn specialize_puts_given_values_and_extends_by_sign() {
    let img = post_link(vec![kernel_ptx("scalars")], Mode::Emulated, Split::Off).remove(0);
    let mut blob = img.layout.default_blob().to_vec();
    img.layout.patch(&mut blob, "char_id", &[0x80]).unwrap(); // -128
    img.layout
        .patch(&mut blob, "short_id", &0x7fffi16.to_le_bytes())
        .unwrap();
    img.layout.patch(&mut blob, "bool_id", &[0]).unwrap();
    let out = postlink::specialize("s.ptx", &img.ptx, &blob).unwrap();
    assert!(out.contains("mov.b32 %r1, 0xFFFFFF80;"), "{out}");
    assert!(out.contains("mov.b32 %r3, 0x00007FFF;"), "{out}");
    assert!(out.contains("mov.b32 %r2, 0x00000000;"), "{out}");
    assert!(!out.contains("ptxspec_buf"));
    assemble(&out, "sm_90", "specialized scalars");
    // A blob too short for the layout is an error, not a panic.
    let e = postlink::specialize("s.ptx", &img.ptx, &blob[..8]).unwrap_err();
    assert!(e.to_string().contains("values blob has 8"), "{e}");
}

fn split_modes() {
    // conv3x3.ptx (one kernel) and matmul.ptx (matmul, matmul_rolled)
    // linked together: per source two images, per kernel three, each with
    // only its own constant; off gives one with both constants.
    let inputs = vec![kernel_ptx("conv3x3"), kernel_ptx("matmul")];
    let per_source: &[&[&str]] = &[&["conv3x3"], &["matmul", "matmul_rolled"]];
    let per_kernel: &[&[&str]] = &[&["conv3x3"], &["matmul"], &["matmul_rolled"]];
    for (split, want) in [
        (Split::Auto, per_source),
        (Split::PerSource, per_source),
        (Split::PerKernel, per_kernel),
    ] {
        let images = post_link(inputs.clone(), Mode::Emulated, split);
        let names: Vec<Vec<String>> = images
            .iter()
            .map(|i| i.kernels.iter().map(|k| k.name.clone()).collect())
            .collect();
        assert_eq!(names, want, "{split:?}");
        assert_eq!(images[1].layout.constants().len(), 1);
        assert_eq!(
            images[1].layout.constants()[0].constant.symbolic_id(),
            "block_size_id"
        );
        assert_eq!(
            images[1].layout.constants()[0].descriptors[0].id,
            0,
            "own numbering"
        );
        assert!(!images[1].ptx.contains("conv3x3"), "{split:?}");
        for img in &images {
            assemble(&img.ptx, "sm_90", &format!("split {split:?}"));
        }
    }
    let off = post_link(inputs, Mode::Emulated, Split::Off);
    assert_eq!(off.len(), 1);
    assert_eq!(off[0].layout.constants().len(), 2);
    assemble(&off[0].ptx, "sm_90", "split off");
}

fn post_link_err(inputs: Vec<(String, String)>) -> PostLinkError {
    postlink::post_link(inputs, &Options::default()).expect_err("post-link should fail")
}

fn untraceable_getter_names_function_and_line() {
    let (name, text) = kernel_ptx("matmul");
    // The symbolic ID is loaded from memory instead of taken from the
    // header's markup variable.
    let line = text
        .lines()
        .find(|l| l.contains("mov.u64") && l.contains("9markup_of"))
        .expect("mov of the markup");
    let reg = line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_end_matches(',');
    let bad = text.replacen(line, &format!("\tld.global.u64 \t{reg}, [{reg}];"), 1);
    let line_no = bad
        .lines()
        .position(|l| l.contains("ld.global.u64"))
        .unwrap()
        + 1;
    let e = post_link_err(vec![(name, bad)]).to_string();
    assert!(e.starts_with(&format!("matmul.ptx:{line_no}:")), "{e}");
    assert!(
        e.contains("in function matmul") && e.contains("cannot be traced"),
        "{e}"
    );
}

fn missing_default_variable_is_named() {
    let (name, text) = kernel_ptx("matmul");
    const DEFAULT: &str = "_ZN7ptxspec6detail10default_ofIL_Z13block_size_idEEE";
    let var = text
        .lines()
        .find(|l| l.starts_with(".weak") && l.contains(DEFAULT))
        .unwrap();
    let bad = text.replace(var, "");
    let e = post_link_err(vec![(name, bad)]).to_string();
    assert!(e.contains(&format!("{DEFAULT} is not a variable")), "{e}");
}

fn duplicate_visible_definition_names_both_places() {
    let e = post_link_err(vec![
        kernel_ptx("two_tu_helper"),
        kernel_ptx("two_tu_helper"),
    ]);
    let msg = e.to_string();
    assert!(matches!(e, PostLinkError::DuplicateSymbol { .. }), "{msg}");
    assert!(
        msg.contains("_Z16scale_and_offsetfN7ptxspec14kernel_handlerE"),
        "{msg}"
    );
}

fn unbalanced_and_truncated_input_never_panics() {
    for &ex in EXAMPLES {
        let (name, text) = kernel_ptx(ex);
        // Every 97th cut of the file.
        for cut in (0..text.len()).step_by(97) {
            let r = postlink::post_link(
                vec![(name.clone(), text[..cut].to_string())],
                &Options::default(),
            );
            if let Err(e) = r {
                assert!(!e.to_string().is_empty());
            }
        }
        let unbalanced = text.replacen("} // callseq 0", "", 1);
        let e = post_link_err(vec![(name.clone(), unbalanced)]).to_string();
        assert!(e.contains("not closed") || e.contains("end of file"), "{e}");
    }
}

fn one_megabyte_lines() {
    let (name, text) = kernel_ptx("matmul");
    // A 1 MB comment is fine; a 1 MB run of garbage inside the body is not.
    let long_comment = text.replacen("ret;", &format!("// {}\n\tret;", "x".repeat(1 << 20)), 1);
    let img = post_link(
        vec![(name.clone(), long_comment)],
        Mode::Emulated,
        Split::Off,
    );
    assert!(img[0].ptx.len() > 1 << 20);
    let long_garbage = text.replacen("ret;", &format!("{}\n\tret;", "+".repeat(1 << 20)), 1);
    let e = post_link_err(vec![(name, long_garbage)]).to_string();
    assert!(e.contains("matmul.ptx:"), "{e}");
}

fn cli_writes_table_and_images_or_nothing() {
    let dir = tempdir("cli");
    let out = dir.join("out");
    let (conv, matmul) = (kernel_ptx_path("conv3x3"), kernel_ptx_path("matmul"));
    cli_ok(&[
        "post-link".as_ref(),
        "--split".as_ref(),
        "per_kernel".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        conv.as_os_str(),
        matmul.as_os_str(),
    ]);
    let table = std::fs::read_to_string(out.join("table.txt")).unwrap();
    assert_eq!(
        table,
        "[Code|Properties|Symbols]\nconv3x3.ptx|conv3x3.prop|conv3x3.sym\nmatmul.ptx|matmul.prop|matmul.sym\n\
         matmul_rolled.ptx|matmul_rolled.prop|matmul_rolled.sym\n"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("matmul.sym")).unwrap(),
        "matmul\n"
    );
    // inspect --json on the written .prop: the shape other tools rely on.
    let prop = out.join("matmul.prop");
    let json = cli_ok(&["inspect".as_ref(), "--json".as_ref(), prop.as_os_str()]);
    assert_eq!(
        String::from_utf8_lossy(&json.stdout),
        "{\"specialization_constants\":{\"block_size_id\":[[0,0,4]]},\"default_values\":\"10000000\",\
         \"device_requirements\":{\"aspects\":[]}}\n"
    );
    // A bad input among good ones: error, non-zero exit, nothing written.
    let bad = dir.join("bad.ptx");
    std::fs::write(&bad, ".version 8.0\n.entry k( {\n").unwrap();
    let out2 = dir.join("out2");
    let st = cli(&[
        "post-link".as_ref(),
        "-o".as_ref(),
        out2.as_os_str(),
        conv.as_os_str(),
        bad.as_os_str(),
    ]);
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(err.contains("bad.ptx:2:11"), "{err}");
    assert!(!out2.exists(), "output directory written despite the error");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}"); // out and bad.ptx: nothing temporary left
}

/// A kernel calling a chain of `depth` device functions, the last of which
/// reads a constant through the kernel_handler passed down the chain.
fn call_chain(depth: usize) -> String {
    let mut out = String::from(
        ".version 8.0\n.target sm_80\n.address_size 64\n\
         .extern .func (.param .b32 func_retval0) _Z37__sycl_getScalar2020SpecConstantValueIiET_PKcPKvS4_\
         (.param .b64 a0, .param .b64 a1, .param .b64 a2);\n\
         .global .align 4 .b8 deep_id[4] = {1};\n\
         .global .align 1 .b8 $str[8] = {100, 101, 101, 112, 95, 105, 100, 0};\n",
    );
    for i in (0..depth).rev() {
        out.push_str(&format!(
            ".func (.param .b32 r) f{i}(.param .b64 h)\n{{\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<5>;\n\tld.param.u64 %rd1, [h];\n"
        ));
        if i == depth - 1 {
            out.push_str(
                "\tmov.u64 %rd2, $str;\n\tcvta.global.u64 %rd3, %rd2;\n\tmov.u64 %rd4, deep_id;\n\tcvta.global.u64 %rd2, %rd4;\n\
                 \t{\n\t.param .b64 p0;\n\tst.param.b64 [p0], %rd3;\n\t.param .b64 p1;\n\tst.param.b64 [p1], %rd2;\n\
                 \t.param .b64 p2;\n\tst.param.b64 [p2], %rd1;\n\t.param .b32 rv;\n\
                 \tcall.uni (rv), _Z37__sycl_getScalar2020SpecConstantValueIiET_PKcPKvS4_, (p0, p1, p2);\n\
                 \tld.param.b32 %r1, [rv];\n\t}\n",
            );
        } else {
            out.push_str(&format!(
                "\t{{\n\t.param .b64 q0;\n\tst.param.b64 [q0], %rd1;\n\t.param .b32 rv;\n\tcall.uni (rv), f{}, (q0);\n\tld.param.b32 %r1, [rv];\n\t}}\n",
                i + 1
            ));
        }
        out.push_str("\tst.param.b32 [r], %r1;\n\tret;\n}\n");
    }
    out.push_str(
        ".visible .entry k(.param .u64 o, .param .u64 h)\n{\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<5>;\n\tld.param.u64 %rd1, [h];\n\
         \t{\n\t.param .b64 q0;\n\tst.param.b64 [q0], %rd1;\n\t.param .b32 rv;\n\tcall.uni (rv), f0, (q0);\n\tld.param.b32 %r1, [rv];\n\t}\n\
         \tld.param.u64 %rd2, [o];\n\tcvta.to.global.u64 %rd3, %rd2;\n\tst.global.u32 [%rd3], %r1;\n\tret;\n}\n",
    );
    out
}

fn a_deep_call_chain_does_not_overflow_the_stack() {
    // The depth is the input's to choose: the walk from a getter up to its
    // kernel must not recurse once per call. A small stack makes the old
    // recursion overflow at a depth that keeps this test fast.
    let ptx = call_chain(3000);
    let images = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || post_link(vec![("deep.ptx".into(), ptx)], Mode::Emulated, Split::Off))
        .unwrap()
        .join()
        .expect("post-link of a 3000-deep call chain");
    assert_eq!(images.len(), 1);
    let k = &images[0].kernels[0];
    assert_eq!(k.name, "k");
    assert_eq!(k.buffer_param(), Some(1), "the handler reaches the getter");
    // (Not assembled: ptxas takes minutes over 3000 nested calls.)
}

/// The files of an output folder, and those its table names (with the
/// table itself and LTO-IR beside named PTX).
fn folder_and_table(out: &Path) -> (Vec<String>, Vec<String>) {
    let mut found: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let table = std::fs::read_to_string(out.join("table.txt")).unwrap();
    let mut named: Vec<String> = ptxspec_core::props::FileTable::parse(&table)
        .unwrap()
        .rows
        .into_iter()
        .flatten()
        .collect();
    named.push("table.txt".into());
    named.sort();
    (found, named)
}

fn post_link_cmd(out: &Path, inputs: &[PathBuf]) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_ptxspec"));
    c.args(["post-link", "--split", "per_kernel", "-o"])
        .arg(out)
        .args(inputs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    c
}

fn a_killed_post_link_is_cleaned_up_by_the_next() {
    let out = tempdir("killed").join("out");
    let all: Vec<PathBuf> = ["conv3x3", "matmul", "pod", "scalars"]
        .iter()
        .map(|n| kernel_ptx_path(n))
        .collect();
    let one = vec![kernel_ptx_path("tiny")];
    // What a run killed while writing its temporary folder leaves.
    std::fs::create_dir_all(out.join(".ptxspec-tmp-999999")).unwrap();
    std::fs::write(out.join(".ptxspec-tmp-999999/matmul.ptx"), "half").unwrap();
    for round in 0..12u64 {
        let mut child = post_link_cmd(&out, &all).spawn().unwrap();
        // Killed at a different moment each round: before, while and after
        // it writes.
        std::thread::sleep(std::time::Duration::from_micros(round * round * 150));
        let _ = child.kill();
        let _ = child.wait();
        let st = post_link_cmd(&out, &one).status().unwrap();
        assert!(st.success(), "round {round}");
        let (found, named) = folder_and_table(&out);
        assert_eq!(found, named, "round {round}: leftovers or missing files");
    }
}

fn concurrent_post_links_into_one_folder_leave_one_set() {
    let out = tempdir("concurrent").join("out");
    let a: Vec<PathBuf> = ["conv3x3", "pod"]
        .iter()
        .map(|n| kernel_ptx_path(n))
        .collect();
    let b: Vec<PathBuf> = ["matmul", "scalars"]
        .iter()
        .map(|n| kernel_ptx_path(n))
        .collect();
    for round in 0..8 {
        let children: Vec<_> = [&a, &b, &a, &b]
            .iter()
            .map(|inputs| post_link_cmd(&out, inputs).spawn().unwrap())
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success(), "round {round}");
        }
        let (found, named) = folder_and_table(&out);
        assert_eq!(found, named, "round {round}: orphans of another run");
    }
}

fn main() -> std::process::ExitCode {
    harness::run(
        "postlink",
        vec![
            (
                "example_layouts_equal_their_golden_file",
                example_layouts_equal_their_golden_file as fn(),
                harness::NOTHING,
            ),
            (
                "items_whose_tokens_touch_stay_apart_in_every_image",
                items_whose_tokens_touch_stay_apart_in_every_image as fn(),
                harness::NVIDIA,
            ),
            (
                "every_image_of_every_example_assembles_for_sm70_and_sm90",
                every_image_of_every_example_assembles_for_sm70_and_sm90 as fn(),
                harness::NVIDIA,
            ),
            (
                "two_translation_units_number_like_one",
                two_translation_units_number_like_one as fn(),
                harness::NOTHING,
            ),
            (
                "emulated_loads_and_aot_immediates_of_the_nvrtc_example",
                emulated_loads_and_aot_immediates_of_the_nvrtc_example as fn(),
                harness::NVIDIA,
            ),
            (
                "specialize_puts_given_values_and_extends_by_sign",
                specialize_puts_given_values_and_extends_by_sign as fn(),
                harness::NVIDIA,
            ),
            ("split_modes", split_modes as fn(), harness::NVIDIA),
            (
                "untraceable_getter_names_function_and_line",
                untraceable_getter_names_function_and_line as fn(),
                harness::NOTHING,
            ),
            (
                "missing_default_variable_is_named",
                missing_default_variable_is_named as fn(),
                harness::NOTHING,
            ),
            (
                "duplicate_visible_definition_names_both_places",
                duplicate_visible_definition_names_both_places as fn(),
                harness::NOTHING,
            ),
            (
                "unbalanced_and_truncated_input_never_panics",
                unbalanced_and_truncated_input_never_panics as fn(),
                harness::NOTHING,
            ),
            (
                "one_megabyte_lines",
                one_megabyte_lines as fn(),
                harness::NOTHING,
            ),
            (
                "cli_writes_table_and_images_or_nothing",
                cli_writes_table_and_images_or_nothing as fn(),
                harness::NOTHING,
            ),
            (
                "a_deep_call_chain_does_not_overflow_the_stack",
                a_deep_call_chain_does_not_overflow_the_stack as fn(),
                harness::NOTHING,
            ),
            (
                "a_killed_post_link_is_cleaned_up_by_the_next",
                a_killed_post_link_is_cleaned_up_by_the_next as fn(),
                harness::NOTHING,
            ),
            (
                "concurrent_post_links_into_one_folder_leave_one_set",
                concurrent_post_links_into_one_folder_leave_one_set as fn(),
                harness::NOTHING,
            ),
        ],
    )
}
