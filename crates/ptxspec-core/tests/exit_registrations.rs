//! The toolkit's warm-up (`lto::warm_up`) reaches every code path of
//! NVIDIA's libraries that registers an exit handler on the way of a
//! background link: after it, linking a real kernel — LTO-IR with its
//! definitions, and PTX — registers none. Exit's hook runs before the
//! handlers registered before it, and the warm-up is what a guarded
//! thread's exit waits for: a handler a library registered during a later
//! call would run before the hook, under that call when exit comes from a
//! thread other than the main one (seen with `gdb`: nvJitLink registered
//! one at the first link of LTO-IR holding a kernel, which the warm-up's
//! definitions alone did not reach). The links are a tier's (the values as
//! definitions, one kernel) and adaptive arguments' LTO route's (a wrapper
//! compiled by libNVVM, linked to PTX and compiled), each twice with new
//! values, and a PTX compile.
//!
//! A child process (this binary again, `PTXSPEC_TEST_ATEXIT_CHILD` set)
//! runs with a library preloaded (`support/count_atexit.c`, built here with
//! the system's C compiler) that counts the libraries' `__cxa_atexit`
//! calls. Reported ignored without a C compiler or without NVRTC and
//! nvJitLink (failed under `PTXSPEC_REQUIRE_TOOLS=1`).

use std::process::Command;

#[path = "support/c_library.rs"]
mod c_library;

use ptxspec_core::arguments::{FixedArguments, KernelParams};
use ptxspec_core::digest::Digest;
use ptxspec_core::lto::{Definition, LinkRequest, LtoIr};
use ptxspec_core::toolkit::worker::Toolkit;
use ptxspec_core::toolkit::{Lib, available, nvjitlink, nvrtc};

const CHILD: &str = "PTXSPEC_TEST_ATEXIT_CHILD";

/// A kernel as an image holds one: parameters, an external constant its
/// definitions give, arithmetic, a loop.
const KERNEL: &str = r#"
extern "C" __device__ const unsigned char ptxspec_test_scale[4];
extern "C" __global__ void scale(float *x, int n) {
    float s = (float)ptxspec_test_scale[0];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = x[i] * s + 1.0f;
}
"#;

/// The libraries' registrations so far (the preloaded counter's).
fn registered() -> i64 {
    // SAFETY: looks a symbol up by a NUL-terminated name; the child runs
    // with the counting library preloaded, whose function of this name
    // takes nothing and returns a long.
    unsafe {
        let f = libc::dlsym(libc::RTLD_DEFAULT, c"ptxspec_test_atexit_count".as_ptr());
        assert!(!f.is_null(), "the counting library is not preloaded");
        let f: extern "C" fn() -> libc::c_long = std::mem::transmute(f);
        f()
    }
}

fn child() {
    let opts = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // The test's own inputs, made first: NVRTC's PTX output reaches code
    // of its own, which no background link runs.
    let ltoir = nvrtc::compile(
        KERNEL,
        "scale.cu",
        &opts(&["-rdc=true", "-dlto", "-arch=compute_90"]),
        nvrtc::Output::LtoIr,
    )
    .expect("NVRTC made LTO-IR");
    let ptx = nvrtc::compile(
        &KERNEL.replace(
            "extern \"C\" __device__ const unsigned char ptxspec_test_scale[4];",
            "__device__ const unsigned char ptxspec_test_scale[4] = {3, 0, 0, 0};",
        ),
        "scale.cu",
        &opts(&["-arch=compute_90"]),
        nvrtc::Output::Ptx,
    )
    .expect("NVRTC made PTX");
    let before_warm_up = registered();
    ptxspec_core::lto::warm_up();
    let after_warm_up = registered();
    let params = KernelParams::from_ptx(&String::from_utf8_lossy(&ptx.code), "scale")
        .expect("the kernel's parameters");
    let units = LtoIr {
        units: vec![("scale.ltoir".into(), ltoir.code.clone().into())],
    };
    for round in 0..2u8 {
        // New values each round: a link, not a cache's hit.
        let bytes = [3 + round, 0, 0, 0];
        let defs = [Definition {
            symbol: "ptxspec_test_scale",
            align: 4,
            bytes: &bytes,
        }];
        let request = |arguments| LinkRequest {
            ltoir: &units,
            ltoir_identity: Digest::of(&ltoir.code),
            definitions: &defs,
            arch: 90,
            options: &[],
            toolkit: &Toolkit::InProcess,
            kernel: Some("scale"),
            arguments,
        };
        // As a tier links (the values as definitions, one kernel) and as
        // adaptive arguments' LTO route does (an argument fixed: a wrapper
        // compiled by libNVVM, linked to PTX, then compiled).
        ptxspec_core::lto::cubin(&request(None)).expect("the LTO link");
        // Without libNVVM (the definitions through NVRTC), no argument is
        // fixed through LTO.
        if available(Lib::Nvvm) {
            let n = (1000 + i32::from(round)).to_le_bytes().to_vec();
            let fixed = FixedArguments::new(&params, vec![(1, n)]).expect("n fixed");
            ptxspec_core::lto::cubin(&request(Some(&fixed))).expect("the link with n fixed");
        }
        nvjitlink::link(
            &[(nvjitlink::InputKind::Ptx, &ptx.code, "scale.ptx")],
            &opts(&["-arch=sm_90"]),
        )
        .expect("the PTX link");
        println!(
            "registered: before the warm-up {before_warm_up}, after it {after_warm_up}, after link round {round} {}",
            registered()
        );
    }
}

fn links_after_the_warm_up_register_no_exit_handler() {
    let dir = std::env::temp_dir().join(format!("ptxspec-atexit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let counter = c_library::build(
        "count_atexit.c",
        include_str!("support/count_atexit.c"),
        dir.join("libcount_atexit.so"),
        &["-ldl"],
    );
    // The definitions through libNVVM where it is found (as CI has it), and
    // through NVRTC where it is not (PTXSPEC_NVVM naming no file).
    for (run, nvvm) in [
        ("as found", None),
        ("without libNVVM", Some("/nonexistent/libnvvm.so")),
    ] {
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .env(CHILD, "1")
            .env("PTXSPEC_CACHE_DIR", dir.join(run.replace(' ', "-")))
            .env_remove("PTXSPEC_REMOTE_CACHE")
            .env("LD_PRELOAD", &counter);
        if let Some(nvvm) = nvvm {
            child.env("PTXSPEC_NVVM", nvvm);
        }
        let out = child.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{run}: the child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let counts: Vec<Vec<i64>> = stdout
            .lines()
            .filter(|l| l.starts_with("registered:"))
            .map(|l| {
                l.split(|c: char| !c.is_ascii_digit())
                    .filter_map(|w| w.parse().ok())
                    .collect()
            })
            .collect();
        // Each line: before, after the warm-up, the round, after the round.
        assert_eq!(counts.len(), 2, "{run}: {stdout}");
        let (before, warm) = (counts[0][0], counts[0][1]);
        // The counter sees the libraries' registrations: the warm-up's
        // loads and first calls make many.
        assert!(warm > before + 100, "{run}: {stdout}");
        for line in &counts {
            assert_eq!(
                line[3], warm,
                "{run}: a link after the warm-up registered exit handlers: {stdout}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() -> std::process::ExitCode {
    if std::env::var_os(CHILD).is_some() {
        child();
        return std::process::ExitCode::SUCCESS;
    }
    let args = libtest_mimic::Arguments::from_args();
    let has_cc = c_library::cc_on_path();
    let has_toolkit = available(Lib::Nvrtc) && available(Lib::NvJitLink);
    let missing = match (has_cc, has_toolkit) {
        (true, true) => None,
        (false, _) => Some("no C compiler (cc) on PATH"),
        (true, false) => Some("NVRTC or nvJitLink not found"),
    };
    if let Some(missing) = missing {
        if std::env::var_os("PTXSPEC_REQUIRE_TOOLS").is_some_and(|v| v == "1") {
            eprintln!("exit_registrations: PTXSPEC_REQUIRE_TOOLS=1, and {missing}");
            return std::process::ExitCode::FAILURE;
        }
        eprintln!("exit_registrations: {missing}: the test is ignored");
    }
    let trials = vec![
        libtest_mimic::Trial::test("links_after_the_warm_up_register_no_exit_handler", || {
            links_after_the_warm_up_register_no_exit_handler();
            Ok(())
        })
        .with_ignored_flag(missing.is_some()),
    ];
    libtest_mimic::run(&args, trials).exit_code()
}
