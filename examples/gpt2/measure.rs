//! What the GPU runs are judged by: when a build has settled, the steady
//! state's median and worst, percentiles, and the JSON the runs write.

use std::time::Instant;

/// The median and the largest of the times after the fifth (all of them
/// where there are fewer): the first few load and link; a stall after them
/// is what the largest over the median shows.
pub fn after_the_fifth(each_ms: &[f64]) -> (f64, f64) {
    let mut later: Vec<f64> = each_ms.iter().skip(5).copied().collect();
    if later.is_empty() {
        later = each_ms.to_vec();
    }
    later.sort_by(f64::total_cmp);
    let median = later.get(later.len() / 2).copied().unwrap_or(f64::NAN);
    (median, later.last().copied().unwrap_or(f64::NAN))
}

/// The `p`-th percentile (0 to 100) of `values`, nearest rank; NaN where
/// there are none.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The counters of `s` that move while adaptive arguments decide (on
/// launches or on a graph's replays) and tiers swap.
fn adapting(s: &ptxspec::Stats) -> [u64; 6] {
    [
        s.adapted_variants,
        s.variants_not_faster,
        s.timed_launches,
        s.tier_ups,
        s.adapted_graph_nodes,
        s.timed_replays,
    ]
}

/// What ptxspec's guard did while the timed runs ran: launches timed,
/// replays timed, launches that ran a variant, and the graph nodes still
/// waiting for a verdict when they ended — the JSON of the "timed phase".
pub struct TimedPhase {
    before: ptxspec::Stats,
    paths: ptxspec::runtime::LaunchPaths,
}

impl TimedPhase {
    /// From now on, with the model's queue's launch paths so far.
    pub fn start(paths: ptxspec::runtime::LaunchPaths) -> Self {
        TimedPhase {
            before: ptxspec::stats(),
            paths,
        }
    }

    /// The verdicts since `start`: variants kept and not, graph nodes
    /// switched, launches and replays timed.
    pub fn verdicts_json(&self) -> String {
        let now = ptxspec::stats();
        let b = &self.before;
        format!(
            "{{\"adapted_variants\":{},\"variants_not_faster\":{},\"adapted_graph_nodes\":{},\"timed_launches\":{},\"timed_replays\":{}}}",
            now.adapted_variants - b.adapted_variants,
            now.variants_not_faster - b.variants_not_faster,
            now.adapted_graph_nodes - b.adapted_graph_nodes,
            now.timed_launches - b.timed_launches,
            now.timed_replays - b.timed_replays,
        )
    }

    /// The phase's counts: `paths`, the queue's launch paths now.
    pub fn json(&self, waiting_nodes: usize, paths: ptxspec::runtime::LaunchPaths) -> String {
        let now = ptxspec::stats();
        format!(
            "{{\"timed_launches\":{},\"timed_replays\":{},\"adapted_launches\":{},\"graph_nodes_waiting\":{waiting_nodes},\"short_path_launches\":{},\"whole_path_launches\":{}}}",
            now.timed_launches - self.before.timed_launches,
            now.timed_replays - self.before.timed_replays,
            now.adapted_launches - self.before.adapted_launches,
            paths.short - self.paths.short,
            paths.whole - self.paths.whole,
        )
    }
}

/// Decides when a build's untimed runs may end: at once for builds that do
/// not change their code as they run, and for the tiered and adaptive builds
/// once their counters have stayed still for a second (at most `limit`
/// runs).
pub struct Settling {
    moves: bool,
    /// Every run is CUDA graphs' replays: what waits is the graphs' nodes
    /// (a trial of variants that launches outside the graphs started, and
    /// none continues, is not the runs' code).
    graphs: bool,
    runs: usize,
    limit: usize,
    last: [u64; 6],
    still_since: Instant,
}

impl Settling {
    pub fn new(moves: bool, graphs: bool, limit: usize) -> Self {
        Settling {
            moves,
            graphs,
            runs: 0,
            limit,
            last: adapting(&ptxspec::stats()),
            still_since: Instant::now(),
        }
    }

    /// Counts a run; whether the untimed runs are over. `waiting`: some of
    /// the build's code still waits for a verdict that no counter shows
    /// moving yet (a graph's nodes while their variants link); without
    /// graphs, a variant undecided (linking, on trial, or waiting for
    /// another process's verdict) waits too.
    pub fn settled_after_run(&mut self, waiting: bool) -> bool {
        self.runs += 1;
        let stats = ptxspec::stats();
        let now = adapting(&stats);
        let waiting = waiting || (self.moves && !self.graphs && stats.variants_undecided > 0);
        if now != self.last || waiting {
            self.last = now;
            self.still_since = Instant::now();
        }
        let still = !self.moves || self.still_since.elapsed().as_secs_f64() > 1.0;
        (self.runs >= 2 && still) || self.runs >= self.limit
    }

    pub fn runs(&self) -> usize {
        self.runs
    }
}

/// A JSON string (what `{:?}` gives is Rust's escaping, not JSON's).
pub fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number: `null` for what JSON cannot hold.
pub fn json_number(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

/// A JSON array of numbers.
pub fn json_numbers(xs: &[f64]) -> String {
    let items: Vec<String> = xs.iter().map(|&x| json_number(x)).collect();
    format!("[{}]", items.join(","))
}

/// Each kernel's (and the matmuls') milliseconds and launches in one
/// profiled run, as JSON.
pub fn json_kernels(kernels: &[(&'static str, f64, usize)]) -> String {
    let items: Vec<String> = kernels
        .iter()
        .map(|(k, ms, n)| {
            format!(
                "{{\"name\":{},\"ms\":{},\"launches\":{n}}}",
                json_string(k),
                json_number(*ms)
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steady_state_starts_after_the_fifth_run() {
        let each = [90.0, 40.0, 31.0, 31.0, 31.0, 30.0, 31.0, 62.0, 30.5];
        assert_eq!(after_the_fifth(&each), (31.0, 62.0));
        assert_eq!(after_the_fifth(&[5.0, 3.0]), (5.0, 5.0));
        assert!(after_the_fifth(&[]).0.is_nan());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn json_is_escaped_and_numbers_finite() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(json_number(f64::NAN), "null");
        assert_eq!(json_numbers(&[1.5, f64::INFINITY]), "[1.5,null]");
    }
}
