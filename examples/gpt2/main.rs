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
//!   in the emulated, native and LTO modes, then timed on GPT-2 small's shape.
//!
//! Not yet: the backward pass and the update on the GPU, the modes tiered and
//! adaptive, graphs, the serving mode, the literal build (issue 63). Without
//! a GPU the kernels are compiled and built (NVRTC needs none) and the
//! program says what it did not run.
//!
//! `cargo run --release --example gpt2 -- --help` says what it takes.

mod data;
mod gpu;
mod reference;

use std::process::ExitCode;
use std::time::Instant;

use data::TokenStream;
use ptxspec::SpecMode;
use reference::{AdamState, AdamW, Config, Params, adamw_update, backward, forward};

const HELP: &str = "\
gpt2: a GPT-2-shaped model, trained on a synthetic token stream

USAGE:
    cargo run --release --example gpt2 -- [OPTIONS]

Trains the tiny configuration (2 layers, 4 heads, C 64, vocabulary 97, T up to
16) on the CPU reference (every value an f64) and prints the loss of each step.
With a GPU, runs the forward pass there through ptxspec bundles (emulated,
native and LTO) and cuBLAS: first the tiny configuration, checked against the
reference's first loss, then GPT-2 small's shape (12 layers, 12 heads, C 768,
vocabulary 50257, T 1024), timed. Without one, it compiles and builds the
kernels and says what it did not run (exit 0). Not written yet: the GPU's
backward pass and update, the tiered and adaptive modes, graphs, serving.

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
    /// Mode, GPU loss, CPU loss on the tiny configuration.
    tiny: Vec<(String, f64, f64)>,
    /// Mode, build seconds, milliseconds per forward, loss: GPT-2 small.
    small: Vec<(String, f64, f64, f64)>,
}

impl GpuReport {
    fn json(&self) -> String {
        let Some(device) = &self.device else {
            return "null".into();
        };
        let tiny: Vec<String> = self
            .tiny
            .iter()
            .map(|(m, g, c)| {
                format!("{{\"mode\":\"{m}\",\"gpu_loss\":{g:.9},\"cpu_loss\":{c:.9}}}")
            })
            .collect();
        let small: Vec<String> = self
            .small
            .iter()
            .map(|(m, b, ms, l)| {
                format!(
                    "{{\"mode\":\"{m}\",\"build_s\":{b:.3},\"forward_ms\":{ms:.4},\"loss\":{l:.6}}}"
                )
            })
            .collect();
        format!(
            "{{\"device\":{device:?},\"tiny\":[{}],\"gpt2_small\":[{}]}}",
            tiny.join(","),
            small.join(",")
        )
    }
}

/// The modes whose forward passes are compared.
const MODES: [SpecMode; 3] = [SpecMode::Emulated, SpecMode::Native, SpecMode::Lto];

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
    let mut report = GpuReport {
        device: None,
        tiny: Vec::new(),
        small: Vec::new(),
    };
    if !ptxspec::runtime::driver_available() {
        for mode in MODES {
            gpu::kernels(&tiny, mode)?;
        }
        say(format!(
            "No CUDA driver: compiled the kernels (NVRTC) and built them in {MODES:?}; \
             the GPU's forward passes need a GPU"
        ));
        return Ok(report);
    }
    let mut model = gpu::Gpu::new(tiny, initial, gpu::kernels(&tiny, MODES[0])?)?;
    report.device = Some(model.device_name());
    // f32 on the GPU against f64 on the CPU, over a few hundred sums of
    // products: agreement to 1e-4 of the loss is what f32 allows.
    for mode in MODES {
        model.set_kernels(gpu::kernels(&tiny, mode)?);
        let loss = model.forward(&first.inputs, &first.targets, options.batch)?;
        say(format!(
            "{} tiny, {mode:?}: loss {loss:.6} (CPU reference {cpu_loss:.6}, |difference| {:.1e})",
            report.device.as_deref().unwrap_or_default(),
            (loss - cpu_loss).abs()
        ));
        if (loss - cpu_loss).abs() > 1e-4 * cpu_loss.abs() || !loss.is_finite() {
            return Err(format!(
                "the GPU's loss ({mode:?}) {loss} differs from the CPU reference's {cpu_loss}"
            )
            .into());
        }
        report.tiny.push((format!("{mode:?}"), loss, cpu_loss));
    }
    if options.small_batch == 0 {
        return Ok(report);
    }
    let small = Config::GPT2_SMALL;
    let seq = small.max_seq;
    say(format!(
        "GPT-2 small: 12 layers, C 768, B {} x T {seq}; weights drawn ...",
        options.small_batch
    ));
    let weights = Params::init(&small, options.seed, false);
    let batch = TokenStream::new(options.seed, small.vocab).batch(options.small_batch, seq);
    let mut model = gpu::Gpu::new(small, &weights, gpu::kernels(&small, MODES[0])?)?;
    drop(weights);
    let mut generic_ms = None;
    for mode in MODES {
        let built = Instant::now();
        model.set_kernels(gpu::kernels(&small, mode)?);
        let build_s = built.elapsed().as_secs_f64();
        // Two untimed: the first launch of each kernel loads (and may link).
        for _ in 0..2 {
            model.forward(&batch.inputs, &batch.targets, options.small_batch)?;
        }
        model.synchronize()?;
        let timed = Instant::now();
        let mut loss = 0.0;
        for _ in 0..options.small_forwards {
            loss = model.forward(&batch.inputs, &batch.targets, options.small_batch)?;
        }
        let ms = timed.elapsed().as_secs_f64() * 1e3 / options.small_forwards as f64;
        let generic = *generic_ms.get_or_insert(ms);
        say(format!(
            "GPT-2 small, {mode:?}: {ms:.3} ms a forward (x{:.3} of emulated), loss {loss:.6}, built in {build_s:.2} s",
            ms / generic
        ));
        report.small.push((format!("{mode:?}"), build_s, ms, loss));
    }
    Ok(report)
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
