//! The guard of adaptive arguments: a variant replaces the generic code
//! only once it ran faster on the launches it would serve. Specializing can
//! lose (NVVM unrolls a loop whose count it now knows, and the kernel runs
//! slower; it spends registers and occupancy falls), so a variant is timed
//! before it is kept.
//!
//! A [`Trial`] times launches of the variant's argument set with CUDA
//! events, one launch between each pair (the launches around it may be any
//! other kernel's), in turns — the generic code, then each variant (LTO and
//! PTX, where both were made) — so that a drift of the clocks falls on
//! every contender alike. Only the launches of an argument set whose
//! variant is on trial pay for it (two event records each); no other launch
//! is touched.
//!
//! The [`Judge`] compares each contender's mean time with its outliers set
//! aside (launches behind a page fault or a clock change do not move it,
//! and unlike a median it resolves differences finer than the events'
//! half-microsecond ticks) and keeps the fastest variant where it is faster
//! beyond the noise: by more than [`CONFIDENCE`] standard errors of the
//! difference. Where several variants win, it keeps the fastest once no
//! other could still be faster than it by more than [`REGRET`]. It looks at
//! 15, 30, 60 and 120 times per contender — a clear difference is decided
//! early, a small one with more times — and at the last look, without a
//! clear win, the generic code stays (with one, the fastest variant then). From the
//! second look on, a variant clearly slower than the fastest contender
//! leaves the turns (its launches run faster code meanwhile: a trial's cost
//! is its losers' times), and with every variant out the generic code stays.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, DriverError};

use super::super::cuda;

/// The numbers of times per contender at which the judge looks; at the
/// last, it decides.
const LOOKS: [usize; 4] = [15, 30, 60, 120];
/// How many standard errors of the difference of two means a
/// variant must be faster by: two contenders of one distribution differ by
/// as much once in about 10⁵ looks (a normal tail beyond 4.4).
const CONFIDENCE: f64 = 4.4;
/// How much slower than another variant the one kept may be, as a share
/// of its time: where two variants beat the generic code, the trial goes on
/// until the faster is known within this.
const REGRET: f64 = 0.005;
/// How many standard errors of their difference the ranking of two
/// variants that both beat the generic code is sure by. Lower than
/// [`CONFIDENCE`]: both are faster than the generic code already, and a
/// wrong ranking costs at most the difference it missed.
const RANKING: f64 = 3.0;
/// A time further from its contender's median than this many of their
/// deviations is an outlier (a launch behind a page fault, a clock change,
/// another queue's kernel beside it), set aside.
const OUTLIER: f64 = 6.0;
/// ... and further than this share of the median: ordinary noise, however
/// narrow the rest, is never set aside.
const NEAR: f64 = 0.05;
/// The least relative spread assumed of a contender's times: times that
/// are all one tick of the events' clock still leave it that uncertain.
const LEAST_SPREAD: f64 = 1e-3;
/// Timed launches in flight at once. With all in flight, a launch runs the
/// generic code untimed: a queue far ahead of the device is not slowed to
/// read its events.
const SLOTS: usize = 16;

/// What the trial of a variant decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) enum Verdict {
    /// Variant `i` (counting from 0 among the variants) runs faster than
    /// the generic code and every other variant: it is kept.
    Variant(usize),
    /// No variant is faster beyond the noise: the generic code stays.
    Generic,
}

/// The times of each contender (0: the generic code; `i + 1`: variant
/// `i`), and the verdict they give.
pub(super) struct Judge {
    samples: Vec<Vec<f32>>,
    turn: usize,
    /// The next look, an index into [`LOOKS`].
    look: usize,
    /// Variants out of the turns: clearly slower than the fastest
    /// contender at a look (see [`RETIRE_FROM`]).
    retired: Vec<bool>,
}

/// The first look (an index into [`LOOKS`]) at which a variant clearly
/// slower than the fastest contender leaves the turns: every launch it
/// would have run then runs a faster contender, and with every variant
/// retired the generic code stays. Not at the first look, where a burst of
/// slow launches among 15 times could make a winner look slow.
const RETIRE_FROM: usize = 1;

impl Judge {
    /// A judge of the generic code and `variants` variants.
    pub(super) fn new(variants: usize) -> Judge {
        Judge {
            samples: vec![Vec::with_capacity(LOOKS[0]); variants + 1],
            turn: 0,
            look: 0,
            retired: vec![false; variants + 1],
        }
    }

    /// The contender the next timed launch runs: each in turn, the
    /// retired ones skipped (the generic code never is).
    pub(super) fn next(&mut self) -> usize {
        loop {
            let c = self.turn % self.samples.len();
            self.turn += 1;
            if !self.retired[c] {
                return c;
            }
        }
    }

    /// One timed launch of contender `c`, in milliseconds (a time that is
    /// not a finite positive number is no sample).
    pub(super) fn add(&mut self, c: usize, ms: f32) {
        if let Some(s) = self.samples.get_mut(c)
            && ms.is_finite()
            && ms > 0.0
        {
            s.push(ms);
        }
    }

    /// The verdict at a look where it is clear, and at the last look in
    /// any case; `None` before.
    pub(super) fn verdict(&mut self) -> Option<Verdict> {
        let at = *LOOKS.get(self.look)?;
        let active: Vec<usize> = (0..self.samples.len())
            .filter(|&c| !self.retired[c])
            .collect();
        if active.iter().any(|&c| self.samples[c].len() < at) {
            return None;
        }
        let look = self.look;
        self.look += 1;
        let last = self.look == LOOKS.len();
        let estimates: Vec<Estimate> = self.samples.iter().map(|s| estimate(s)).collect();
        // The standard error of the difference of two contenders' means.
        let spread = |a: Estimate, b: Estimate| (a.error.powi(2) + b.error.powi(2)).sqrt();
        let margin = |a: Estimate, b: Estimate| CONFIDENCE * spread(a, b);
        let fastest = |among: &[usize]| {
            among
                .iter()
                .copied()
                .min_by(|&a, &b| estimates[a].mean.total_cmp(&estimates[b].mean))
        };
        let variants: Vec<usize> = active.iter().copied().filter(|&c| c > 0).collect();
        let Some(best) = fastest(&variants) else {
            return Some(Verdict::Generic);
        };
        let (generic, variant) = (estimates[0], estimates[best]);
        if generic.mean - variant.mean > margin(generic, variant) {
            // The generic code lost. Of the variants, the fastest is kept
            // once none other could still be faster than it by more than
            // the regret allowed — or at the last look, the fastest then.
            let may_be_faster = |c: usize| {
                let other = estimates[c];
                RANKING * spread(other, variant) - (other.mean - variant.mean)
                    > REGRET * variant.mean
            };
            if last || !variants.iter().any(|&c| c != best && may_be_faster(c)) {
                return Some(Verdict::Variant(best - 1));
            }
        }
        // Variants clearly slower than the fastest contender leave the
        // turns; with none left, the generic code stays.
        if look >= RETIRE_FROM {
            let lead = fastest(&active).unwrap_or(0);
            for &c in &variants {
                let (slow, fast) = (estimates[c], estimates[lead]);
                if slow.mean - fast.mean > margin(slow, fast) {
                    self.retired[c] = true;
                }
            }
        }
        // No clear win at the last look; or every variant retired.
        let none_left = self.retired[1..].iter().all(|&r| r);
        (last || none_left).then_some(Verdict::Generic)
    }

    /// Each contender's mean time so far, in milliseconds (`NaN`
    /// without a time): what the verdict's log line says.
    pub(super) fn means(&self) -> Vec<f32> {
        self.samples
            .iter()
            .map(|s| match s.is_empty() {
                true => f32::NAN,
                false => estimate(s).mean as f32,
            })
            .collect()
    }
}

/// A contender's time: the mean of its times once the outliers are set
/// aside, and that mean's standard error.
#[derive(Clone, Copy, Debug)]
struct Estimate {
    mean: f64,
    error: f64,
}

/// The mean of `samples` (not empty) without its outliers — times further
/// from the median than [`OUTLIER`] times their median absolute deviation
/// (scaled as a standard deviation), and at least [`NEAR`] of it — and
/// that mean's standard error. A mean of the times themselves (not a median
/// or a trimmed mean, which keep the ticks' steps) resolves differences
/// finer than a tick of the events' clock.
fn estimate(samples: &[f32]) -> Estimate {
    let times: Vec<f64> = samples.iter().map(|&x| f64::from(x)).collect();
    let median = median(&times);
    let deviation = 1.4826 * median_of(times.iter().map(|x| (x - median).abs()).collect());
    let bound = (OUTLIER * deviation).max(NEAR * median);
    let kept: Vec<f64> = times
        .into_iter()
        .filter(|x| (x - median).abs() <= bound)
        .collect();
    let n = kept.len() as f64;
    let mean = kept.iter().sum::<f64>() / n;
    let variance = match kept.len() {
        0 | 1 => 0.0,
        k => kept.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1) as f64,
    };
    Estimate {
        mean,
        error: variance.sqrt().max(mean * LEAST_SPREAD) / n.sqrt(),
    }
}

fn median(times: &[f64]) -> f64 {
    median_of(times.to_vec())
}

/// The median of `values` (not empty).
fn median_of(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n % 2 {
        1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// A pair of events around one launch, and the contender it timed while
/// the launch is in flight.
struct Slot {
    start: CudaEvent,
    end: CudaEvent,
    timing: Option<usize>,
}

/// The trial of one argument set's variants against the generic code (or,
/// for a graph, of its nodes on their variants against the graph as
/// captured: then a contender is a configuration, and a timed "launch" a
/// whole replay).
pub(in crate::runtime) struct Trial<V> {
    variants: Vec<V>,
    judge: Judge,
    slots: Vec<Slot>,
}

/// A launch to time: the code it runs (`None`: the generic code) and the
/// events to record on the launch's stream before and after it.
pub(in crate::runtime) struct Timed<'t> {
    pub(in crate::runtime) function: Option<&'t cuda::Function>,
    pub(in crate::runtime) start: &'t CudaEvent,
    pub(in crate::runtime) end: &'t CudaEvent,
}

/// A variant's code.
pub(in crate::runtime) trait Code {
    fn function(&self) -> &cuda::Function;
}

impl<V> Trial<V> {
    /// A trial of `variants` (at least one), with its events made in
    /// `ctx`.
    pub(in crate::runtime) fn new(
        ctx: &Arc<CudaContext>,
        variants: Vec<V>,
    ) -> Result<Trial<V>, DriverError> {
        let slots = (0..SLOTS)
            .map(|_| {
                Ok(Slot {
                    start: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
                    end: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
                    timing: None,
                })
            })
            .collect::<Result<_, DriverError>>()?;
        Ok(Trial {
            judge: Judge::new(variants.len()),
            variants,
            slots,
        })
    }

    /// Reads the timed launches that are done (without waiting for any);
    /// the verdict once it is given.
    pub(in crate::runtime) fn harvest(&mut self) -> Result<Option<Verdict>, DriverError> {
        for slot in &mut self.slots {
            let Some(c) = slot.timing else { continue };
            if !slot.end.try_is_complete()? {
                continue;
            }
            // Both recorded and the end reached: no wait.
            let ms = slot.start.elapsed_ms(&slot.end)?;
            self.judge.add(c, ms);
            slot.timing = None;
        }
        Ok(self.judge.verdict())
    }

    /// The next turn to time, where a pair of events is free: the
    /// contender (0: the generic code; `i + 1`: variant `i`) and the slot
    /// of the events to record before and after it ([`events`](Self::events)).
    pub(in crate::runtime) fn next_turn(&mut self) -> Option<(usize, usize)> {
        let at = self.slots.iter().position(|s| s.timing.is_none())?;
        let c = self.judge.next();
        self.slots[at].timing = Some(c);
        Some((c, at))
    }

    /// The contender whose turn comes next (each in turn), for a caller
    /// that times a contender in blocks ([`slot_for`](Self::slot_for)).
    pub(in crate::runtime) fn next_contender(&mut self) -> usize {
        self.judge.next()
    }

    /// A free pair of events to time contender `c` with, where one is free.
    pub(in crate::runtime) fn slot_for(&mut self, c: usize) -> Option<usize> {
        let at = self.slots.iter().position(|s| s.timing.is_none())?;
        self.slots[at].timing = Some(c);
        Some(at)
    }

    /// The events of slot `at`: to record before and after the turn.
    pub(in crate::runtime) fn events(&self, at: usize) -> Option<(&CudaEvent, &CudaEvent)> {
        self.slots.get(at).map(|s| (&s.start, &s.end))
    }

    /// Each contender's mean time so far (generic first),
    /// milliseconds.
    pub(in crate::runtime) fn means(&self) -> Vec<f32> {
        self.judge.means()
    }

    /// The variants, in their order (the trial's events go).
    pub(in crate::runtime) fn into_variants(self) -> Vec<V> {
        self.variants
    }
}

impl<V: Code> Trial<V> {
    /// The next launch to time, where a pair of events is free.
    pub(super) fn next(&mut self) -> Option<Timed<'_>> {
        let (c, at) = self.next_turn()?;
        let slot = &self.slots[at];
        let function = match c {
            0 => None,
            v => Some(self.variants[v - 1].function()),
        };
        Some(Timed {
            function,
            start: &slot.start,
            end: &slot.end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic generator of times: `base` scaled by a factor in
    /// `1 ± noise`, with an outlier (×3, as a launch behind a page fault
    /// or a clock change) one time in `outlier_every`.
    struct Times {
        state: u64,
    }

    impl Times {
        fn next(&mut self, base: f32, noise: f32, outlier_every: u64) -> f32 {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            if self.state.is_multiple_of(outlier_every) {
                return base * 3.0;
            }
            let unit = (self.state >> 11) as f32 / (1u64 << 53) as f32;
            base * (1.0 + noise * (2.0 * unit - 1.0))
        }
    }

    /// The verdict of contenders of these mean times (generic first), each
    /// time drawn with `noise`, in the trial's turns.
    fn verdict(means: &[f32], noise: f32, seed: u64) -> Verdict {
        verdict_of(means, seed, |times, mean| times.next(mean, noise, 11))
    }

    /// The verdict of contenders of these mean times (generic first), each
    /// time drawn by `draw` from the contender's mean, in the trial's turns.
    fn verdict_of(means: &[f32], seed: u64, draw: impl FnMut(&mut Times, f32) -> f32) -> Verdict {
        judged_by(means, seed, draw).0
    }

    /// [`verdict_of`], and how many turns each contender took.
    fn judged_by(
        means: &[f32],
        seed: u64,
        mut draw: impl FnMut(&mut Times, f32) -> f32,
    ) -> (Verdict, Vec<usize>) {
        let mut judge = Judge::new(means.len() - 1);
        let mut times = Times { state: seed | 1 };
        let mut turns = vec![0; means.len()];
        loop {
            if let Some(v) = judge.verdict() {
                return (v, turns);
            }
            let c = judge.next();
            turns[c] += 1;
            judge.add(c, draw(&mut times, means[c]));
        }
    }

    /// The verdict of a judge of contenders of these mean times (generic
    /// first), each time drawn with `noise` and an outlier one time in
    /// `outlier_every`, and how many turns each contender took.
    fn judged(means: &[f32], noise: f32, outlier_every: u64, seed: u64) -> (Verdict, Vec<usize>) {
        judged_by(means, seed, |times, mean| {
            times.next(mean, noise, outlier_every)
        })
    }

    /// A generated family: a variant slower than the generic code, or as
    /// fast, is never kept, whatever the noise and the draws.
    #[test]
    fn a_variant_not_faster_is_never_kept() {
        for seed in 0..300u64 {
            for noise in [0.0, 0.002, 0.01, 0.05, 0.2] {
                for slower in [1.0, 1.0001, 1.005, 1.03, 1.12, 2.0] {
                    assert_eq!(
                        verdict(&[1.0, slower], noise, seed),
                        Verdict::Generic,
                        "×{slower}, noise {noise}, seed {seed}"
                    );
                    assert_eq!(
                        verdict(&[1.0, slower, slower * 1.01], noise, seed),
                        Verdict::Generic,
                        "two variants, ×{slower}, noise {noise}, seed {seed}"
                    );
                }
            }
        }
    }

    /// A variant faster beyond the noise is kept — a small difference in
    /// more times; of two, the faster.
    #[test]
    fn a_variant_faster_beyond_the_noise_is_kept() {
        for seed in 0..300u64 {
            for (faster, noise) in [
                (0.97, 0.005),
                (0.975, 0.02),
                (0.99, 0.01),
                (0.9, 0.05),
                (0.7, 0.2),
                (0.995, 0.0),
            ] {
                assert_eq!(
                    verdict(&[1.0, faster], noise, seed),
                    Verdict::Variant(0),
                    "×{faster}, noise {noise}, seed {seed}"
                );
                assert_eq!(
                    verdict(&[1.0, 1.03, faster], noise, seed),
                    Verdict::Variant(1),
                    "the second of two, ×{faster}, noise {noise}, seed {seed}"
                );
            }
        }
    }

    /// Times in ticks of the events' clock (half a microsecond): a kernel
    /// of 21 µs made 2.5 % faster is told apart (the ticks' dithering by
    /// the noise resolves it), one as fast is not.
    #[test]
    fn differences_finer_than_a_tick_are_resolved() {
        let tick = 0.000_5f32;
        for seed in 0..300u64 {
            let quantized = |means: &[f32]| {
                verdict_of(means, seed, |times, mean| {
                    (times.next(mean, 0.03, 23) / tick).round() * tick
                })
            };
            assert_eq!(
                quantized(&[0.021, 0.020_475]),
                Verdict::Variant(0),
                "seed {seed}"
            );
            assert_eq!(quantized(&[0.021, 0.021]), Verdict::Generic, "seed {seed}");
        }
    }

    /// A generated family: a variant clearly slower than the fastest
    /// contender takes no turn after the second look — the launches run the
    /// others — and the trial still keeps the faster variant beside it, or
    /// the generic code where every variant is slow (decided at the second
    /// look, not the third).
    #[test]
    fn a_clearly_slower_variant_leaves_the_turns() {
        // (a variant's win, the noise): within what the judge resolves
        // (`a_variant_faster_beyond_the_noise_is_kept`).
        let wins = [
            (0.99f32, 0.0f32),
            (0.99, 0.005),
            (0.975, 0.02),
            (0.97, 0.02),
        ];
        for seed in 0..300u64 {
            for noise in [0.0, 0.005, 0.02] {
                for bad in [1.2f32, 1.5, 2.0] {
                    for good in wins.iter().filter(|w| w.1 == noise).map(|w| w.0) {
                        let (verdict, turns) = judged(&[1.0, bad, good], noise, 11, seed);
                        let case = format!("bad ×{bad}, good ×{good}, noise {noise}, seed {seed}");
                        assert_eq!(verdict, Verdict::Variant(1), "{case}");
                        assert!(turns[1] <= LOOKS[1], "{case}: {turns:?}");
                    }
                    let (verdict, turns) = judged(&[1.0, bad], noise, 11, seed);
                    let turns: usize = turns.iter().sum();
                    assert_eq!(
                        verdict,
                        Verdict::Generic,
                        "×{bad}, noise {noise}, seed {seed}"
                    );
                    assert!(
                        turns <= 2 * LOOKS[1],
                        "×{bad}, noise {noise}, seed {seed}: {turns} turns"
                    );
                }
            }
        }
    }

    /// A generated family: where two variants both beat the generic code,
    /// the faster is kept (at most 0.2 % of the trials not) — however early the
    /// generic code's defeat is clear (an embedding of 31 µs whose LTO and
    /// PTX variants ran 28.5 and 28.9 µs, in ticks of the events' clock;
    /// kernels of other lengths and gaps, either variant first).
    #[test]
    fn of_two_variants_that_win_the_faster_is_kept() {
        let tick = 0.000_5f32;
        let mut kept_slower = Vec::new();
        for seed in 0..300u64 {
            for (generic, faster, gap) in [
                (0.031f32, 0.028_5f32, 1.014f32),
                (0.031, 0.028_5, 1.02),
                (0.015, 0.014_2, 1.015),
                (0.18, 0.17, 1.011),
                (1.0, 0.9, 1.012),
            ] {
                for noise in [0.005f32, 0.02, 0.05] {
                    for faster_first in [true, false] {
                        let slower = faster * gap;
                        let means = match faster_first {
                            true => [generic, faster, slower],
                            false => [generic, slower, faster],
                        };
                        let verdict = verdict_of(&means, seed, |times, mean| {
                            (times.next(mean, noise, 23) / tick).round() * tick
                        });
                        let want = Verdict::Variant(usize::from(!faster_first));
                        if verdict != want {
                            kept_slower
                                .push(format!("{means:?} noise {noise} seed {seed}: {verdict:?}"));
                        }
                    }
                }
            }
        }
        // Times of ±5 % leave gaps of 1.1–1.5 % three to four standard
        // errors apart at the last look: a few in a thousand may still
        // rank wrong there (a judge that keeps the first winner it sees
        // ranks about 3 % of these wrong).
        assert!(
            kept_slower.len() <= 18,
            "{} of 9000 trials kept the slower variant, e.g. {:?}",
            kept_slower.len(),
            &kept_slower[..kept_slower.len().min(5)]
        );
    }

    /// Two variants as fast as each other, both faster than the generic
    /// code: either is right, and the trial decides without waiting for
    /// its last look where the times are steady.
    #[test]
    fn of_two_equal_winners_either_is_kept_early() {
        for seed in 0..300u64 {
            let (verdict, turns) = judged(&[1.0, 0.95, 0.95], 0.002, 97, seed);
            let turns: usize = turns.iter().sum();
            assert!(
                matches!(verdict, Verdict::Variant(_)),
                "seed {seed}: {verdict:?}"
            );
            assert!(turns <= 3 * LOOKS[1], "seed {seed}: {turns} turns");
        }
    }

    /// No verdict before every contender has its times; times that are no
    /// time are not samples.
    #[test]
    fn the_verdict_waits_for_every_contender() {
        let mut judge = Judge::new(2);
        for _ in 0..LOOKS[0] {
            judge.add(0, 1.0);
            judge.add(1, 0.5);
        }
        assert_eq!(judge.verdict(), None, "the second variant has no time");
        for bad in [f32::NAN, f32::INFINITY, -1.0, 0.0] {
            judge.add(2, bad);
        }
        assert_eq!(judge.verdict(), None, "no time is a sample");
        for _ in 0..LOOKS[0] {
            judge.add(2, 0.7);
        }
        assert_eq!(judge.verdict(), Some(Verdict::Variant(0)));
        assert_eq!(judge.means(), vec![1.0, 0.5, 0.7]);
        let turns: Vec<usize> = (0..6).map(|_| judge.next()).collect();
        assert_eq!(turns, [0, 1, 2, 0, 1, 2], "in turns");
        let e = estimate(&[1.0, 2.0, 3.0, 4.0, 100.0]);
        assert_eq!(e.mean, 2.5, "the outlier set aside");
    }
}
