//! The decisions of adaptive arguments, apart from code and the driver
//! ([`Tracker`]): which variant a launch's values match, which argument
//! sets recur long enough to be linked, which arguments keep changing.

use std::time::Instant;

use crate::bundle::AdaptiveArguments;

/// The most argument sets counted at once (the oldest goes).
const CANDIDATES: usize = 8;

/// A parameter the tracker compares: its index among the kernel's
/// parameters, its size, and the values it took so far (up to the policy's
/// bound).
struct Watched {
    param: usize,
    size: usize,
    seen: Vec<Vec<u8>>,
}

/// An argument set launched, not linked yet.
struct Candidate {
    /// The watched arguments' bytes, in `Tracker::watched` order.
    key: Vec<u8>,
    launches: u32,
}

/// The decisions of adaptation, apart from code and the driver: which
/// variant (by its fixed arguments) a launch's values match, which
/// argument sets recur long enough to be linked, which arguments keep
/// changing. A launch's values are given by kernel parameter index.
pub(super) struct Tracker {
    max_variants: usize,
    max_distinct: usize,
    after: std::time::Duration,
    /// The first launch counted. The policy's time runs from here for the
    /// kernel as a whole, not for each set, and recurring sets become
    /// variants in the order they were first launched: which sets become
    /// variants depends on the order of the launches, not on how fast they
    /// came — the ranks of a job that run the same program adapt the same
    /// sets.
    counting_since: Option<Instant>,
    watched: Vec<Watched>,
    candidates: Vec<Candidate>,
    /// Each variant's fixed arguments (parameter, bytes), by parameter.
    variants: Vec<Vec<(usize, Vec<u8>)>>,
    /// Every argument kept changing: only the variants made so far serve.
    stopped: bool,
    /// Reused for each launch's key (no allocation per launch).
    scratch: Vec<u8>,
}

impl Tracker {
    /// A tracker of parameters `watched` (index, size) under `policy`.
    pub(super) fn new(policy: &AdaptiveArguments, watched: &[(usize, usize)]) -> Tracker {
        Tracker {
            max_variants: policy.max_variants,
            max_distinct: policy.max_distinct,
            after: policy.after(),
            counting_since: None,
            watched: watched
                .iter()
                .map(|&(param, size)| Watched {
                    param,
                    size,
                    seen: Vec::new(),
                })
                .collect(),
            candidates: Vec::new(),
            variants: Vec::new(),
            stopped: false,
            scratch: Vec::new(),
        }
    }

    /// Whether every argument kept changing: only the variants made so far
    /// serve.
    pub(super) fn stopped(&self) -> bool {
        self.stopped
    }

    /// Takes `fixed` as a variant at once (a set the tier profile holds
    /// from an earlier process), where it fixes watched parameters only,
    /// each with a value of its size, and the bound allows another.
    pub(super) fn seed(&mut self, fixed: &[(usize, Vec<u8>)]) -> bool {
        let fits = !fixed.is_empty()
            && fixed.iter().all(|(param, bytes)| {
                self.watched
                    .iter()
                    .any(|w| w.param == *param && w.size == bytes.len())
            });
        if !fits
            || self.variants.len() >= self.max_variants
            || self.variants.iter().any(|v| v.as_slice() == fixed)
        {
            return false;
        }
        self.variants.push(fixed.to_vec());
        true
    }

    /// The launch's values of the watched parameters, as a variant's fixed
    /// arguments; `None` where one is not a value of its size.
    pub(super) fn watched_values<'v>(
        &self,
        value: impl Fn(usize) -> Option<&'v [u8]>,
    ) -> Option<Vec<(usize, Vec<u8>)>> {
        self.watched
            .iter()
            .map(|w| {
                let bytes = value(w.param).filter(|b| b.len() == w.size)?;
                Some((w.param, bytes.to_vec()))
            })
            .collect()
    }

    /// The variant whose fixed arguments all equal the launch's values.
    #[inline]
    pub(super) fn matching<'v>(&self, value: impl Fn(usize) -> Option<&'v [u8]>) -> Option<usize> {
        self.variants.iter().position(|fixed| {
            fixed
                .iter()
                .all(|(param, bytes)| value(*param) == Some(bytes.as_slice()))
        })
    }

    /// Counts a launch that matched no variant, at `now`; once the kernel
    /// has been launched for the policy's time, a new variant (its fixed
    /// arguments, to link) of the first-seen argument set that has recurred
    /// (launched twice) — this launch's or an earlier one's. An argument that took
    /// more than the policy's values is no longer watched; with none left,
    /// nothing more is counted.
    pub(super) fn count<'v>(
        &mut self,
        value: impl Fn(usize) -> Option<&'v [u8]>,
        now: Instant,
    ) -> Option<Vec<(usize, Vec<u8>)>> {
        if self.stopped || self.variants.len() >= self.max_variants {
            return None;
        }
        self.scratch.clear();
        let mut i = 0;
        while i < self.watched.len() {
            let w = &mut self.watched[i];
            let bytes = value(w.param).filter(|b| b.len() == w.size)?;
            if !w.seen.iter().any(|s| s == bytes) {
                if w.seen.len() >= self.max_distinct {
                    // It keeps changing: no longer watched; the sets
                    // counted with it no longer compare.
                    tracing::debug!(
                        target: "ptxspec::adapt",
                        param = w.param,
                        "argument keeps changing: no longer adapted to"
                    );
                    self.watched.remove(i);
                    self.candidates.clear();
                    if self.watched.is_empty() {
                        self.stopped = true;
                        return None;
                    }
                    self.scratch.clear();
                    i = 0;
                    continue;
                }
                w.seen.push(bytes.to_vec());
            }
            self.scratch.extend_from_slice(bytes);
            i += 1;
        }
        let at = match self.candidates.iter().position(|c| c.key == self.scratch) {
            Some(at) => at,
            None => {
                if self.candidates.len() >= CANDIDATES {
                    self.candidates.remove(0);
                }
                self.candidates.push(Candidate {
                    key: self.scratch.clone(),
                    launches: 0,
                });
                self.candidates.len() - 1
            }
        };
        let since = *self.counting_since.get_or_insert(now);
        self.candidates[at].launches += 1;
        if now.duration_since(since) < self.after {
            return None;
        }
        // The set first seen of those launched twice, not this launch's:
        // where the policy's time ends within a step of the program, the
        // sets then take their turns in the order the program first
        // launched them, wherever in the step it ended.
        let at = self.candidates.iter().position(|c| c.launches >= 2)?;
        let key = self.candidates.remove(at).key;
        let mut fixed = Vec::new();
        let mut from = 0;
        for w in &self.watched {
            fixed.push((w.param, key[from..from + w.size].to_vec()));
            from += w.size;
        }
        self.variants.push(fixed.clone());
        Some(fixed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn policy(after_ms: u64) -> AdaptiveArguments {
        AdaptiveArguments::all().with_after(Duration::from_millis(after_ms))
    }

    /// Values by parameter from a list of (parameter, value) pairs.
    fn values(pairs: &[(usize, u32)]) -> Vec<(usize, [u8; 4])> {
        pairs.iter().map(|&(p, v)| (p, v.to_le_bytes())).collect()
    }

    /// A seeded xorshift generator: each call a number below its argument.
    fn below(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        }
    }

    fn lookup<'v>(v: &'v [(usize, [u8; 4])]) -> impl Fn(usize) -> Option<&'v [u8]> + Copy {
        move |param| v.iter().find(|(p, _)| *p == param).map(|(_, b)| &b[..])
    }

    #[test]
    fn a_set_that_recurs_is_linked_once_after_its_time() {
        let mut t = Tracker::new(&policy(5), &[(3, 4), (4, 4)]);
        let v = values(&[(3, 16), (4, 1)]);
        let t0 = Instant::now();
        assert_eq!(t.count(lookup(&v), t0), None, "once is no recurrence");
        assert_eq!(
            t.count(lookup(&v), t0 + Duration::from_millis(1)),
            None,
            "not yet launched for its time"
        );
        let fixed = t.count(lookup(&v), t0 + Duration::from_millis(6)).unwrap();
        assert_eq!(
            fixed,
            vec![
                (3, 16u32.to_le_bytes().to_vec()),
                (4, 1u32.to_le_bytes().to_vec())
            ]
        );
        assert_eq!(t.matching(lookup(&v)), Some(0));
        let other = values(&[(3, 16), (4, 2)]);
        assert_eq!(t.matching(lookup(&other)), None, "one value differs");
    }

    /// A generated family of launches (three parameters, small domains,
    /// time advancing): a variant matched always has every fixed argument
    /// equal to the launch's, and no more variants are made than the
    /// bound.
    #[test]
    fn a_variant_never_serves_other_values() {
        let mut next = below(0x9E37_79B9_7F4A_7C15);
        for max_variants in [1, 2, 4] {
            let p = policy(2).with_max_variants(max_variants);
            let mut t = Tracker::new(&p, &[(0, 4), (2, 4), (5, 4)]);
            let t0 = Instant::now();
            let mut made = 0;
            for launch in 0..5_000u64 {
                let v = values(&[(0, next(3) as u32), (2, next(2) as u32 * 7), (5, 11)]);
                let now = t0 + Duration::from_millis(launch);
                match t.matching(lookup(&v)) {
                    Some(i) => {
                        for (param, bytes) in &t.variants[i] {
                            assert_eq!(lookup(&v)(*param), Some(bytes.as_slice()));
                        }
                    }
                    None => made += usize::from(t.count(lookup(&v), now).is_some()),
                }
            }
            assert_eq!(made, max_variants, "variants made, bound {max_variants}");
        }
    }

    /// Which argument sets become variants depends on the launches alone,
    /// not on how fast they came: the same sequence of launches (a step of
    /// a program: six sets, each launched once a step, four variants
    /// allowed — which four must not be a race) replayed at many speeds and
    /// with jitter around the policy's time makes the same variants in the
    /// same order — so the ranks of a job that run the same program adapt
    /// the same sets (issue 68).
    #[test]
    fn the_variants_made_depend_on_the_launches_not_their_speed() {
        let sets: Vec<u32> = (0..6).collect();
        let mut jitter = below(0x2545_F491_4F6C_DD1D);
        let mut outcomes = std::collections::BTreeSet::new();
        for step_us in [500u64, 900, 1_000, 1_100, 2_400, 2_600, 5_000, 20_000] {
            for _ in 0..4 {
                let mut t = Tracker::new(&policy(5).with_max_variants(4), &[(0, 4)]);
                let t0 = Instant::now();
                let mut made = Vec::new();
                for step in 0..40u64 {
                    for (i, &set) in sets.iter().enumerate() {
                        let v = values(&[(0, set)]);
                        // Monotonic, as one thread's launches are.
                        let slot = step_us / 16;
                        let us = step * step_us + i as u64 * slot + jitter(slot);
                        let now = t0 + Duration::from_micros(us);
                        if t.matching(lookup(&v)).is_none()
                            && let Some(fixed) = t.count(lookup(&v), now)
                        {
                            made.push(fixed);
                        }
                    }
                }
                outcomes.insert(made);
            }
        }
        assert_eq!(outcomes.len(), 1, "{outcomes:?}");
        assert!(outcomes.iter().all(|made| made.len() == 4), "{outcomes:?}");
    }

    /// An argument that takes more values than the bound stops being
    /// watched; the others still adapt; with every argument dropped, no
    /// launch is counted any more.
    #[test]
    fn an_argument_that_keeps_changing_is_no_longer_watched() {
        let p = policy(0).with_max_distinct(4);
        let mut t = Tracker::new(&p, &[(0, 4), (1, 4)]);
        let t0 = Instant::now();
        let mut fixed = None;
        for i in 0..12u32 {
            let v = values(&[(0, i), (1, 9)]);
            if let Some(f) = t.count(lookup(&v), t0) {
                fixed = Some(f);
                break;
            }
        }
        assert_eq!(
            fixed,
            Some(vec![(1, 9u32.to_le_bytes().to_vec())]),
            "the changing argument left out"
        );
        let mut t = Tracker::new(&p, &[(0, 4)]);
        for i in 0..100u32 {
            assert_eq!(t.count(lookup(&values(&[(0, i)])), t0), None);
        }
        assert!(t.stopped);
        // Recurring now: nothing is counted any more.
        for _ in 0..10 {
            assert_eq!(t.count(lookup(&values(&[(0, 1)])), t0), None);
        }
    }

    /// A set from the tier profile is a variant at once where it fixes
    /// watched parameters with values of their sizes, within the bound,
    /// once; launches then match it without being counted.
    #[test]
    fn sets_of_an_earlier_process_are_variants_at_once() {
        let p = policy(3_600_000).with_max_variants(2);
        let mut t = Tracker::new(&p, &[(3, 4), (4, 4)]);
        let set =
            |a: u32, b: u32| vec![(3, a.to_le_bytes().to_vec()), (4, b.to_le_bytes().to_vec())];
        assert!(!t.seed(&[(5, vec![0; 4])]), "not a watched parameter");
        assert!(!t.seed(&[(3, vec![0; 2])]), "not its size");
        assert!(!t.seed(&[]), "nothing fixed");
        assert!(t.seed(&set(16, 1)));
        assert!(!t.seed(&set(16, 1)), "once");
        assert!(t.seed(&set(32, 1)));
        assert!(!t.seed(&set(64, 1)), "the bound");
        let v = values(&[(3, 32), (4, 1)]);
        assert_eq!(t.matching(lookup(&v)), Some(1));
    }

    /// A watched argument that is not a value of its size (a buffer where a
    /// value was, another size) is not counted.
    #[test]
    fn launches_without_the_watched_values_are_not_counted() {
        let mut t = Tracker::new(&policy(0), &[(0, 4)]);
        let t0 = Instant::now();
        let short = [(0usize, [1u8, 0])];
        let short_lookup =
            |param: usize| short.iter().find(|(p, _)| *p == param).map(|(_, b)| &b[..]);
        for _ in 0..5 {
            assert_eq!(t.count(short_lookup, t0), None);
            assert_eq!(t.count(|_| None, t0), None);
        }
        assert!(t.candidates.is_empty());
    }
}
