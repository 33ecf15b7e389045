//! A GPT-2–shaped model trained and served through ptxspec: the
//! application that tests the crate the way programs use it (issue 63).
//!
//! - `reference.rs`: the CPU reference — a tiny configuration's forward
//!   pass, backward pass and AdamW update in `f64` — on a synthetic token
//!   stream (`data.rs`);
//! - `gpu/`: the same model on the GPU, every operation that is not a matmul
//!   a kernel of `kernels.cu` through a ptxspec bundle compiled at run time
//!   (the fixed dimensions its specialization constants, batch and length
//!   ordinary arguments), the matmuls through cuBLAS;
//! - `train.rs`: the reference's training, each GPU build checked against
//!   it, then GPT-2 small trained and timed in each build;
//! - `serve.rs`: requests of drawn lengths, each one forward pass, timed;
//! - `measure.rs`: what the timings are judged by;
//! - `report.py`: BENCHMARKS.md's section and plots from runs' `--json`
//!   (kept in `benches/results/gpt2/`); `fleet_first_step.sh`: a fleet's
//!   writer and fresh readers on one machine; `fleet_choices.sh`: eight
//!   ranks adapting against one store (one verdict per fleet), and pinned
//!   runs.
//!
//! The builds compared: generic (what a plain CUDA program runs: the sizes
//! passed by value), emulated, native, LTO, tiered, adaptive arguments, and
//! literal (every size a literal of the source). Without a GPU the kernels
//! are compiled and built (NVRTC needs none) and the program says what it
//! did not run.
//!
//! `cargo run --release --example gpt2 -- --help` says what it takes.

mod data;
mod gpu;
mod measure;
mod reference;
mod serve;
mod train;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use gpu::Build;
use reference::{AdamW, Config};

type Error = Box<dyn std::error::Error>;

const HELP: &str = "\
gpt2: a GPT-2-shaped model trained and served through ptxspec

USAGE:
    cargo run --release --example gpt2 -- [train] [OPTIONS]
    cargo run --release --example gpt2 -- serve [OPTIONS]

train (the default): trains the tiny configuration (2 layers, 4 heads, C 64,
vocabulary 97, T up to 16) on the CPU reference (every value an f64) and
prints the loss of each step. With a GPU, each build then trains the same
model from the same weights: its first step's gradients must be within 1e-3
of the reference's (relative L2, each tensor) and every step's loss within
1e-3 of the reference's. Then GPT-2 small's shape (12 layers, 12 heads, C 768,
vocabulary 50257 padded to 50304) trains in each build from the same weights:
untimed steps until the build settles (tiered and adaptive: until their
counters stay still for a second), then timed steps, then one profiled with
each kernel's share.

serve: GPT-2 small answers requests of one row each, its length drawn from
128 (40 %), 256 (30 %), 512 (20 %) and 1024 (10 %) tokens, each a forward pass;
the latency of each, p50 and p99, per build. Without a GPU, the tiny
configuration's requests run on the CPU reference.

The builds: generic (what a plain CUDA program runs: the sizes passed by
value), emulated, native, lto, tiered, adaptive (adaptive arguments on the
LTO build: batch and length fixed where timed faster), literal (every size a
literal of the source, one build per shape). Without a GPU the kernels are
compiled and built, and the program says what needs the GPU (exit 0).

OPTIONS:
    --mode LIST      the builds to run, comma-separated, or all (default all)
    --steps N        the tiny configuration's steps (default 20; at most 10000)
    --batch B        its rows per step (default 4; at most 64)
    --seq T          its tokens per row (default 16; 1 to 16)
    --lr X           AdamW's learning rate (default 0.01; finite, above 0)
    --seed S         the seed of the weights and the token stream (default 1)
    --small-batch B  GPT-2 small's rows per step (default 4; 0 skips it; at
                     most 16)
    --small-seq T    GPT-2 small's tokens per row (default 1024; 1 to 1024)
    --small-steps N  GPT-2 small's timed steps per build (default 20; 1 to
                     1000)
    --small-lr X     GPT-2 small's learning rate (default 0.0003; finite,
                     above 0)
    --warmup-limit N the most untimed steps or requests of a build that has
                     not settled (default 3000; 2 to 100000)
    --requests N     serve: timed requests per build (default 200; 1 to 100000)
    --graphs         run each training step (serve: each request's forward
                     pass) as one CUDA graph, captured once per shape and
                     replayed; the untimed steps and the check against the
                     reference run as graphs too
    --fleet URL      the signed remote cache (redis:// or rediss://): sets
                     PTXSPEC_REMOTE_CACHE; its keys come from
                     PTXSPEC_CACHE_TRUSTED_KEYS and PTXSPEC_CACHE_SIGNING_KEY
    --toolkit-worker PTXSPEC
                     run the builds' links (adaptive variants' too) in worker
                     processes of this ptxspec binary, one a link, side by
                     side (in this process they take turns at nvJitLink)
    --choices FILE   write the choices adaptive arguments made (a table that
                     `ptxspec verify-choices` compares, `ptxspec sign-choices`
                     signs) to FILE at the end; their digest is said too
    --pin FILE       pin adaptive arguments to the table of FILE, signed by a
                     key of PTXSPEC_CACHE_TRUSTED_KEYS: nothing is timed, each
                     variant runs the table's choice (the generic code where
                     it holds none)
    --json           one JSON object at the end instead of lines a person reads
    -h, --help       this text
";

/// What a run is asked to do.
pub struct Options {
    serve: bool,
    builds: Vec<Build>,
    steps: usize,
    batch: usize,
    seq: usize,
    learning_rate: f64,
    seed: u64,
    small_batch: usize,
    small_seq: usize,
    small_steps: usize,
    small_learning_rate: f64,
    warmup_limit: usize,
    requests: usize,
    fleet: Option<String>,
    toolkit_worker: Option<std::path::PathBuf>,
    choices: Option<std::path::PathBuf>,
    pin: Option<std::path::PathBuf>,
    graphs: bool,
    json: bool,
}

impl Options {
    /// The tiny configuration's optimizer.
    fn adamw(&self) -> AdamW {
        AdamW {
            learning_rate: self.learning_rate,
            ..AdamW::default()
        }
    }

    /// GPT-2 small's.
    fn small_adamw(&self) -> AdamW {
        AdamW {
            learning_rate: self.small_learning_rate,
            ..AdamW::default()
        }
    }
}

/// Where the lines a person reads go: stdout, unless `--json` asked for
/// one object there; progress to a terminal's stderr only.
pub struct Say {
    quiet: bool,
    progress: bool,
}

impl Say {
    fn line(&self, text: String) {
        if self.progress {
            eprint!("\r\x1b[K");
        }
        if !self.quiet {
            println!("{text}");
        }
    }

    fn progress(&self, text: String) {
        if self.progress {
            eprint!("\r\x1b[K{text}");
            let _ = std::io::stderr().flush();
        }
    }
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, String> {
    let mut o = Options {
        serve: false,
        builds: Build::all(0, 0).to_vec(),
        steps: 20,
        batch: 4,
        seq: 16,
        learning_rate: 0.01,
        seed: 1,
        small_batch: 4,
        small_seq: Config::GPT2_SMALL.max_seq,
        small_steps: 20,
        small_learning_rate: 3e-4,
        warmup_limit: 3000,
        requests: 200,
        fleet: None,
        toolkit_worker: None,
        choices: None,
        pin: None,
        graphs: false,
        json: false,
    };
    let mut args = args.into_iter().peekable();
    match args.peek().map(String::as_str) {
        Some("serve") => {
            o.serve = true;
            args.next();
        }
        Some("train") => {
            args.next();
        }
        _ => {}
    }
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--graphs" => o.graphs = true,
            "--mode" => o.builds = builds(&value("--mode")?)?,
            "--steps" => o.steps = number(&value("--steps")?, "--steps", 1, 10_000)?,
            "--batch" => o.batch = number(&value("--batch")?, "--batch", 1, 64)?,
            "--seq" => o.seq = number(&value("--seq")?, "--seq", 1, Config::TINY.max_seq)?,
            "--small-batch" => {
                o.small_batch = number(&value("--small-batch")?, "--small-batch", 0, 16)?
            }
            "--small-seq" => {
                o.small_seq = number(
                    &value("--small-seq")?,
                    "--small-seq",
                    1,
                    Config::GPT2_SMALL.max_seq,
                )?
            }
            "--small-steps" => {
                o.small_steps = number(&value("--small-steps")?, "--small-steps", 1, 1000)?
            }
            "--requests" => o.requests = number(&value("--requests")?, "--requests", 1, 100_000)?,
            "--seed" => {
                let v = value("--seed")?;
                o.seed = v
                    .parse()
                    .map_err(|_| format!("--seed: {v:?} is not a whole number"))?;
            }
            "--lr" => o.learning_rate = positive(&value("--lr")?, "--lr")?,
            "--small-lr" => o.small_learning_rate = positive(&value("--small-lr")?, "--small-lr")?,
            "--warmup-limit" => {
                o.warmup_limit = number(&value("--warmup-limit")?, "--warmup-limit", 2, 100_000)?
            }
            "--toolkit-worker" => {
                let v = std::path::PathBuf::from(value("--toolkit-worker")?);
                if !v.is_file() {
                    return Err(format!(
                        "--toolkit-worker: {} is not a file (the ptxspec binary)",
                        v.display()
                    ));
                }
                o.toolkit_worker = Some(v);
            }
            "--choices" => o.choices = Some(value("--choices")?.into()),
            "--pin" => o.pin = Some(value("--pin")?.into()),
            "--fleet" => {
                let v = value("--fleet")?;
                if !(v.starts_with("redis://") || v.starts_with("rediss://")) {
                    return Err(format!("--fleet: {v:?} is not a redis:// or rediss:// URL"));
                }
                o.fleet = Some(v);
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (--help says what it takes)"
                ));
            }
        }
    }
    Ok(Some(o))
}

/// Pins adaptive arguments to the signed table of `file`: how many
/// choices it holds.
fn pin(file: &std::path::Path) -> Result<usize, Error> {
    let keys = std::env::var_os("PTXSPEC_CACHE_TRUSTED_KEYS").ok_or(
        "PTXSPEC_CACHE_TRUSTED_KEYS is unset: it names the keys a pinned table is signed by",
    )?;
    let table = ptxspec::choices::read_signed(file, std::path::Path::new(&keys))?;
    let n = table.len();
    ptxspec::choices::pin(table);
    Ok(n)
}

/// `--mode`'s list: build names, comma-separated, or `all`.
fn builds(list: &str) -> Result<Vec<Build>, String> {
    if list == "all" {
        return Ok(Build::all(0, 0).to_vec());
    }
    let mut out: Vec<Build> = Vec::new();
    for name in list.split(',') {
        let build = Build::all(0, 0)
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| {
                format!("--mode: {name:?} is not a build (generic, emulated, native, lto, tiered, adaptive, literal or all)")
            })?;
        if !out.contains(&build) {
            out.push(build);
        }
    }
    Ok(out)
}

/// What compiling and linking the kernels needs and this machine lacks.
fn toolkit() -> Result<(), String> {
    use ptxspec_core::toolkit::{Lib, require};
    for lib in [Lib::Nvrtc, Lib::NvJitLink] {
        require(lib).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn positive(text: &str, name: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{name}: {text:?} is not a finite number above 0")),
    }
}

fn number(text: &str, name: &str, low: usize, high: usize) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (low..=high).contains(&n) => Ok(n),
        _ => Err(format!(
            "{name}: {text:?} is not a whole number from {low} to {high}"
        )),
    }
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(url) = &options.fleet {
        // SAFETY: nothing else runs yet: no thread of this program or of
        // ptxspec's reads the environment while it changes.
        unsafe { std::env::set_var("PTXSPEC_REMOTE_CACHE", url) };
    }
    let say = Say {
        quiet: options.json,
        progress: !options.json && std::io::stderr().is_terminal(),
    };
    if let Some(file) = &options.pin {
        match pin(file) {
            Ok(n) => say.line(format!("pinned to {n} choice(s) of {}", file.display())),
            Err(e) => {
                eprintln!("error: --pin: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let result = if options.serve {
        serve::run(&options, &say)
    } else {
        train::run(&options, &say)
    }
    .and_then(|json| {
        if let Some(file) = &options.choices {
            let made = ptxspec::choices::made();
            std::fs::write(file, made.to_text())
                .map_err(|e| format!("--choices: {}: {e}", file.display()))?;
            say.line(format!(
                "choices: {} made, digest {} (written to {})",
                made.len(),
                made.digest(),
                file.display()
            ));
        }
        Ok(json)
    });
    match result {
        Ok(json) => {
            if options.json {
                println!("{json}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            say.line(String::new());
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_are_read_and_bad_ones_named() {
        let o = parse(args(&[
            "--steps", "3", "--seq", "8", "--lr", "0.5", "--json",
        ]))
        .expect("valid")
        .expect("not help");
        assert_eq!((o.steps, o.seq, o.json, o.serve), (3, 8, true, false));
        assert_eq!(o.learning_rate, 0.5);
        assert_eq!(o.builds.len(), 7);
        let o = parse(args(&[
            "serve",
            "--mode",
            "literal,adaptive,LTO,adaptive",
            "--requests",
            "9",
        ]))
        .expect("valid")
        .expect("not help");
        assert!(o.serve);
        assert_eq!(o.requests, 9);
        let names: Vec<&str> = o.builds.iter().map(Build::name).collect();
        assert_eq!(names, ["literal", "adaptive", "LTO"]);
        assert!(parse(args(&["--help"])).expect("valid").is_none());
        let o = parse(args(&["--choices", "c.txt", "--pin", "p.txt"]))
            .expect("valid")
            .expect("not help");
        assert_eq!(
            (o.choices.as_deref(), o.pin.as_deref()),
            (
                Some(std::path::Path::new("c.txt")),
                Some(std::path::Path::new("p.txt"))
            )
        );
        for (bad, names) in [
            (&["--seq", "17"][..], "--seq"),
            (&["--steps", "0"], "--steps"),
            (&["--lr", "nan"], "--lr"),
            (&["--lr", "-1"], "--lr"),
            (&["--batch"], "--batch"),
            (&["--seed", "x"], "--seed"),
            (&["--mode", "fast"], "--mode"),
            (&["--mode", "lto,"], "--mode"),
            (&["--small-seq", "1025"], "--small-seq"),
            (&["--small-lr", "0"], "--small-lr"),
            (&["--warmup-limit", "1"], "--warmup-limit"),
            (&["--fleet", "http://x"], "--fleet"),
            (&["--choices"], "--choices"),
            (
                &["--toolkit-worker", "/nonexistent/ptxspec"],
                "--toolkit-worker",
            ),
            (&["--pin"], "--pin"),
            (&["--graphs", "x"], "\"x\""),
            (&["serve", "train"], "train"),
        ] {
            let e = parse(args(bad))
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(e.contains(names), "{bad:?}: {e}");
        }
    }
}
