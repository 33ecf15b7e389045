//! The harness of the GPU test binaries (`harness = false`): without a CUDA
//! driver it says so and reports every test as ignored, never as passed (CI
//! has no GPU) — or, with `PTXSPEC_REQUIRE_GPU=1` (for GPU machines, where
//! a missing driver is a fault), fails; with a driver present it runs them
//! all (or those whose names contain an argument) on one queue of device
//! 0, and any failure fails the run.

use std::sync::Arc;

use ptxspec::runtime::{self, Queue};

/// A GPU test: it panics to fail.
pub type GpuTest = fn(&Arc<Queue>);

/// Runs `all` (those that need more GPUs than the machine has are reported
/// ignored) and exits with 101 where one failed.
pub fn run(all: &[(&str, GpuTest)], gpus_needed: fn(&str) -> usize) {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let tests: Vec<&(&str, GpuTest)> = all
        .iter()
        .filter(|(n, _)| filter.is_empty() || filter.iter().any(|f| n.contains(f.as_str())))
        .collect();
    if !runtime::driver_available() {
        if std::env::var_os("PTXSPEC_REQUIRE_GPU").is_some_and(|v| v == "1") {
            eprintln!(
                "FAILED: PTXSPEC_REQUIRE_GPU=1 but no CUDA driver was found: {} GPU tests could not run",
                tests.len()
            );
            std::process::exit(1);
        }
        assert!(matches!(
            runtime::devices(),
            Err(ptxspec::Error::NoDriver(_))
        ));
        eprintln!(
            "SKIPPED: no CUDA driver found on this machine: {} GPU tests not run",
            tests.len()
        );
        for (name, _) in &tests {
            println!("test {name} ... ignored, no CUDA driver");
        }
        println!(
            "\ntest result: ok. 0 passed; 0 failed; {} ignored; 0 measured; 0 filtered out\n",
            tests.len()
        );
        return;
    }
    let q = Arc::new(
        Queue::new(0)
            .unwrap_or_else(|e| panic!("a CUDA driver is present but device 0 failed: {e}")),
    );
    eprintln!("GPU tests on {:?}", q.device().name);
    let gpus = runtime::devices().map_or(1, |d| d.len());
    let mut failed = Vec::new();
    let mut ignored = 0;
    for (name, test) in &tests {
        if gpus < gpus_needed(name) {
            eprintln!(
                "SKIPPED: {name} needs {} GPUs; this machine has {gpus}",
                gpus_needed(name)
            );
            println!("test {name} ... ignored, needs {} GPUs", gpus_needed(name));
            ignored += 1;
            continue;
        }
        let start = std::time::Instant::now();
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(&q))).is_ok();
        println!(
            "test {name} ... {} ({:.2} s)",
            if ok { "ok" } else { "FAILED" },
            start.elapsed().as_secs_f64()
        );
        if !ok {
            failed.push(*name);
        }
    }
    let status = if failed.is_empty() { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {status}. {} passed; {} failed; {ignored} ignored; 0 measured; 0 filtered out\n",
        tests.len() - failed.len() - ignored,
        failed.len()
    );
    if !failed.is_empty() {
        eprintln!("failed: {failed:?}");
        std::process::exit(101);
    }
}
