//! Optional kernel features end to end: inference from NVRTC output,
//! propagation through two levels of calls and two translation units, the
//! split by requirements, the aspect filter, and the runtime's check
//! against a device profile (no GPU needed).

mod common;

use std::path::Path;

use std::collections::BTreeSet;

use common::*;
use ptxspec_core::features::{Aspect, Requirements};
use ptxspec_core::postlink::{Mode, PostLinkedImage, Split};

fn features_images(split: Split) -> Vec<PostLinkedImage> {
    post_link(
        vec![kernel_ptx("features"), kernel_ptx("features_helper")],
        Mode::Emulated,
        split,
    )
}

fn image_of<'a>(images: &'a [PostLinkedImage], kernel: &str) -> &'a PostLinkedImage {
    images
        .iter()
        .find(|i| i.kernels.iter().any(|k| k.name == kernel))
        .unwrap_or_else(|| panic!("no image has {kernel}"))
}

fn aspects(a: &[Aspect]) -> BTreeSet<Aspect> {
    a.iter().copied().collect()
}

fn requirements_inferred_propagated_and_split() {
    let images = features_images(Split::Off);
    let want: &[(&str, &[Aspect])] = &[
        // fp64 only two calls deep in the other translation unit.
        ("fp64_two_levels", &[Aspect::FP64]),
        ("fp64_axpy", &[Aspect::FP64]),
        ("count64", &[Aspect::ATOMIC64]),
        ("half_add", &[Aspect::FP16]),
        // Declared fp16 ∪ used fp64 (through scale_f64).
        ("declares_too_little", &[Aspect::FP16, Aspect::FP64]),
        ("warp_sum", &[]),
    ];
    for (kernel, a) in want {
        let img = image_of(&images, kernel);
        assert_eq!(
            img.requirements,
            Requirements {
                aspects: aspects(a),
                // Only the warp reduction relies on the sub-group size.
                reqd_sub_group_size: (*kernel == "warp_sum").then_some(32),
                ..Default::default()
            },
            "{kernel}"
        );
    }
    // Even with --split off, an image only holds kernels with equal
    // requirements: the two fp64 kernels together, the others alone.
    let mut groups: Vec<Vec<String>> = images
        .iter()
        .map(|i| i.kernels.iter().map(|k| k.name.clone()).collect())
        .collect();
    groups.sort();
    assert_eq!(
        groups,
        [
            vec!["count64".to_string()],
            vec!["declares_too_little".to_string()],
            vec!["fp64_two_levels".to_string(), "fp64_axpy".to_string()],
            vec!["half_add".to_string()],
            vec!["warp_sum".to_string()],
        ]
    );
    for img in &images {
        assemble(&img.ptx, "sm_90", &img.stem);
        // The property file carries the requirements.
        let back = Requirements::read(
            &ptxspec_core::props::PropertySets::parse(&img.props.to_text()).unwrap(),
        )
        .unwrap();
        assert_eq!(back, img.requirements, "{}", img.stem);
    }
}

fn undeclared_use_warns_with_the_call_chain() {
    let images = features_images(Split::PerKernel);
    let img = image_of(&images, "declares_too_little");
    assert_eq!(
        img.warnings,
        [
            "warning: function 'declares_too_little' uses aspect 'fp64' not listed in its PTXSPEC_DEVICE_HAS \
          (call chain: declares_too_little -> _Z9scale_f64d)"
        ]
    );
    // fp64_axpy declares what it uses: no warning.
    assert!(image_of(&images, "fp64_axpy").warnings.is_empty());
}

fn reqntid_is_a_required_work_group_size() {
    let ptx = ".version 8.0\n.target sm_70\n.address_size 64\n\
               .visible .entry fixed(.param .u64 p) .reqntid 64, 2, 1\n{\n ret;\n}\n\
               .visible .entry free(.param .u64 p)\n{\n ret;\n}\n";
    let images = post_link(
        vec![("r.ptx".into(), ptx.into())],
        Mode::Emulated,
        Split::PerSource,
    );
    assert_eq!(images.len(), 2, "different work-group sizes are split");
    assert_eq!(
        image_of(&images, "fixed").requirements.reqd_work_group_size,
        Some(vec![64, 2, 1])
    );
    assert_eq!(
        image_of(&images, "free").requirements.reqd_work_group_size,
        None
    );
}

fn aspect_filter_drops_what_a_target_cannot_run() {
    let dir = tempdir("aspect-filter");
    let out = dir.join("images");
    let (features, helper) = (
        kernel_ptx_path("features"),
        kernel_ptx_path("features_helper"),
    );
    cli_ok(&[
        "post-link".as_ref(),
        "--split".as_ref(),
        "per_kernel".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        features.as_os_str(),
        helper.as_os_str(),
    ]);
    // A configuration whose target lacks fp64.
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "nofp64:\n  aspects: [gpu, fp16, atomic64]\n  sub-group-sizes: [32]\n",
    )
    .unwrap();
    let filtered = out.join("nofp64.txt");
    let (target_arg, config_arg) = (
        |t: &str| format!("--target={t}"),
        format!("--device-config-file={}", config.display()),
    );
    let table = out.join("table.txt");
    let run = |target: &str| {
        let t = target_arg(target);
        cli(&[
            "aspect-filter".as_ref(),
            t.as_ref(),
            config_arg.as_ref(),
            table.as_os_str(),
            "-o".as_ref(),
            filtered.as_os_str(),
        ])
    };
    let st = run("nofp64");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let table = std::fs::read_to_string(&filtered).unwrap();
    assert_eq!(
        table,
        "[Code|Properties|Symbols]\ncount64.ptx|count64.prop|count64.sym\nhalf_add.ptx|half_add.prop|half_add.sym\n\
         warp_sum.ptx|warp_sum.prop|warp_sum.sym\n"
    );
    // Into another directory: the rows resolve from there, to the same files.
    let elsewhere = dir.join("elsewhere/deeper");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let moved = elsewhere.join("nofp64.txt");
    let t = target_arg("nofp64");
    cli_ok(&[
        "aspect-filter".as_ref(),
        t.as_ref(),
        config_arg.as_ref(),
        out.join("table.txt").as_os_str(),
        "-o".as_ref(),
        moved.as_os_str(),
    ]);
    let rows = std::fs::read_to_string(&moved).unwrap();
    assert!(
        rows.contains(
            "../../images/count64.ptx|../../images/count64.prop|../../images/count64.sym\n"
        ),
        "{rows}"
    );
    for cell in rows.lines().skip(1).flat_map(|l| l.split('|')) {
        assert_eq!(
            std::fs::read(elsewhere.join(cell)).unwrap(),
            std::fs::read(out.join(Path::new(cell).file_name().unwrap())).unwrap()
        );
    }
    // An unknown target is an error naming the known ones.
    let st = run("sm_90");
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains("unknown target \"sm_90\""));
}

fn runtime_check_against_a_device_profile() {
    // An image needing fp16, checked against a device without it: the error
    // the optional kernel features design (DPC++) asks for, before anything is loaded.
    let images = features_images(Split::PerKernel);
    let img = image_of(&images, "half_add");
    let image = ptxspec::image::Image::new(img.stem.clone(), img.ptx.clone(), &img.props.to_text())
        .unwrap();
    let mut sm50 = ptxspec::Device::profile(0, (5, 0));
    sm50.name = "profile without fp16".into();
    sm50.aspects = vec![Aspect::GPU, Aspect::FP64, Aspect::ATOMIC64];
    let e = sm50.check(image.requirements()).unwrap_err();
    assert_eq!(e.errc(), ptxspec::Errc::KernelNotSupported);
    assert_eq!(
        e.to_string(),
        "kernel_not_supported: Kernel uses optional feature corresponding to 'aspect::fp16' but device does not support this aspect."
    );
    // The fp64 image is fine on that device: one unsupported kernel does not
    // fail the others.
    let fp64 = image_of(&images, "fp64_axpy");
    let fp64 =
        ptxspec::image::Image::new(fp64.stem.clone(), fp64.ptx.clone(), &fp64.props.to_text())
            .unwrap();
    assert!(sm50.check(fp64.requirements()).is_ok());
}

fn main() -> std::process::ExitCode {
    harness::run(
        "features",
        vec![
            (
                "requirements_inferred_propagated_and_split",
                requirements_inferred_propagated_and_split as fn(),
                harness::NVIDIA,
            ),
            (
                "undeclared_use_warns_with_the_call_chain",
                undeclared_use_warns_with_the_call_chain as fn(),
                harness::NOTHING,
            ),
            (
                "reqntid_is_a_required_work_group_size",
                reqntid_is_a_required_work_group_size as fn(),
                harness::NOTHING,
            ),
            (
                "aspect_filter_drops_what_a_target_cannot_run",
                aspect_filter_drops_what_a_target_cannot_run as fn(),
                harness::NOTHING,
            ),
            (
                "runtime_check_against_a_device_profile",
                runtime_check_against_a_device_profile as fn(),
                harness::NOTHING,
            ),
        ],
    )
}
