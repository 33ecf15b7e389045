//! Kernel bundles from source at run time, on the CPU: compiled by NVRTC,
//! values by the documented IDs, built in every mode (the LTO link too:
//! nvJitLink needs no GPU), NVRTC's errors, and the unit cache in memory
//! and on disk. Launches are in the GPU tests. Without NVRTC (or nvJitLink,
//! for the tests that link) a test is reported as ignored, with the reason.

#[path = "support/child.rs"]
mod child;
#[path = "support/redis_server.rs"]
mod redis_server;

use child::{said, this_test_again};
use ptxspec::{Error, KernelId, SourceOptions, SpecId, SpecMode, build, kernel_bundle_from_source};
use redis_server::RedisServer;

const SOURCE: &str = r#"#include "ptxspec.cuh"
struct Coeffs { float a, b; };
constexpr ptxspec::specialization_id<int> scale{2};
constexpr ptxspec::specialization_id<Coeffs> coeffs{Coeffs{1.5f, -2.0f}};
extern "C" __global__ void scaled(int *x, ptxspec::kernel_handler h) {
  x[threadIdx.x] *= h.get_specialization_constant<scale>();
}
extern "C" __global__ void affine(float *y, ptxspec::kernel_handler h) {
  Coeffs c = h.get_specialization_constant<coeffs>();
  y[threadIdx.x] = c.a * y[threadIdx.x] + c.b;
}
"#;

const SCALE: SpecId<i32> = SpecId::new("scale");

/// A source unique to the caller (a comment), so that no cache of this
/// process or an earlier one answers it.
fn fresh(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{SOURCE}// {tag} {} {nanos}\n", std::process::id())
}

fn values_and_every_mode() {
    let src = fresh("modes");
    let mut input =
        kernel_bundle_from_source(&[("kernels.cu", &src)], &SourceOptions::default()).unwrap();
    assert!(
        input.has_kernel(&KernelId::new("scaled")) && input.has_kernel(&KernelId::new("affine"))
    );
    assert_eq!(input.get_specialization_constant(&SCALE).unwrap(), 2);
    input.set_specialization_constant(&SCALE, 3).unwrap();
    assert_eq!(input.get_specialization_constant(&SCALE).unwrap(), 3);
    input
        .set_specialization_constant_bytes("coeffs", &[0u8; 8])
        .unwrap();
    assert!(
        input
            .set_specialization_constant(&SpecId::<i64>::new("scale"), 1)
            .is_err()
    );
    let scaled = KernelId::new("scaled");
    for mode in [
        SpecMode::Emulated,
        SpecMode::Native,
        SpecMode::Lto,
        SpecMode::Tiered,
        SpecMode::Auto,
    ] {
        let exe = build(&input.clone().with_mode(mode)).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(
            exe.get_specialization_constant(&SCALE).unwrap(),
            3,
            "{mode:?}"
        );
        let built = exe.built_image(&scaled).unwrap();
        match mode {
            SpecMode::Native => match built.ptx() {
                Some(ptx) => assert!(ptx.contains("0x00000003"), "{mode:?}"),
                None => panic!("native is PTX"),
            },
            SpecMode::Lto | SpecMode::Auto => {
                assert_eq!(built.mode(), SpecMode::Lto, "{mode:?}");
                let cubin = built.cubin_for_kernel(90, "scaled").unwrap();
                assert!(cubin.bytes.starts_with(b"\x7fELF"), "{mode:?}");
            }
            SpecMode::Tiered => {
                assert_eq!(built.tier_mode(), Some(SpecMode::Lto));
                assert_eq!(
                    exe.wait_for_tier_up(&scaled, 90, std::time::Duration::from_secs(300))
                        .unwrap(),
                    SpecMode::Lto
                );
            }
            _ => assert!(built.ptx().is_some(), "{mode:?}"),
        }
    }
    // The images joined the registered kernels (launches by name find
    // them); a source compiled again with other text defines the kernel
    // anew, and the newest is found.
    let register = |value: i32| {
        let src = format!(
            "#include \"ptxspec.cuh\"\nextern \"C\" __global__ void registered_once(int *x) {{ *x = {value}; }}\n"
        );
        kernel_bundle_from_source(&[("registered.cu", &src)], &SourceOptions::default()).unwrap()
    };
    for value in [1, 2] {
        let made = register(value);
        let found = ptxspec::get_kernel_bundle_for(&[KernelId::new("registered_once")]).unwrap();
        assert_eq!(found.images().len(), 1);
        assert!(found.images()[0].id().starts_with("registered-"));
        assert_eq!(found.images()[0], made.images()[0], "{value}");
    }
    // Without LTO-IR: Lto is refused with a reason, native works.
    let plain = kernel_bundle_from_source(
        &[("plain.cu", &src)],
        &SourceOptions::default().with_lto(false),
    )
    .unwrap();
    assert!(build(&plain.clone().with_mode(SpecMode::Lto)).is_err());
    build(&plain.with_mode(SpecMode::Native)).unwrap();
}

fn compile_errors_carry_nvrtcs_log() {
    let bad = "#include \"ptxspec.cuh\"\nextern \"C\" __global__ void k(int *x) {\n  *x = ;\n}\n";
    let e = kernel_bundle_from_source(&[("user_kernel.cu", bad)], &SourceOptions::default())
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Compile { .. }), "{text}");
    assert_eq!(e.errc(), ptxspec::Errc::Build);
    assert!(text.contains("user_kernel.cu(3): error"), "{text}");
    // Options reach NVRTC: a macro the source needs.
    let needs =
        "#include \"ptxspec.cuh\"\nextern \"C\" __global__ void k(int *x) { *x = VALUE; }\n";
    assert!(kernel_bundle_from_source(&[("needs.cu", needs)], &SourceOptions::default()).is_err());
    kernel_bundle_from_source(
        &[("needs.cu", needs)],
        &SourceOptions::default().with_option("-DVALUE=4"),
    )
    .unwrap();
    assert!(matches!(
        kernel_bundle_from_source(&[], &SourceOptions::default()),
        Err(Error::InvalidObject {
            misuse: ptxspec::Misuse::EmptyList,
            ..
        })
    ));
}

/// A kernel declared without `extern "C"` (C++-mangled in its image) is
/// found by its C++ name wherever a kernel is named — `get_kernel_id`,
/// `get_kernel_bundle_for`, a bundle's `has_kernel` and `built_image` —
/// and known by the image's name after; overloads are not guessed between:
/// asking for them by the C++ name lists both.
fn kernels_are_found_by_their_cpp_names() {
    let tag = std::process::id();
    let src = format!(
        "#include \"ptxspec.cuh\"\n\
         __global__ void damp_{tag}(float *x, ptxspec::kernel_handler h) {{ x[0] *= 0.5f; }}\n\
         namespace ns {{ __global__ void gain_{tag}(float *x) {{ x[0] *= 2.0f; }} }}\n\
         __global__ void over_{tag}(float *x) {{ x[0] = 1.0f; }}\n\
         __global__ void over_{tag}(double *x) {{ x[0] = 1.0; }}\n"
    );
    let input =
        kernel_bundle_from_source(&[("mangled.cu", &src)], &SourceOptions::default()).unwrap();
    let mangled = |id: &KernelId| id.name().starts_with("_Z");
    assert!(
        input.kernel_ids().iter().all(mangled),
        "{:?}",
        input.kernel_ids()
    );
    for (asked, prefix) in [
        (
            format!("damp_{tag}"),
            format!("_Z{}damp_{tag}", 5 + tag.to_string().len()),
        ),
        (format!("ns::gain_{tag}"), "_ZN2ns".to_string()),
        (format!("gain_{tag}"), "_ZN2ns".to_string()),
    ] {
        let id = ptxspec::get_kernel_id(&asked).unwrap_or_else(|e| panic!("{asked}: {e}"));
        assert!(id.name().starts_with(&prefix), "{asked}: {id:?}");
        assert!(input.has_kernel(&KernelId::new(asked.as_str())), "{asked}");
        let only = ptxspec::get_kernel_bundle_for(&[KernelId::new(asked.as_str())])
            .unwrap_or_else(|e| panic!("{asked}: {e}"));
        assert_eq!(
            only.kernel_ids(),
            std::slice::from_ref(&id),
            "the bundle holds the image's name"
        );
        let exe = build(&only).unwrap();
        assert!(
            exe.built_image(&KernelId::new(asked.as_str())).is_ok(),
            "{asked}"
        );
        assert!(exe.built_image(&id).is_ok(), "{asked}");
    }
    let over = format!("over_{tag}");
    for e in [
        ptxspec::get_kernel_id(&over).unwrap_err(),
        ptxspec::get_kernel_bundle_for(&[KernelId::new(over.as_str())]).unwrap_err(),
    ] {
        assert!(matches!(e, Error::KernelNotFound { .. }), "{e}");
        let text = e.to_string();
        assert_eq!(
            text.matches("C++'s mangled name of").count(),
            2,
            "both overloads: {text}"
        );
    }
    assert!(!input.has_kernel(&KernelId::new(over.as_str())));
}

/// Compiles `src` as `name` through the unit cache, as sources compiled
/// at run time are: where it came from (each call's own answer: the
/// process-wide counts move with the tests running beside it).
fn compiled_unit(name: &str, src: &str, opts: &SourceOptions) -> ptxspec_core::compile::CachedUnit {
    use ptxspec_core::compile;
    let copts = compile::CompileOptions {
        include: opts.include.clone(),
        extra: opts.options.clone(),
        lto: opts.lto,
        ..Default::default()
    };
    let header = compile::header_dir(None).unwrap();
    compile::compile_unit_cached(name, src, &copts, &header).unwrap()
}

fn units_are_compiled_once_per_process() {
    use ptxspec_core::compile::UnitFrom;
    let src = fresh("memory");
    let opts = SourceOptions::default();
    let first = compiled_unit("m.cu", &src, &opts);
    let second = compiled_unit("m.cu", &src, &opts);
    assert_eq!(
        (first.from, second.from),
        (UnitFrom::Compiled, UnitFrom::Memory)
    );
    assert_eq!(first.key, second.key);
    assert_eq!(first.unit.ptx, second.unit.ptx);
    kernel_bundle_from_source(&[("m.cu", &src)], &opts).unwrap();
}

/// The child's part of [`units_are_shared_through_the_disk_cache`]: compile
/// the source in `PTXSPEC_TEST_SOURCE` and say what the cache did.
fn child_compiles() -> bool {
    let Some(src) = std::env::var_os("PTXSPEC_TEST_SOURCE") else {
        return false;
    };
    let src = src.to_string_lossy().into_owned();
    kernel_bundle_from_source(&[("disk.cu", &src)], &SourceOptions::default()).unwrap();
    let s = ptxspec_core::compile::unit_cache_stats();
    println!("stats: compiled {} disk {}", s.compiled, s.disk_hits);
    true
}

fn units_are_shared_through_the_disk_cache() {
    let dir = std::env::temp_dir().join(format!("ptxspec-source-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = fresh("disk");
    let child = || {
        let out = this_test_again("units_are_shared_through_the_disk_cache")
            .env("PTXSPEC_TEST_SOURCE", &src)
            .env("PTXSPEC_CACHE_DIR", &dir)
            .output()
            .unwrap();
        said(&out, "stats: ")
    };
    assert_eq!(child(), "stats: compiled 1 disk 0");
    assert_eq!(child(), "stats: compiled 0 disk 1");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child's part of [`a_program_sets_the_remote_cache_up`]: install the
/// remote cache from code (a writer when a key is named), link one source's
/// kernel for sm_90, and say where the cubin came from.
fn child_links_through_the_remote_cache() -> bool {
    let Some(url) = std::env::var_os("PTXSPEC_TEST_REMOTE_URL") else {
        return false;
    };
    let dir = std::path::PathBuf::from(std::env::var_os("PTXSPEC_TEST_REMOTE_DIR").unwrap());
    // A loaded machine can take longer than the default per-call deadline
    // on loopback; this test is about the set-up, not the bound.
    let mut cache = ptxspec::RemoteCache::new(url.to_string_lossy(), dir.join("trusted.pub"))
        .with_timeout_ms(5_000);
    if std::env::var_os("PTXSPEC_TEST_REMOTE_WRITER").is_some() {
        cache = cache.with_signing_key(dir.join("writer.key"));
    }
    cache.clone().install().unwrap();
    assert!(cache.install().is_err(), "a second set-up is refused");
    let src = std::fs::read_to_string(dir.join("remote.cu")).unwrap();
    let input =
        kernel_bundle_from_source(&[("remote.cu", &src)], &SourceOptions::default()).unwrap();
    let exe = build(&input.with_mode(SpecMode::Lto)).unwrap();
    let cubin = exe
        .built_image(&KernelId::new("scaled"))
        .unwrap()
        .cubin_for_kernel(90, "scaled")
        .unwrap();
    println!("source: {:?}", cubin.source);
    let s = ptxspec::stats();
    println!(
        "stats: links {} remote hits {} disk hits {} timed {}",
        s.cubins.links,
        s.cubins.remote_hits,
        s.cubins.disk_hits,
        s.cubins.link_time > std::time::Duration::ZERO
    );
    let log = exe.build_log();
    println!(
        "log: {}",
        log.lines()
            .find(|l| l.starts_with("cubin of image"))
            .unwrap_or("no cubin line")
    );
    true
}

/// `ptxspec::RemoteCache`: a program sets the remote cache up in code; a
/// writer's cubin then loads in a reader with an empty disk cache.
fn a_program_sets_the_remote_cache_up() {
    let dir = std::env::temp_dir().join(format!("ptxspec-remote-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let public =
        ptxspec::RemoteCache::generate_keys(dir.join("writer.key"), dir.join("trusted.pub"))
            .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("trusted.pub"))
            .unwrap()
            .trim(),
        public
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let secret = std::fs::metadata(dir.join("writer.key")).unwrap();
        assert_eq!(secret.permissions().mode() & 0o777, 0o600);
    }
    // A second pair over the first is refused, and the first stays.
    let again =
        ptxspec::RemoteCache::generate_keys(dir.join("writer.key"), dir.join("trusted.pub"));
    assert!(
        matches!(&again, Err(ptxspec::Error::File { what, .. }) if what.contains("writer.key")),
        "{again:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("trusted.pub"))
            .unwrap()
            .trim(),
        public
    );
    std::fs::write(dir.join("remote.cu"), fresh("remote")).unwrap();
    let server = RedisServer::start(&dir, &[]).unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let child = |writer: bool, disk: &str| {
        let mut c = this_test_again("a_program_sets_the_remote_cache_up");
        c.env("PTXSPEC_TEST_REMOTE_URL", &url)
            .env("PTXSPEC_TEST_REMOTE_DIR", &dir)
            .env("PTXSPEC_CACHE_DIR", dir.join(disk))
            .env_remove("PTXSPEC_REMOTE_CACHE");
        if writer {
            c.env("PTXSPEC_TEST_REMOTE_WRITER", "1");
        }
        let out = c.output().unwrap();
        let answer = said(&out, "source: ");
        let stats = said(&out, "stats: ");
        let log = said(&out, "log: ");
        (
            format!("{answer} [{}]", String::from_utf8_lossy(&out.stderr).trim()),
            stats,
            log,
        )
    };
    let (first, first_stats, first_log) = child(true, "disk-writer");
    let (second, second_stats, second_log) = child(false, "disk-reader");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(first.starts_with("source: Linked"), "{first}");
    assert!(
        second.starts_with("source: Remote"),
        "{second} (the writer: {first})"
    );
    // ptxspec::stats() counts what each process did, and the build log
    // says where the cubin came from.
    assert_eq!(
        first_stats,
        "stats: links 1 remote hits 0 disk hits 0 timed true"
    );
    assert_eq!(
        second_stats,
        "stats: links 0 remote hits 1 disk hits 0 timed false"
    );
    assert!(
        first_log.ends_with("linked here (stored on disk and uploaded to the remote store)"),
        "{first_log}"
    );
    assert!(
        second_log.ends_with("the remote cache (signed by a trusted key)"),
        "{second_log}"
    );
}

/// The child's part of [`a_changed_header_is_compiled_again`]: compile
/// `src/k.cu` of `PTXSPEC_TEST_HEADERS_DIR` (the working folder) with the
/// include folder `inc`, `-I optinc` and a pre-included header among its
/// options; say the PTX's stores and what the unit cache did.
fn child_compiles_with_headers() -> bool {
    let Some(dir) = std::env::var_os("PTXSPEC_TEST_HEADERS_DIR") else {
        return false;
    };
    let dir = std::path::PathBuf::from(dir);
    let src = std::fs::read_to_string(dir.join("src/k.cu")).unwrap();
    let opts = SourceOptions::default()
        .with_lto(false)
        .with_include(dir.join("inc"))
        .with_option(format!("-I{}", dir.join("optinc").display()))
        .with_option(format!("--pre-include={}", dir.join("pre.cuh").display()));
    let bundle = kernel_bundle_from_source(&[("src/k.cu", &src)], &opts).unwrap();
    let ptx = bundle.images()[0].ptx().to_string();
    let stores: Vec<&str> = ptx
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("mov.u32") || l.starts_with("st.global"))
        .collect();
    let s = ptxspec_core::compile::unit_cache_stats();
    println!("ptx: {}", stores.join(" | "));
    println!("stats: compiled {} disk {}", s.compiled, s.disk_hits);
    true
}

/// A header changed between two processes that share the disk cache is
/// compiled again, whichever way the unit reaches it (issue: the unit key
/// once hashed only headers directly in an include folder): directly in
/// an include folder, in its subfolder, by an absolute path, by `../` from
/// the source's folder, beside the source, through `-I` among the options,
/// included by another header, and pre-included by an option. Each way's
/// header is changed in turn; the new process's PTX must hold its new
/// value, and nothing may have come from the cache.
fn a_changed_header_is_compiled_again() {
    let dir = std::env::temp_dir().join(format!("ptxspec-headers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["src", "inc/sub", "abs", "optinc"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    // (file, macro, how the unit reaches it)
    let ways: [(&str, &str, &str); 8] = [
        ("inc/direct.cuh", "DIRECT", "#include \"direct.cuh\""),
        ("inc/sub/deep.cuh", "DEEP", "#include \"sub/deep.cuh\""),
        ("abs/abs.cuh", "ABS", ""),
        ("up.cuh", "UP", "#include \"../up.cuh\""),
        ("src/beside.cuh", "BESIDE", "#include \"beside.cuh\""),
        ("optinc/opt.cuh", "OPT", "#include <opt.cuh>"),
        ("optinc/inner.cuh", "INNER", ""),
        ("pre.cuh", "PRE", ""),
    ];
    let write_header = |file: &str, name: &str, value: u32| {
        let mut text = format!("#pragma once\n#define {name} {value}\n");
        if file == "optinc/opt.cuh" {
            text.push_str("#include \"inner.cuh\"\n");
        }
        std::fs::write(dir.join(file), text).unwrap();
    };
    let mut values = [0u32; 8];
    for (i, (file, name, _)) in ways.iter().enumerate() {
        values[i] = 1 << i;
        write_header(file, name, values[i]);
    }
    let mut src = String::from("#include \"ptxspec.cuh\"\n");
    for (_, _, include) in &ways {
        if !include.is_empty() {
            src.push_str(include);
            src.push('\n');
        }
    }
    src.push_str(&format!(
        "#include \"{}\"\n",
        dir.join("abs/abs.cuh").display()
    ));
    src.push_str(&format!(
        "extern \"C\" __global__ void headers(int *x) {{ *x = {}; }}\n// {}\n",
        ways.iter().map(|w| w.1).collect::<Vec<_>>().join(" + "),
        fresh("headers").lines().last().unwrap()
    ));
    std::fs::write(dir.join("src/k.cu"), &src).unwrap();
    let child = || {
        let out = this_test_again("a_changed_header_is_compiled_again")
            .env("PTXSPEC_TEST_HEADERS_DIR", &dir)
            .env("PTXSPEC_CACHE_DIR", dir.join("cache"))
            .current_dir(&dir)
            .output()
            .unwrap();
        (said(&out, "ptx: "), said(&out, "stats: "))
    };
    let sum = |values: &[u32]| values.iter().sum::<u32>();
    let (ptx, stats) = child();
    assert!(ptx.contains(&format!(" {};", sum(&values))), "{ptx}");
    assert_eq!(stats, "stats: compiled 1 disk 0");
    let (_, stats) = child();
    assert_eq!(
        stats, "stats: compiled 0 disk 1",
        "unchanged: from the disk cache"
    );
    for (i, (file, name, _)) in ways.iter().enumerate() {
        values[i] += 1000;
        write_header(file, name, values[i]);
        let (ptx, stats) = child();
        assert!(
            ptx.contains(&format!(" {};", sum(&values))),
            "{file} ({name}) changed, the PTX is stale: {ptx}"
        );
        assert_eq!(stats, "stats: compiled 1 disk 0", "{file}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A unit whose included file is named by a macro is keyed through the
/// macro's definitions: compiled once, then answered from the cache, and
/// compiled again when the file the macro names changes. One whose macro
/// cannot be resolved before compiling is refused (NVRTC would open a file
/// no check saw).
fn a_computed_include_is_keyed_through_its_macro() {
    let dir = std::env::temp_dir().join(format!("ptxspec-computed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("v.cuh"), "#define V 5\n").unwrap();
    let src = format!(
        "#include \"ptxspec.cuh\"\n#define HEADER \"v.cuh\"\n#include HEADER\n\
         extern \"C\" __global__ void computed(int *x) {{ *x = V; }}\n{}",
        fresh("computed").lines().last().unwrap()
    );
    let opts = SourceOptions::default()
        .with_lto(false)
        .with_include(dir.clone());
    let first = compiled_unit("computed.cu", &src, &opts);
    assert_eq!(first.from, ptxspec_core::compile::UnitFrom::Compiled);
    assert!(first.key.is_some() && first.unit.ptx.contains("computed"));
    let again = compiled_unit("computed.cu", &src, &opts);
    assert_ne!(again.from, ptxspec_core::compile::UnitFrom::Compiled);
    assert_eq!(again.key, first.key);
    std::fs::write(dir.join("v.cuh"), "#define V 6\n").unwrap();
    let changed = compiled_unit("computed.cu", &src, &opts);
    assert_eq!(changed.from, ptxspec_core::compile::UnitFrom::Compiled);
    assert_ne!(changed.key, first.key);
    kernel_bundle_from_source(&[("computed.cu", &src)], &opts).unwrap();
    let unresolved = src.replace("#define HEADER \"v.cuh\"\n", "");
    let e = kernel_bundle_from_source(&[("computed.cu", &unresolved)], &opts).unwrap_err();
    assert!(e.to_string().contains("names its file by a macro"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The GPT-2 example's kernels (`examples/gpt2/kernels.cu`) compile and
/// build in the modes the example compares, for both of its shapes: every
/// kernel of its forward pass, backward pass and update is there (the list
/// is the source's own: a kernel added to it must be added here), the
/// native image holds the channel count as an immediate, and the LTO image
/// links for sm_90; the literal build (every size a `-D` literal) and the
/// generic build (the sizes a by-value argument) compile and link too — so
/// that the example's GPU path cannot break unseen on a machine without a
/// GPU.
fn the_gpt2_example_kernels_build_in_its_modes() {
    const KERNELS: [&str; 20] = [
        "encoder_forward",
        "layernorm_forward",
        "add_bias",
        "attention_permute",
        "attention_unpermute",
        "softmax_causal",
        "residual_forward",
        "gelu_forward",
        "crossentropy_forward",
        "crossentropy_backward",
        "column_sum_partial",
        "column_sum_finish",
        "layernorm_backward",
        "gelu_backward",
        "attention_unpermute_backward",
        "softmax_causal_backward",
        "attention_permute_backward",
        "wpe_backward",
        "wte_backward",
        "adamw_update",
    ];
    let source = include_str!("../examples/gpt2/kernels.cu");
    let declared: Vec<&str> = source
        .split("extern \"C\" __global__ void ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .collect();
    assert_eq!(declared, KERNELS, "the kernels kernels.cu declares");
    let input =
        kernel_bundle_from_source(&[("gpt2.cu", source)], &SourceOptions::default()).unwrap();
    for name in KERNELS {
        assert!(input.has_kernel(&KernelId::new(name)), "{name}");
    }
    for (channels, heads, vocab, padded) in [(64, 4, 97, 128), (768, 12, 50257, 50304)] {
        let mut values = input.clone();
        for (id, value) in [
            ("channels", channels),
            ("heads", heads),
            ("vocab", vocab),
            ("padded_vocab", padded),
        ] {
            values
                .set_specialization_constant(&SpecId::<i32>::new(id), value)
                .unwrap();
        }
        for mode in [SpecMode::Emulated, SpecMode::Native, SpecMode::Lto] {
            let exe = build(&values.clone().with_mode(mode))
                .unwrap_or_else(|e| panic!("C {channels}, {mode:?}: {e}"));
            for name in KERNELS {
                assert!(
                    exe.has_kernel(&KernelId::new(name)),
                    "C {channels}, {mode:?}: {name}"
                );
            }
            let built = exe
                .built_image(&KernelId::new("layernorm_forward"))
                .unwrap();
            match mode {
                SpecMode::Native => {
                    let ptx = built.ptx().expect("native is PTX");
                    let immediate = format!("0x{channels:08x}");
                    assert!(
                        ptx.contains(&immediate),
                        "C {channels}: no {immediate} in the native PTX"
                    );
                }
                SpecMode::Lto => {
                    assert_eq!(built.mode(), SpecMode::Lto);
                    assert!(built.cubin_for_kernel(90, "layernorm_forward").is_ok());
                }
                _ => assert_eq!(built.mode(), SpecMode::Emulated),
            }
        }
        let mut literal_options = SourceOptions::default();
        literal_options.options = [
            "-DGPT2_LITERAL".to_string(),
            format!("-DGPT2_C={channels}"),
            format!("-DGPT2_NH={heads}"),
            format!("-DGPT2_V={vocab}"),
            format!("-DGPT2_VP={padded}"),
            "-DGPT2_B=4".to_string(),
            "-DGPT2_T=16".to_string(),
        ]
        .into();
        let literal = kernel_bundle_from_source(&[("gpt2.cu", source)], &literal_options)
            .unwrap_or_else(|e| panic!("C {channels}, literal: {e}"));
        let exe = build(&literal.with_mode(SpecMode::Lto)).unwrap();
        assert!(
            exe.built_image(&KernelId::new("softmax_causal"))
                .unwrap()
                .cubin_for_kernel(90, "softmax_causal")
                .is_ok()
        );
        // The generic build: the dimensions a by-value struct, the last
        // parameter of the kernels that read them.
        let mut generic_options = SourceOptions::default();
        generic_options.options = vec!["-DGPT2_GENERIC".to_string()];
        let generic = kernel_bundle_from_source(&[("gpt2.cu", source)], &generic_options)
            .unwrap_or_else(|e| panic!("generic: {e}"));
        let exe = build(&generic.with_mode(SpecMode::Lto)).unwrap();
        for name in KERNELS {
            let built = exe.built_image(&KernelId::new(name)).unwrap();
            assert!(built.cubin_for_kernel(90, name).is_ok(), "generic: {name}");
        }
    }
}

fn main() -> std::process::ExitCode {
    if child_compiles() || child_links_through_the_remote_cache() || child_compiles_with_headers() {
        return std::process::ExitCode::SUCCESS;
    }
    let args = libtest_mimic::Arguments::from_args();
    let nvrtc = ptxspec_core::toolkit::require(ptxspec_core::toolkit::Lib::Nvrtc);
    let nvjitlink = ptxspec_core::toolkit::require(ptxspec_core::toolkit::Lib::NvJitLink);
    if let Err(e) = &nvrtc {
        eprintln!("source: NVRTC not found, every test ignored: {e}");
    } else if let Err(e) = &nvjitlink {
        eprintln!("source: nvJitLink not found, the tests that link are ignored: {e}");
    }
    let tests: [(&str, fn(), bool); 9] = [
        (
            "the_gpt2_example_kernels_build_in_its_modes",
            the_gpt2_example_kernels_build_in_its_modes,
            true,
        ),
        (
            "kernels_are_found_by_their_cpp_names",
            kernels_are_found_by_their_cpp_names,
            false,
        ),
        (
            "a_changed_header_is_compiled_again",
            a_changed_header_is_compiled_again,
            false,
        ),
        (
            "a_computed_include_is_keyed_through_its_macro",
            a_computed_include_is_keyed_through_its_macro,
            false,
        ),
        (
            "a_program_sets_the_remote_cache_up",
            a_program_sets_the_remote_cache_up,
            true,
        ),
        ("values_and_every_mode", values_and_every_mode, true),
        (
            "compile_errors_carry_nvrtcs_log",
            compile_errors_carry_nvrtcs_log,
            false,
        ),
        (
            "units_are_compiled_once_per_process",
            units_are_compiled_once_per_process,
            false,
        ),
        (
            "units_are_shared_through_the_disk_cache",
            units_are_shared_through_the_disk_cache,
            false,
        ),
    ];
    let redis = redis_server::installed();
    if !redis {
        eprintln!("source: no redis-server on PATH: the remote cache's test is ignored");
    }
    let trials = tests
        .into_iter()
        .map(|(name, test, links)| {
            let needs_redis = name == "a_program_sets_the_remote_cache_up";
            let runnable =
                nvrtc.is_ok() && (!links || nvjitlink.is_ok()) && (redis || !needs_redis);
            libtest_mimic::Trial::test(name, move || {
                test();
                Ok(())
            })
            .with_ignored_flag(!runnable)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
