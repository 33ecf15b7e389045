//! `gpt2 serve`: requests of one row each, their lengths drawn from a stated
//! distribution, each a forward pass (the request's loss on its own tokens
//! stands for the answer); the latency of each, per build.

use std::time::Instant;

use crate::data::{Rng, TokenStream};
use crate::gpu::{self, Build, Gpu};
use crate::measure::{Settling, TimedPhase, json_number, json_numbers, json_string, percentile};
use crate::reference::{Config, Params, forward};
use crate::{Error, Options, Say};

/// GPT-2 small's request lengths and how often each is drawn: short
/// requests are the common ones.
pub const SMALL_LENGTHS: [(usize, f64); 4] = [(128, 0.4), (256, 0.3), (512, 0.2), (1024, 0.1)];
/// The tiny configuration's, for the CPU reference.
const TINY_LENGTHS: [(usize, f64); 3] = [(4, 0.5), (8, 0.3), (16, 0.2)];

/// Draws request lengths from a distribution.
pub struct Lengths {
    rng: Rng,
    table: &'static [(usize, f64)],
}

impl Lengths {
    pub fn new(seed: u64, table: &'static [(usize, f64)]) -> Self {
        Lengths {
            rng: Rng::new(seed ^ 0x5e27e),
            table,
        }
    }

    pub fn next_length(&mut self) -> usize {
        let mut u = self.rng.uniform();
        for &(length, p) in self.table {
            if u < p {
                return length;
            }
            u -= p;
        }
        self.table.last().map_or(1, |l| l.0)
    }
}

/// One served request's length and times (milliseconds).
struct Request {
    length: usize,
    /// From its start to its losses on the host.
    wall: f64,
    /// On the GPU: CUDA events from its tokens' upload to its losses.
    gpu: f64,
    /// From its start until its work was all submitted (the literal
    /// build's swap of bundles included): where a slow request's time went,
    /// launching or waiting.
    submit: f64,
    /// The literal build's swap to the bundle of the request's length.
    swap: f64,
}

/// One build's served requests.
struct ServeRun {
    build: &'static str,
    /// What the guard did during the timed requests (JSON).
    timed_phase: String,
    /// The verdicts of the build's whole run, untimed requests included
    /// (JSON).
    verdicts: String,
    warmup: usize,
    /// Each timed request's times.
    requests: Vec<Request>,
    first_ms: f64,
}

impl ServeRun {
    fn latencies(&self, length: Option<usize>) -> Vec<f64> {
        self.requests
            .iter()
            .filter(|r| length.is_none_or(|want| r.length == want))
            .map(|r| r.wall)
            .collect()
    }

    fn gpu_latencies(&self, length: usize) -> Vec<f64> {
        self.requests
            .iter()
            .filter(|r| r.length == length)
            .map(|r| r.gpu)
            .collect()
    }
}

/// Runs `gpt2 serve`; returns its JSON.
pub fn run(o: &Options, say: &Say) -> Result<String, Error> {
    if !ptxspec::runtime::driver_available() {
        return cpu_only(o, say);
    }
    let small = Config::GPT2_SMALL;
    say.line(format!(
        "GPT-2 small serving {} requests a build, one row each, lengths {}; drawing its weights ...",
        o.requests,
        SMALL_LENGTHS
            .iter()
            .map(|(l, p)| format!("{l} ({:.0} %)", p * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let weights = Params::init(&small, o.seed, false);
    let mut runs = Vec::new();
    let mut device = String::new();
    for &how in &o.builds {
        // The literal build is one bundle per length, each with its sizes
        // literals; the others serve every length with one.
        let mut literal: Vec<(usize, Option<ptxspec::KernelBundle<ptxspec::Executable>>)> =
            Vec::new();
        if let Build::Literal { .. } = how {
            for &(length, _) in &SMALL_LENGTHS {
                literal.push((
                    length,
                    Some(gpu::kernels(
                        &small,
                        how.for_shape(1, length),
                        o.toolkit_worker.as_deref(),
                    )?),
                ));
            }
        }
        let first_kernels = match literal.first_mut() {
            Some((_, k)) => k.take().ok_or("no literal bundle")?,
            None => gpu::kernels(&small, how, o.toolkit_worker.as_deref())?,
        };
        let mut model = Gpu::new(small, &weights, first_kernels, how)?;
        // The other lengths' bundles loaded before the first request; a
        // second preparation of each shows what a prepared bundle's costs.
        for (length, kernels) in &literal {
            if let Some(kernels) = kernels {
                let first = model.prepare(kernels)?;
                let again = model.prepare(kernels)?;
                say.line(format!(
                    "literal bundle of T {length}: prepared in {:.1} ms, again in {:.3} ms",
                    first.as_secs_f64() * 1e3,
                    again.as_secs_f64() * 1e3
                ));
            }
        }
        model.use_graphs(o.graphs);
        model.time_forwards_on_gpu();
        let longest = SMALL_LENGTHS.iter().map(|l| l.0).max().unwrap_or(1);
        model.reserve(1, longest)?;
        device = model.device_name();
        let mut current = SMALL_LENGTHS[0].0;
        let mut lengths = Lengths::new(o.seed, &SMALL_LENGTHS);
        let mut tokens = TokenStream::new(o.seed, small.vocab);
        let mut request = |model: &mut Gpu| -> Result<Request, Error> {
            let length = lengths.next_length();
            let batch = tokens.batch(1, length);
            let started = Instant::now();
            if !literal.is_empty() && length != current {
                let at = literal
                    .iter()
                    .position(|l| l.0 == length)
                    .ok_or("no literal bundle")?;
                let wanted = literal[at].1.take().ok_or("no literal bundle")?;
                let given = model.swap_kernels(wanted);
                let back = literal
                    .iter()
                    .position(|l| l.0 == current)
                    .ok_or("no literal bundle")?;
                literal[back].1 = Some(given);
                current = length;
            }
            let swap = started.elapsed().as_secs_f64() * 1e3;
            model.forward(&batch.inputs, &batch.targets, 1)?;
            let wall = started.elapsed().as_secs_f64() * 1e3;
            let submit = model
                .last_submitted()
                .map_or(f64::NAN, |at| (at - started).as_secs_f64() * 1e3);
            Ok(Request {
                length,
                wall,
                gpu: model.last_gpu_ms().unwrap_or(f64::NAN),
                submit,
                swap,
            })
        };
        let whole_run = TimedPhase::start(model.launch_paths());
        let mut settling = Settling::new(
            matches!(how, Build::Tiered | Build::Adaptive),
            o.graphs,
            o.warmup_limit,
        );
        let mut first_ms = f64::NAN;
        // Untimed until the build settles and every length has been served
        // twice (each length's first request loads its code: the literal
        // build's bundle of that length, a variant's module).
        let mut served = [0usize; SMALL_LENGTHS.len()];
        loop {
            let Request { length, wall, .. } = request(&mut model)?;
            if first_ms.is_nan() {
                first_ms = wall;
            }
            if let Some(at) = SMALL_LENGTHS.iter().position(|l| l.0 == length) {
                served[at] += 1;
            }
            say.progress(format!(
                "{:>8}: untimed request {}",
                how.name(),
                settling.runs() + 1
            ));
            let settled = settling.settled_after_run(model.graph_nodes_waiting() > 0);
            if (settled && served.iter().all(|&n| n >= 2)) || settling.runs() >= o.warmup_limit {
                break;
            }
        }
        let warmup = settling.runs();
        let phase = TimedPhase::start(model.launch_paths());
        let requests = (0..o.requests)
            .map(|_| request(&mut model))
            .collect::<Result<Vec<_>, Error>>()?;
        let run = ServeRun {
            build: how.name(),
            timed_phase: phase.json(model.graph_nodes_waiting(), model.launch_paths()),
            verdicts: whole_run.verdicts_json(),
            warmup,
            requests,
            first_ms,
        };
        let all = run.latencies(None);
        let worst_over_median = SMALL_LENGTHS
            .iter()
            .map(|&(l, _)| {
                let each = run.latencies(Some(l));
                percentile(&each, 100.0) / percentile(&each, 50.0)
            })
            .filter(|r| r.is_finite())
            .fold(0.0, f64::max);
        say.line(format!(
            "{device}, {:>8}: p50 {:.3} ms, p99 {:.3} ms; the slowest request x{worst_over_median:.3} of its \
             length's median; {warmup} untimed requests, the first {first_ms:.1} ms",
            how.name(),
            percentile(&all, 50.0),
            percentile(&all, 99.0)
        ));
        runs.push(run);
    }
    say.line(format!(
        "  {:<10} {}",
        "median ms",
        SMALL_LENGTHS
            .iter()
            .map(|(l, _)| format!("{:>18}", format!("T {l} (on the GPU)")))
            .collect::<String>()
    ));
    for r in &runs {
        let cells: String = SMALL_LENGTHS
            .iter()
            .map(|&(l, _)| {
                let wall = percentile(&r.latencies(Some(l)), 50.0);
                let gpu = percentile(&r.gpu_latencies(l), 50.0);
                format!("{:>18}", format!("{wall:.3} ({gpu:.3})"))
            })
            .collect();
        say.line(format!("  {:<10} {cells}", r.build));
    }
    let json: Vec<String> = runs
        .iter()
        .map(|r| {
            let all = r.latencies(None);
            let per_length: Vec<String> = SMALL_LENGTHS
                .iter()
                .map(|&(l, _)| {
                    let each = r.latencies(Some(l));
                    format!(
                        "{{\"length\":{l},\"count\":{},\"p50_ms\":{},\"max_ms\":{},\"gpu_p50_ms\":{}}}",
                        each.len(),
                        json_number(percentile(&each, 50.0)),
                        json_number(percentile(&each, 100.0)),
                        json_number(percentile(&r.gpu_latencies(l), 50.0))
                    )
                })
                .collect();
            let each = |f: fn(&Request) -> f64| r.requests.iter().map(f).collect::<Vec<f64>>();
            format!(
                "{{\"build\":{},\"timed_phase\":{},\"verdicts\":{},\"warmup_requests\":{},\"first_ms\":{},\"p50_ms\":{},\"p99_ms\":{},\"per_length\":[{}],\"lengths\":{},\"each_ms\":{},\"each_gpu_ms\":{},\"each_submit_ms\":{},\"each_swap_ms\":{}}}",
                json_string(r.build),
                r.timed_phase,
                r.verdicts,
                r.warmup,
                json_number(r.first_ms),
                json_number(percentile(&all, 50.0)),
                json_number(percentile(&all, 99.0)),
                per_length.join(","),
                json_numbers(&each(|x| x.length as f64)),
                json_numbers(&all),
                json_numbers(&each(|x| x.gpu)),
                json_numbers(&each(|x| x.submit)),
                json_numbers(&each(|x| x.swap))
            )
        })
        .collect();
    Ok(format!(
        "{{\"command\":\"serve\",\"device\":{},\"graphs\":{},\"builds\":[{}]}}",
        json_string(&device),
        o.graphs,
        json.join(",")
    ))
}

/// Without a GPU: the tiny configuration's requests on the CPU reference.
fn cpu_only(o: &Options, say: &Say) -> Result<String, Error> {
    let tiny = Config::TINY;
    let params = Params::init(&tiny, o.seed, false);
    let mut lengths = Lengths::new(o.seed, &TINY_LENGTHS);
    let mut tokens = TokenStream::new(o.seed, tiny.vocab);
    let count = o.requests.min(8);
    let mut losses = Vec::new();
    for i in 0..count {
        let length = lengths.next_length();
        let batch = tokens.batch(1, length);
        let f = forward(&tiny, &params, &batch.inputs, &batch.targets, 1);
        say.line(format!(
            "CPU reference, tiny: request {} of {length} tokens, loss {:.6}",
            i + 1,
            f.loss
        ));
        losses.push(f.loss);
    }
    say.line("No CUDA driver: serving GPT-2 small through ptxspec needs a GPU".to_string());
    Ok(format!(
        "{{\"command\":\"serve\",\"cpu_reference\":{{\"losses\":{}}},\"gpu\":null}}",
        json_numbers(&losses)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The drawn lengths follow the stated table.
    #[test]
    fn lengths_follow_their_distribution() {
        let mut lengths = Lengths::new(3, &SMALL_LENGTHS);
        let draws = 20_000;
        let mut counts = [0usize; 4];
        for _ in 0..draws {
            let l = lengths.next_length();
            let at = SMALL_LENGTHS
                .iter()
                .position(|x| x.0 == l)
                .expect("a listed length");
            counts[at] += 1;
        }
        for (count, (_, p)) in counts.iter().zip(SMALL_LENGTHS) {
            let seen = *count as f64 / draws as f64;
            assert!((seen - p).abs() < 0.015, "{counts:?}");
        }
        assert!((SMALL_LENGTHS.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-12);
    }
}
