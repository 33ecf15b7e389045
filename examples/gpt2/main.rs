//! A GPT-2–shaped model trained through ptxspec: the application that tests
//! the crate the way programs use it (issue 63).
//!
//! What runs today:
//! - the CPU reference (`reference.rs`): a tiny configuration's forward
//!   pass, backward pass and AdamW update in `f64`, on a synthetic token
//!   stream (`data.rs`), with the loss of each step;
//! - the forward pass on the GPU (`gpu.rs`): the model's kernels
//!   (`kernels.cu`) through a ptxspec bundle compiled at run time, its fixed
//!   dimensions the specialization constants, matmuls through cuBLAS —
//!   checked against the reference's first loss on the tiny configuration
//!   in every build (emulated, native, LTO, tiered, adaptive, and the
//!   literal build: every size a literal of the source), then timed on GPT-2
//!   small's shape, each kernel's share from one profiled forward and every
//!   forward's time.
//!
//! Not yet: the backward pass and the update on the GPU, graphs, the
//! serving mode (issue 63). Without a GPU the kernels are compiled and built
//! (NVRTC needs none) and the program says what it did not run.
//!
//! `cargo run --release --example gpt2 -- --help` says what it takes.

mod data;
mod gpu;
mod reference;

use std::process::ExitCode;
use std::time::Instant;

use data::TokenStream;
use gpu::Build;
use reference::{AdamState, AdamW, Config, Params, adamw_update, backward, forward};

const HELP: &str = "\
gpt2: a GPT-2-shaped model, trained on a synthetic token stream

USAGE:
    cargo run --release --example gpt2 -- [OPTIONS]

Trains the tiny configuration (2 layers, 4 heads, C 64, vocabulary 97, T up to
16) on the CPU reference (every value an f64) and prints the loss of each step.
With a GPU, runs the forward pass there through ptxspec bundles and cuBLAS in
every build (emulated, native, LTO, tiered, adaptive arguments, and the
literal build: every size a literal of the source): first the tiny
configuration, checked against the reference's first loss, then GPT-2 small's
shape (12 layers, 12 heads, C 768, vocabulary 50257, T 1024), timed, with each
kernel's share and every forward's time. Without one, it compiles and builds
the kernels and says what it did not run (exit 0). Not written yet: the GPU's
backward pass and update, graphs, serving.

OPTIONS:
    --steps N        training steps (default 20; at most 10000)
    --batch B        rows per step (default 4; at most 64)
    --seq T          tokens per row (default 16; 1 to 16)
    --lr X           AdamW's learning rate (default 0.01; finite, above 0)
    --seed S         the seed of the weights and the token stream (default 1)
    --small-batch B  GPT-2 small's rows per forward on the GPU (default 4; 0
                     skips it; at most 16)
    --small-forwards N  timed forwards of GPT-2 small per mode (default 10; 1
                     to 1000)
    --json           one JSON object at the end instead of lines a person reads
    -h, --help       this text
";

/// What a run is asked to do.
struct Options {
    steps: usize,
    batch: usize,
    seq: usize,
    learning_rate: f64,
    seed: u64,
    json: bool,
    small_batch: usize,
    small_forwards: usize,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, String> {
    let mut o = Options {
        steps: 20,
        batch: 4,
        seq: 16,
        learning_rate: 0.01,
        seed: 1,
        json: false,
        small_batch: 4,
        small_forwards: 10,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--steps" => o.steps = number(&value("--steps")?, "--steps", 1, 10_000)?,
            "--batch" => o.batch = number(&value("--batch")?, "--batch", 1, 64)?,
            "--seq" => o.seq = number(&value("--seq")?, "--seq", 1, Config::TINY.max_seq)?,
            "--small-batch" => {
                o.small_batch = number(&value("--small-batch")?, "--small-batch", 0, 16)?
            }
            "--small-forwards" => {
                o.small_forwards = number(&value("--small-forwards")?, "--small-forwards", 1, 1000)?
            }
            "--seed" => {
                let v = value("--seed")?;
                o.seed = v
                    .parse()
                    .map_err(|_| format!("--seed: {v:?} is not a whole number"))?;
            }
            "--lr" => {
                let v = value("--lr")?;
                o.learning_rate = match v.parse::<f64>() {
                    Ok(x) if x.is_finite() && x > 0.0 => x,
                    _ => return Err(format!("--lr: {v:?} is not a finite number above 0")),
                };
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
    let config = Config::TINY;
    let mut stream = TokenStream::new(options.seed, config.vocab);
    let mut params = Params::init(&config, options.seed, false);
    let mut state = AdamState::new(&config);
    let hyper = AdamW {
        learning_rate: options.learning_rate,
        ..AdamW::default()
    };
    if !options.json {
        println!(
            "CPU reference: {} layers, {} heads, C {}, vocabulary {} (padded {}), B {}, T {}; {} parameters",
            config.layers,
            config.heads,
            config.channels,
            config.vocab,
            config.padded_vocab(),
            options.batch,
            options.seq,
            params.count()
        );
    }
    let started = Instant::now();
    let mut losses = Vec::with_capacity(options.steps);
    for step in 1..=options.steps {
        let batch = stream.batch(options.batch, options.seq);
        let f = forward(
            &config,
            &params,
            &batch.inputs,
            &batch.targets,
            options.batch,
        );
        let mut grads = backward(&config, &params, &f, &batch.inputs, &batch.targets);
        adamw_update(&hyper, &mut state, &mut params, &mut grads);
        losses.push(f.loss);
        if !options.json {
            println!("step {step:>5}: loss {:.6}", f.loss);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if !options.json {
        let (first, last) = (losses[0], losses[losses.len() - 1]);
        println!(
            "{} steps in {seconds:.2} s on the CPU: loss {first:.4} -> {last:.4} (ln V = {:.4})",
            options.steps,
            (config.vocab as f64).ln()
        );
    }
    // The GPU is checked against the reference's first step: the same
    // weights and the same batch.
    let first_batch =
        TokenStream::new(options.seed, config.vocab).batch(options.batch, options.seq);
    let initial = Params::init(&config, options.seed, false);
    let gpu = match on_the_gpu(&options, &initial, &first_batch, losses[0]) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if options.json {
        let losses: Vec<String> = losses.iter().map(|l| format!("{l:.9}")).collect();
        println!(
            "{{\"config\":{{\"layers\":{},\"heads\":{},\"channels\":{},\"vocab\":{},\"batch\":{},\"seq\":{}}},\
             \"cpu_reference\":{{\"losses\":[{}],\"seconds\":{seconds:.3}}},\"gpu\":{}}}",
            config.layers,
            config.heads,
            config.channels,
            config.vocab,
            options.batch,
            options.seq,
            losses.join(","),
            gpu.json()
        );
    }
    ExitCode::SUCCESS
}

/// What the GPU did, for `--json`.
struct GpuReport {
    device: Option<String>,
    cpu_loss: f64,
    /// Each build's loss on the tiny configuration.
    tiny: Vec<(&'static str, f64)>,
    small: Vec<SmallRun>,
}

/// One build's forward passes of GPT-2 small.
struct SmallRun {
    build: &'static str,
    /// Untimed forwards before the timed ones (the adaptive build's run
    /// until its verdicts stop changing).
    warmup: usize,
    /// Every forward's wall time in milliseconds, untimed and timed, from
    /// the build's first.
    each_ms: Vec<f64>,
    forward_ms: f64,
    loss: f64,
    /// Each kernel's (and the matmuls') milliseconds and launches in one
    /// profiled forward.
    kernels: Vec<(&'static str, f64, usize)>,
}

impl GpuReport {
    fn json(&self) -> String {
        let Some(device) = &self.device else {
            return "null".into();
        };
        let tiny: Vec<String> = self
            .tiny
            .iter()
            .map(|(b, loss)| format!("{{\"build\":\"{b}\",\"loss\":{loss:.9}}}"))
            .collect();
        let small: Vec<String> = self
            .small
            .iter()
            .map(|r| {
                let kernels: Vec<String> = r
                    .kernels
                    .iter()
                    .map(|(k, ms, n)| format!("{{\"name\":\"{k}\",\"ms\":{ms:.5},\"launches\":{n}}}"))
                    .collect();
                let each: Vec<String> = r.each_ms.iter().map(|ms| format!("{ms:.4}")).collect();
                format!(
                    "{{\"build\":\"{}\",\"warmup_forwards\":{},\"forward_ms\":{:.5},\"loss\":{:.6},\"kernels\":[{}],\"each_forward_ms\":[{}]}}",
                    r.build,
                    r.warmup,
                    r.forward_ms,
                    r.loss,
                    kernels.join(","),
                    each.join(",")
                )
            })
            .collect();
        format!(
            "{{\"device\":{device:?},\"tiny_cpu_loss\":{:.9},\"tiny\":[{}],\"gpt2_small\":[{}]}}",
            self.cpu_loss,
            tiny.join(","),
            small.join(",")
        )
    }
}

/// The median and the largest of the forwards after the fifth (all of
/// them where there are fewer).
fn after_the_fifth(each_ms: &[f64]) -> (f64, f64) {
    let mut later: Vec<f64> = each_ms.iter().skip(5).copied().collect();
    if later.is_empty() {
        later = each_ms.to_vec();
    }
    later.sort_by(f64::total_cmp);
    let median = later.get(later.len() / 2).copied().unwrap_or(f64::NAN);
    (median, later.last().copied().unwrap_or(f64::NAN))
}

/// The counters that move while adaptive arguments decide and tiers swap.
fn adapting() -> (u64, u64, u64, u64) {
    let s = ptxspec::stats();
    (
        s.adapted_variants,
        s.variants_not_faster,
        s.timed_launches,
        s.tier_ups,
    )
}

/// The GPU's part: with no GPU, the kernels compiled and built only.
fn on_the_gpu(
    options: &Options,
    initial: &Params,
    first: &data::Batch,
    cpu_loss: f64,
) -> Result<GpuReport, Box<dyn std::error::Error>> {
    let say = |line: String| {
        if !options.json {
            println!("{line}");
        }
    };
    let tiny = Config::TINY;
    let tiny_builds = [
        Build::Emulated,
        Build::Native,
        Build::Lto,
        Build::Tiered,
        Build::Adaptive,
        Build::Literal {
            batch: options.batch,
            seq: options.seq,
        },
    ];
    let mut report = GpuReport {
        device: None,
        cpu_loss,
        tiny: Vec::new(),
        small: Vec::new(),
    };
    if !ptxspec::runtime::driver_available() {
        for how in tiny_builds {
            gpu::kernels(&tiny, how)?;
        }
        let names: Vec<&str> = tiny_builds.iter().map(Build::name).collect();
        say(format!(
            "No CUDA driver: compiled the kernels (NVRTC) and built them {}; the GPU's forward passes need a GPU",
            names.join(", ")
        ));
        return Ok(report);
    }
    let mut model = gpu::Gpu::new(tiny, initial, gpu::kernels(&tiny, Build::Emulated)?)?;
    let device = model.device_name();
    // f32 on the GPU against f64 on the CPU, over a few hundred sums of
    // products: agreement to 1e-4 of the loss is what f32 allows.
    for how in tiny_builds {
        model.set_kernels(gpu::kernels(&tiny, how)?);
        let loss = model.forward(&first.inputs, &first.targets, options.batch)?;
        say(format!(
            "{device} tiny, {}: loss {loss:.6} (CPU reference {cpu_loss:.6}, |difference| {:.1e})",
            how.name(),
            (loss - cpu_loss).abs()
        ));
        if (loss - cpu_loss).abs() > 1e-4 * cpu_loss.abs() || !loss.is_finite() {
            return Err(format!(
                "the GPU's loss ({}) {loss} differs from the CPU reference's {cpu_loss}",
                how.name()
            )
            .into());
        }
        report.tiny.push((how.name(), loss));
    }
    report.device = Some(device);
    if options.small_batch == 0 {
        return Ok(report);
    }
    let small = Config::GPT2_SMALL;
    let (batch, seq) = (options.small_batch, small.max_seq);
    say(format!(
        "GPT-2 small: 12 layers, C 768, B {batch} x T {seq}; drawing its weights ..."
    ));
    let weights = Params::init(&small, options.seed, false);
    let tokens = TokenStream::new(options.seed, small.vocab).batch(batch, seq);
    let literal = Build::Literal { batch, seq };
    let mut model = gpu::Gpu::new(small, &weights, gpu::kernels(&small, literal)?)?;
    drop(weights);
    let forward = |model: &mut gpu::Gpu| model.forward(&tokens.inputs, &tokens.targets, batch);
    let mut literal_ms = None;
    for how in [
        literal,
        Build::Emulated,
        Build::Native,
        Build::Lto,
        Build::Tiered,
        Build::Adaptive,
    ] {
        model.set_kernels(gpu::kernels(&small, how)?);
        // Untimed: each kernel's first launch loads (and may link); the
        // tiered and adaptive builds run until their counters stay still
        // for a second.
        let mut warmup = 0;
        let mut still_since = Instant::now();
        let mut last = adapting();
        // Every forward's wall time from the bundle's first (each reads
        // its losses back, so it has ended): where links and trials land,
        // and whether a forward stalls on one.
        let mut each_ms = Vec::new();
        loop {
            let started = Instant::now();
            forward(&mut model)?;
            each_ms.push(started.elapsed().as_secs_f64() * 1e3);
            warmup += 1;
            let now = adapting();
            if now != last {
                last = now;
                still_since = Instant::now();
            }
            let moves = matches!(how, Build::Tiered | Build::Adaptive);
            let settled = !moves || still_since.elapsed().as_secs_f64() > 1.0;
            if (warmup >= 2 && settled) || warmup >= 2000 {
                break;
            }
        }
        model.synchronize()?;
        let timed = Instant::now();
        let mut loss = 0.0;
        for _ in 0..options.small_forwards {
            let started = Instant::now();
            loss = forward(&mut model)?;
            each_ms.push(started.elapsed().as_secs_f64() * 1e3);
        }
        let ms = timed.elapsed().as_secs_f64() * 1e3 / options.small_forwards as f64;
        let (median, worst) = after_the_fifth(&each_ms);
        let kernels = model.profile_forward(&tokens.inputs, &tokens.targets, batch)?;
        let baseline = *literal_ms.get_or_insert(ms);
        let ours: f64 = kernels
            .iter()
            .filter(|k| !k.0.starts_with("matmul"))
            .map(|k| k.1)
            .sum();
        say(format!(
            "GPT-2 small, {:>8}: {ms:8.3} ms a forward (x{:.4} of literal), our kernels {ours:.3} ms of it, \
             loss {loss:.6}; {warmup} untimed forwards; the first {:.1} ms, after the fifth the slowest \
             x{:.3} of their median",
            how.name(),
            ms / baseline,
            each_ms[0],
            worst / median
        ));
        report.small.push(SmallRun {
            build: how.name(),
            each_ms,
            warmup,
            forward_ms: ms,
            loss,
            kernels,
        });
    }
    let s = ptxspec::stats();
    let not_adapted: Vec<String> = s
        .not_adapted
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(why, n)| format!("{why:?} {n}"))
        .collect();
    say(format!(
        "adaptive arguments: {} variant(s) kept, {} not faster, {} timed launches; not adapted: {}",
        s.adapted_variants,
        s.variants_not_faster,
        s.timed_launches,
        if not_adapted.is_empty() {
            "none".to_string()
        } else {
            not_adapted.join(", ")
        }
    ));
    if !options.json {
        println!("each kernel in one profiled forward (ms, launches):");
        let names: Vec<&str> = report.small.iter().map(|r| r.build).collect();
        println!(
            "  {:<28} {}",
            "",
            names.iter().map(|n| format!("{n:>12}")).collect::<String>()
        );
        for (name, _, launches) in &report.small[0].kernels {
            let cells: String = report
                .small
                .iter()
                .map(|r| {
                    let ms = r
                        .kernels
                        .iter()
                        .find(|k| k.0 == *name)
                        .map_or(f64::NAN, |k| k.1);
                    format!("{ms:>12.4}")
                })
                .collect();
            println!("  {:<28} {cells}  ({launches})", name);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// The first five forwards (loads, links) are not the steady state's:
    /// a stall after them is what the slowest-over-median ratio shows.
    #[test]
    fn the_steady_state_starts_after_the_fifth_forward() {
        let each = [90.0, 40.0, 31.0, 31.0, 31.0, 30.0, 31.0, 62.0, 30.5];
        assert_eq!(after_the_fifth(&each), (31.0, 62.0));
        assert_eq!(after_the_fifth(&[5.0, 3.0]), (5.0, 5.0));
        assert!(after_the_fifth(&[]).0.is_nan());
    }

    #[test]
    fn options_are_read_and_bad_ones_named() {
        let o = parse(args(&[
            "--steps", "3", "--seq", "8", "--lr", "0.5", "--json",
        ]))
        .expect("valid")
        .expect("not help");
        assert_eq!((o.steps, o.seq, o.json), (3, 8, true));
        assert_eq!(o.learning_rate, 0.5);
        assert!(parse(args(&["--help"])).expect("valid").is_none());
        for (bad, names) in [
            (&["--seq", "17"][..], "--seq"),
            (&["--steps", "0"], "--steps"),
            (&["--lr", "nan"], "--lr"),
            (&["--lr", "-1"], "--lr"),
            (&["--batch"], "--batch"),
            (&["--seed", "x"], "--seed"),
            (&["--mode", "lto"], "--mode"),
        ] {
            let e = parse(args(bad))
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(e.contains(names), "{bad:?}: {e}");
        }
    }
}
