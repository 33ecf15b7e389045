//! `gpt2 train`: the CPU reference's training of the tiny configuration;
//! on a GPU, every build's gradients and losses checked against it, then
//! GPT-2 small trained in every build and timed step by step.

use std::time::Instant;

use crate::data::TokenStream;
use crate::gpu::{self, Build, Gpu};
use crate::measure::{
    Settling, TimedPhase, after_the_fifth, json_kernels, json_number, json_numbers, json_string,
};
use crate::reference::{AdamState, Config, Params, adamw_update, backward, forward};
use crate::{Error, Options, Say};

/// The largest relative difference (L2 norm of the difference over the
/// reference's) allowed between a gradient tensor from the GPU (f32) and
/// the reference's (f64).
pub const GRADIENT_TOLERANCE: f64 = 1e-3;
/// The largest relative difference allowed between a step's loss on the
/// GPU and the reference's, over the tiny configuration's steps.
pub const LOSS_TOLERANCE: f64 = 1e-3;

/// The CPU reference's run.
struct CpuRun {
    losses: Vec<f64>,
    /// The gradients of the first step.
    first_gradients: Params,
    seconds: f64,
}

fn cpu_reference(o: &Options, say: &Say) -> CpuRun {
    let config = Config::TINY;
    let mut stream = TokenStream::new(o.seed, config.vocab);
    let mut params = Params::init(&config, o.seed, false);
    let mut state = AdamState::new(&config);
    let hyper = o.adamw();
    say.line(format!(
        "CPU reference: {} layers, {} heads, C {}, vocabulary {} (padded {}), B {}, T {}; {} parameters",
        config.layers,
        config.heads,
        config.channels,
        config.vocab,
        config.padded_vocab(),
        o.batch,
        o.seq,
        params.count()
    ));
    let started = Instant::now();
    let mut losses = Vec::with_capacity(o.steps);
    let mut first_gradients = None;
    for step in 1..=o.steps {
        let batch = stream.batch(o.batch, o.seq);
        let f = forward(&config, &params, &batch.inputs, &batch.targets, o.batch);
        let mut grads = backward(&config, &params, &f, &batch.inputs, &batch.targets);
        if first_gradients.is_none() {
            first_gradients = Some(grads.clone());
        }
        adamw_update(&hyper, &mut state, &mut params, &mut grads);
        losses.push(f.loss);
        say.line(format!("step {step:>5}: loss {:.6}", f.loss));
    }
    let seconds = started.elapsed().as_secs_f64();
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    say.line(format!(
        "{} steps in {seconds:.2} s on the CPU: loss {first:.4} -> {last:.4} (ln V = {:.4})",
        o.steps,
        (config.vocab as f64).ln()
    ));
    CpuRun {
        losses,
        first_gradients: first_gradients.unwrap_or_else(|| Params::zeros(&config)),
        seconds,
    }
}

/// One build's run of the tiny configuration against the reference.
struct TinyRun {
    build: &'static str,
    losses: Vec<f64>,
    /// The largest relative difference of a gradient tensor, and its name.
    worst_gradient: (f64, String),
}

/// One build's training of GPT-2 small.
struct SmallRun {
    build: &'static str,
    /// What the guard did during the timed steps (JSON).
    timed_phase: String,
    /// Untimed steps before the timed ones (the tiered and adaptive builds'
    /// run until their counters stay still).
    warmup: usize,
    /// Every step's wall time in milliseconds, untimed and timed.
    each_ms: Vec<f64>,
    losses: Vec<f64>,
    step_ms: f64,
    kernels: Vec<(&'static str, f64, usize)>,
}

/// Runs `gpt2 train`; returns its JSON.
pub fn run(o: &Options, say: &Say) -> Result<String, Error> {
    let cpu = cpu_reference(o, say);
    let tiny = Config::TINY;
    let builds: Vec<Build> = o
        .builds
        .iter()
        .map(|b| b.for_shape(o.batch, o.seq))
        .collect();
    let gpu_json = if !ptxspec::runtime::driver_available() {
        if let Err(missing) = crate::toolkit() {
            say.line(format!(
                "No CUDA driver, and {missing}: the kernels were not compiled; the GPU's training steps need a GPU \
                 (and NVIDIA's toolkit libraries: `source ci/install-nvidia-tools.sh` installs them)"
            ));
            return Ok(json_without_gpu(o, &cpu));
        }
        for how in &builds {
            gpu::kernels(&tiny, *how, o.toolkit_worker.as_deref())?;
        }
        let names: Vec<&str> = builds.iter().map(Build::name).collect();
        say.line(format!(
            "No CUDA driver: compiled the kernels (NVRTC) and built them {}; the GPU's training steps \
             (the check against the reference, GPT-2 small's timing) need a GPU",
            names.join(", ")
        ));
        "null".to_string()
    } else {
        let (device, tiny_runs) = check_tiny(o, &builds, &cpu, say)?;
        let small = if o.small_batch > 0 {
            train_small(o, say)?
        } else {
            Vec::new()
        };
        let tiny_json: Vec<String> = tiny_runs
            .iter()
            .map(|r| {
                format!(
                    "{{\"build\":{},\"losses\":{},\"worst_gradient_error\":{},\"worst_gradient\":{}}}",
                    json_string(r.build),
                    json_numbers(&r.losses),
                    json_number(r.worst_gradient.0),
                    json_string(&r.worst_gradient.1)
                )
            })
            .collect();
        let small_json: Vec<String> = small
            .iter()
            .map(|r| {
                format!(
                    "{{\"build\":{},\"timed_phase\":{},\"warmup_steps\":{},\"step_ms\":{},\"kernels\":{},\"each_step_ms\":{},\"losses\":{}}}",
                    json_string(r.build),
                    r.timed_phase,
                    r.warmup,
                    json_number(r.step_ms),
                    json_kernels(&r.kernels),
                    json_numbers(&r.each_ms),
                    json_numbers(&r.losses)
                )
            })
            .collect();
        format!(
            "{{\"device\":{},\"graphs\":{},\"tiny\":[{}],\"gpt2_small\":{{\"batch\":{},\"seq\":{},\"builds\":[{}]}}}}",
            json_string(&device),
            o.graphs,
            tiny_json.join(","),
            o.small_batch,
            o.small_seq,
            small_json.join(",")
        )
    };
    Ok(json_of(o, &cpu, &gpu_json))
}

fn json_without_gpu(o: &Options, cpu: &CpuRun) -> String {
    json_of(o, cpu, "null")
}

fn json_of(o: &Options, cpu: &CpuRun, gpu_json: &str) -> String {
    let tiny = Config::TINY;
    format!(
        "{{\"command\":\"train\",\"config\":{{\"layers\":{},\"heads\":{},\"channels\":{},\"vocab\":{},\"batch\":{},\"seq\":{}}},\
         \"cpu_reference\":{{\"losses\":{},\"seconds\":{}}},\"gpu\":{gpu_json}}}",
        tiny.layers,
        tiny.heads,
        tiny.channels,
        tiny.vocab,
        o.batch,
        o.seq,
        json_numbers(&cpu.losses),
        json_number(cpu.seconds)
    )
}

/// Each build's gradients of the first step against the reference's, then
/// its losses over the reference's steps.
fn check_tiny(
    o: &Options,
    builds: &[Build],
    cpu: &CpuRun,
    say: &Say,
) -> Result<(String, Vec<TinyRun>), Error> {
    let tiny = Config::TINY;
    let initial = Params::init(&tiny, o.seed, false);
    let hyper = o.adamw();
    let mut reference = cpu.first_gradients.clone();
    let reference: Vec<(String, Vec<f64>)> = reference
        .tensors_mut()
        .into_iter()
        .map(|(n, t)| (n, t.clone()))
        .collect();
    let mut runs: Vec<TinyRun> = Vec::new();
    let mut device = String::new();
    for &how in builds {
        let mut model = Gpu::new(
            tiny,
            &initial,
            gpu::kernels(&tiny, how, o.toolkit_worker.as_deref())?,
            how,
        )?;
        model.use_graphs(o.graphs);
        device = model.device_name();
        let mut stream = TokenStream::new(o.seed, tiny.vocab);
        let first = TokenStream::new(o.seed, tiny.vocab).batch(o.batch, o.seq);
        let (_, mut grads) = model.gradients(&first.inputs, &first.targets, o.batch)?;
        let mut worst = (0.0, String::new());
        for ((name, gpu), (_, cpu)) in grads.tensors_mut().into_iter().zip(&reference) {
            let difference: f64 = gpu
                .iter()
                .zip(cpu)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>()
                .sqrt();
            let norm: f64 = cpu.iter().map(|b| b * b).sum::<f64>().sqrt();
            let relative = if norm > 0.0 {
                difference / norm
            } else {
                difference
            };
            // total_cmp: a NaN (a gradient that is no number) is the worst.
            if relative.abs().total_cmp(&worst.0).is_gt() || worst.1.is_empty() {
                worst = (relative, name);
            }
        }
        // NaN is outside the bound too.
        if worst.0.is_nan() || worst.0 > GRADIENT_TOLERANCE {
            return Err(format!(
                "{}: the gradient of {} differs from the reference's by {:.2e} of its norm (at most {GRADIENT_TOLERANCE:e})",
                how.name(),
                worst.1,
                worst.0
            )
            .into());
        }
        let mut losses = Vec::with_capacity(o.steps);
        for (step, &expected) in cpu.losses.iter().enumerate() {
            let batch = stream.batch(o.batch, o.seq);
            let loss = model.train_step(&batch.inputs, &batch.targets, o.batch, &hyper)?;
            let off = (loss - expected).abs();
            if off.is_nan() || off > LOSS_TOLERANCE * expected.abs() {
                return Err(format!(
                    "{}: step {}'s loss {loss} differs from the reference's {expected} by more than {LOSS_TOLERANCE:e} of it",
                    how.name(),
                    step + 1
                )
                .into());
            }
            losses.push(loss);
        }
        // The builds that change their code as they run go on, untimed and
        // unchecked, until their variants are decided: a trial cut short
        // when the model is dropped would leave a choice that some
        // processes made and others not.
        if matches!(how, Build::Tiered | Build::Adaptive) {
            let mut settling = Settling::new(true, o.graphs, o.warmup_limit);
            while !settling.settled_after_run(model.graph_nodes_waiting() > 0) {
                let batch = stream.batch(o.batch, o.seq);
                model.train_step(&batch.inputs, &batch.targets, o.batch, &hyper)?;
            }
        }
        let worst_loss = losses
            .iter()
            .zip(&cpu.losses)
            .map(|(a, b)| (a - b).abs() / b.abs())
            .fold(0.0, f64::max);
        let same =
            runs.first()
                .map(|r| bits_equal(&r.losses, &losses))
                .map_or(String::new(), |same| {
                    format!(
                        "; {} bit for bit",
                        if same {
                            "the first build's losses"
                        } else {
                            "not the first build's losses"
                        }
                    )
                });
        say.line(format!(
            "{device} tiny, {:>8}: gradients within {:.1e} of the reference's (worst {}), {} steps' losses within {:.1e}{same}",
            how.name(),
            worst.0,
            worst.1,
            losses.len(),
            worst_loss
        ));
        runs.push(TinyRun {
            build: how.name(),
            losses,
            worst_gradient: worst,
        });
    }
    Ok((device, runs))
}

fn bits_equal(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// GPT-2 small trained from the same weights and tokens in each build:
/// untimed steps until the build settles, then `small_steps` timed, then
/// one profiled.
fn train_small(o: &Options, say: &Say) -> Result<Vec<SmallRun>, Error> {
    let small = Config::GPT2_SMALL;
    let (batch, seq) = (o.small_batch, o.small_seq);
    say.line(format!(
        "GPT-2 small: 12 layers, C 768, B {batch} x T {seq}, training{}; drawing its weights ...",
        if o.graphs {
            " (each step a CUDA graph)"
        } else {
            ""
        }
    ));
    let weights = Params::init(&small, o.seed, false);
    let hyper = o.small_adamw();
    let mut runs: Vec<SmallRun> = Vec::new();
    for how in o.builds.iter().map(|b| b.for_shape(batch, seq)) {
        let mut model = Gpu::new(
            small,
            &weights,
            gpu::kernels(&small, how, o.toolkit_worker.as_deref())?,
            how,
        )?;
        model.use_graphs(o.graphs);
        let mut stream = TokenStream::new(o.seed, small.vocab);
        let mut steps = 0usize;
        let mut step = |model: &mut Gpu| -> Result<(f64, f64), Error> {
            let tokens = stream.batch(batch, seq);
            steps += 1;
            // On ptxspec's trace (PTXSPEC_TRACE), beside its links and
            // verdicts.
            let mut span = ptxspec::trace::program_span("training step");
            span.arg("build", how.name());
            span.arg("step", steps);
            let started = Instant::now();
            let loss = model.train_step(&tokens.inputs, &tokens.targets, batch, &hyper)?;
            Ok((loss, started.elapsed().as_secs_f64() * 1e3))
        };
        let (mut each_ms, mut losses) = (Vec::new(), Vec::new());
        let mut settling = Settling::new(
            matches!(how, Build::Tiered | Build::Adaptive),
            o.graphs,
            o.warmup_limit,
        );
        loop {
            let (loss, ms) = step(&mut model)?;
            losses.push(loss);
            each_ms.push(ms);
            say.progress(format!(
                "{:>8}: untimed step {} ({ms:.1} ms)",
                how.name(),
                settling.runs() + 1
            ));
            if settling.settled_after_run(model.graph_nodes_waiting() > 0) {
                break;
            }
        }
        let warmup = settling.runs();
        let phase = TimedPhase::start(model.launch_paths());
        let timed = Instant::now();
        for _ in 0..o.small_steps {
            let (loss, ms) = step(&mut model)?;
            losses.push(loss);
            each_ms.push(ms);
        }
        let step_ms = timed.elapsed().as_secs_f64() * 1e3 / o.small_steps as f64;
        let timed_phase = phase.json(model.graph_nodes_waiting(), model.launch_paths());
        let (_, kernels) = model.profiled(|m| step(m).map(|_| ()))?;
        let (median, worst) = after_the_fifth(&each_ms);
        say.line(format!(
            "GPT-2 small, {:>8}: {step_ms:8.3} ms a step, loss {:.4} -> {:.4}; {warmup} untimed steps, the first \
             {:.1} ms; after the fifth the slowest x{:.3} of their median",
            how.name(),
            losses[0],
            losses[losses.len() - 1],
            each_ms[0],
            worst / median
        ));
        runs.push(SmallRun {
            build: how.name(),
            timed_phase,
            warmup,
            each_ms,
            losses,
            step_ms,
            kernels,
        });
    }
    summarize(&runs, say);
    Ok(runs)
}

/// The step times as ratios to the generic and the literal builds, the
/// losses' agreement, and each kernel's share.
fn summarize(runs: &[SmallRun], say: &Say) {
    let find = |name: &str| runs.iter().find(|r| r.build == name).map(|r| r.step_ms);
    let (generic, literal) = (find("generic"), find("literal"));
    let ratio =
        |base: Option<f64>, ms: f64| base.map_or("-".to_string(), |b| format!("x{:.4}", ms / b));
    say.line(format!(
        "  {:<10} {:>10} {:>11} {:>11}  losses",
        "build", "ms a step", "of generic", "of literal"
    ));
    let first_losses = runs.first().map(|r| &r.losses);
    for r in runs {
        let same = first_losses.is_some_and(|f| {
            let n = f.len().min(r.losses.len());
            bits_equal(&f[..n], &r.losses[..n])
        });
        say.line(format!(
            "  {:<10} {:>10.3} {:>11} {:>11}  {}",
            r.build,
            r.step_ms,
            ratio(generic, r.step_ms),
            ratio(literal, r.step_ms),
            if same {
                "the first build's, bit for bit"
            } else {
                "differ from the first build's"
            }
        ));
    }
    let s = ptxspec::stats();
    say.line(format!(
        "adaptive arguments: {} variant(s) kept, {} not faster, {} timed launches",
        s.adapted_variants, s.variants_not_faster, s.timed_launches
    ));
    let Some(first) = runs.first() else { return };
    say.line("each kernel in one profiled step (ms, launches):".to_string());
    say.line(format!(
        "  {:<30} {}",
        "",
        runs.iter()
            .map(|r| format!("{:>10}", r.build))
            .collect::<String>()
    ));
    for (name, _, launches) in &first.kernels {
        let cells: String = runs
            .iter()
            .map(|r| {
                let ms = r
                    .kernels
                    .iter()
                    .find(|k| k.0 == *name)
                    .map_or(f64::NAN, |k| k.1);
                format!("{ms:>10.3}")
            })
            .collect();
        say.line(format!("  {name:<30} {cells}  ({launches})"));
    }
}
