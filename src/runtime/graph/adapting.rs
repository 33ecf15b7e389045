//! How a graph's nodes come to run variants of adaptive arguments.
//!
//! A node captured while its arguments' variant was linked or timed waits
//! for that variant's verdict ([`Graph::poll_adapt`]): a program that also
//! launches those arguments outside graphs times the variant there. A
//! program that only replays graphs never launches them outside, so the
//! graph decides for itself ([`GraphTrial`]): once every waiting node's
//! variant is linked, its replays are timed in turns of a few replays each
//! — the nodes on their variants (each way a variant was made: a contender
//! per route) against the graph as captured, a turn's first replay untimed
//! and each other between two CUDA events — and the launch trials' judge
//! keeps the fastest configuration where it is faster beyond the noise,
//! else the graph as captured. A graph therefore adapts within the judge's
//! last look (120 timed replays per contender, in blocks) after its links.
//!
//! Whole replays, not nodes, are timed: a replay is what the program waits
//! for, and one node's time inside a replay cannot be told from the others'
//! without events in the graph. The verdict is the graph's own, not a
//! verdict on any node's variant: launches never take it (a variant faster
//! within one graph is not known to be faster alone). It is recorded in the
//! tier profile and shared through the fleet's store under the digest of
//! what was on trial (each node's place and variant, the ways it was made),
//! and the same graph in a later process, or on another host, keeps that
//! contender at once, timing nothing.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use ptxspec_core::digest::{Digest, KeyEncoder};

use super::cuda::Function;
use super::{Graph, Node};
use crate::error::Error;
use crate::runtime::adapt::{Trial, Verdict};

/// A trial of a graph's waiting nodes on their variants against the graph
/// as captured.
pub(super) struct GraphTrial {
    /// Each node on trial: its index and its code per contender (0: as
    /// captured; `r`: its variant made the `r`-th way, or its last where it
    /// was made fewer ways).
    nodes: Vec<(usize, Vec<Function>)>,
    trial: Trial<()>,
    /// The contender whose code the nodes hold now.
    holding: usize,
    /// Replays left in the holding contender's block, [`BLOCK`] where
    /// none of it ran: the first of a block runs untimed.
    left: usize,
    /// What the verdict is recorded under in the tier profile, where it is
    /// to be (not where the profile gave it), and whether it is shared with
    /// the fleet too (a verdict of these replays).
    record: Option<(Digest, bool)>,
}

/// The fleet's answer to a graph's question for an earlier trial's
/// verdict, set by the background thread: the contender it kept, or none.
pub(super) type FleetAnswer = Arc<OnceLock<Option<usize>>>;

/// What an earlier trial of a graph kept, as [`Graph::earlier_verdict`]
/// finds it.
enum Earlier {
    /// The fleet is asked; its answer is not in yet.
    Asking,
    /// This contender, kept by a trial that `Source` tells of.
    Kept(usize, Source),
    /// None known: the graph's replays are timed.
    None,
}

/// Where an earlier trial's verdict comes from.
#[derive(Clone, Copy)]
enum Source {
    Profile,
    Fleet,
}

impl Source {
    fn said(self) -> &'static str {
        match self {
            Source::Profile => "the tier profile",
            Source::Fleet => "the fleet",
        }
    }
}

/// Replays a contender holds the graph for, in turn: the first untimed,
/// the others timed. Switching a graph's nodes between contenders on every
/// replay times each one just after a change of the code and parameters
/// every node runs — caches and the uploaded node parameters cold — which
/// is not how the kept code will run; a served graph kept slower code that
/// way. A block's first replay takes the switch's cost, the rest are timed
/// as the code runs once kept. (The switch itself, the nodes' parameters
/// set on the host, is made after the replay before, while the GPU runs
/// it.)
const BLOCK: usize = 4;

impl GraphTrial {
    /// Whether node `i` is on trial.
    pub(super) fn has(&self, i: usize) -> bool {
        self.nodes.iter().any(|(n, _)| *n == i)
    }

    /// The events of a turn's `slot`, to record before and after its
    /// replay.
    pub(super) fn events(
        &self,
        slot: usize,
    ) -> Option<(&cudarc::driver::CudaEvent, &cudarc::driver::CudaEvent)> {
        self.trial.events(slot)
    }

    /// Every function the trial holds (kept loaded while replays that ran
    /// them may be in flight).
    pub(super) fn into_functions(self) -> Vec<Function> {
        self.nodes.into_iter().flat_map(|(_, code)| code).collect()
    }
}

impl Graph<'_> {
    /// Looks at the waiting nodes: a verdict from launches switches a node
    /// (`poll_adapt`); a trial under way takes its finished replays' times
    /// and, at its verdict, leaves the nodes on the configuration kept; with
    /// none under way, one starts once every waiting node's variant is
    /// linked.
    pub(super) fn poll_adapting(&mut self) -> Result<(), Error> {
        for i in 0..self.nodes.len() {
            if !self.trial.as_ref().is_some_and(|t| t.has(i)) {
                self.poll_adapt(i);
            }
        }
        match &mut self.trial {
            Some(t) => {
                let verdict = t.trial.harvest()?;
                if let Some(verdict) = verdict {
                    self.end_trial(verdict)?;
                }
                Ok(())
            }
            None => self.start_trial(),
        }
    }

    /// Starts a trial of the waiting nodes whose variants were linked here,
    /// once none is still linking.
    fn start_trial(&mut self) -> Result<(), Error> {
        if self.trials_over {
            return Ok(());
        }
        let waiting = || {
            self.nodes
                .iter()
                .filter(|n| n.adapt.is_some())
                .filter_map(|n| n.candidate.as_ref())
        };
        // The trial waits for every link (looked at on each replay until
        // then: without copying any code).
        if !waiting().all(|c| c.linked()) {
            return Ok(());
        }
        let mut on_trial: Vec<(usize, Vec<Function>)> = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let (Some(_), Some(candidate)) = (&node.adapt, &node.candidate) else {
                continue;
            };
            let Some(code) = candidate.code() else {
                return Ok(());
            };
            if !code.is_empty() {
                let mut all = vec![node.function.clone()];
                all.extend(code);
                on_trial.push((i, all));
            }
        }
        let contenders = on_trial.iter().map(|(_, c)| c.len()).max().unwrap_or(0);
        if contenders < 2 {
            // Every link is done and none gave code to time: no trial can
            // start later either (a node's candidate comes with its
            // capture), so the replays stop looking.
            self.trials_over = true;
            return Ok(());
        }
        let key = trial_key(&self.nodes, &on_trial, contenders);
        let earlier = match &key {
            Some(key) => self.earlier_verdict(key, contenders),
            None => Earlier::None,
        };
        if let Earlier::Asking = earlier {
            return Ok(());
        }
        let trial = Trial::new(&self.ctx, vec![(); contenders - 1])?;
        self.trial = Some(GraphTrial {
            nodes: on_trial,
            trial,
            holding: 0,
            left: 0,
            // A verdict of this process's replays goes to the profile and
            // the fleet; the fleet's, to the profile.
            record: key.and_then(|key| match earlier {
                Earlier::None => Some((key, true)),
                Earlier::Kept(_, Source::Fleet) => Some((key, false)),
                Earlier::Kept(_, Source::Profile) | Earlier::Asking => None,
            }),
        });
        if let Earlier::Kept(kept, source) = earlier {
            tracing::info!(
                target: "ptxspec::adapt",
                contenders,
                kept,
                by = source.said(),
                "graph trial: an earlier trial's verdict, nothing timed"
            );
            return self.end_trial(match kept {
                0 => Verdict::Generic,
                r => Verdict::Variant(r - 1),
            });
        }
        tracing::debug!(
            target: "ptxspec::adapt",
            contenders,
            "graph: its replays timed, the nodes on their variants against the graph as captured"
        );
        Ok(())
    }

    /// What an earlier trial of the same graph (`key`) kept: the tier
    /// profile's line, else the fleet's — asked once per key, on the
    /// background thread (a request is no work for a replay): `Asking`
    /// until it answers, the next replays looking again.
    fn earlier_verdict(&mut self, key: &Digest, contenders: usize) -> Earlier {
        // Asked already: the profile was read for this key then (the
        // replays that wait for the answer do not read it again).
        let asked = match &self.fleet_asked {
            Some((asked_key, cell)) if asked_key == key => Arc::clone(cell),
            _ => {
                if let Some(kept) = crate::bundle::built::tier::profiled_graph_verdict(key)
                    .filter(|&kept| kept < contenders)
                {
                    return Earlier::Kept(kept, Source::Profile);
                }
                if !ptxspec_core::lto::fleet_configured() {
                    return Earlier::None;
                }
                let cell = Arc::new(OnceLock::new());
                self.fleet_asked = Some((*key, Arc::clone(&cell)));
                let (key, arch, answer) = (*key, self.arch, Arc::clone(&cell));
                ptxspec_core::lto::in_background(move || {
                    // Answered even where the look-up panics (a bug): the
                    // graph would otherwise wait for it forever, untimed.
                    let found =
                        std::panic::catch_unwind(|| ptxspec_core::lto::graph_verdict(&key, arch));
                    let _ = answer.set(found.ok().flatten());
                });
                cell
            }
        };
        match asked.get() {
            None => Earlier::Asking,
            Some(Some(kept)) if *kept < contenders => Earlier::Kept(*kept, Source::Fleet),
            Some(_) => Earlier::None,
        }
    }

    /// After a replay was submitted (`Graph::launch`): the adapting nodes
    /// and the trial looked at — a verdict's code or the next block's
    /// contender set in the executable graph for the next replay, while
    /// the GPU runs this one. The replay ran: an error here is said, and
    /// the graph stops adapting with its nodes on the code they were
    /// captured with (each node's code, any contender's, is right for its
    /// values; only its speed was in question).
    pub(super) fn adapt_for_the_next_replay(&mut self) {
        let result = match self.adapting > 0 {
            true => self.poll_adapting(),
            false => Ok(()),
        }
        .and_then(|()| self.next_block());
        if let Err(e) = result {
            tracing::warn!(
                target: "ptxspec::adapt",
                error = %e,
                "a graph's trial failed after a replay; the graph stays as captured"
            );
            self.trials_over = true;
            if let Err(e) = self.abandon_trial() {
                tracing::warn!(
                    target: "ptxspec::adapt",
                    error = %e,
                    "a graph's nodes could not be set back to their captured code"
                );
            }
            self.stop_waiting();
        }
    }

    /// No node waits for a variant any more (its graph stopped adapting):
    /// [`GraphNode::awaits_variant`](super::GraphNode::awaits_variant) says
    /// so, the replays no longer look, and the fleet's leases held for the
    /// nodes' trials go back (their other processes time for themselves).
    fn stop_waiting(&mut self) {
        for node in &mut self.nodes {
            if node.adapt.take().is_some()
                && let Some(candidate) = &node.candidate
            {
                candidate.give_back_lease();
            }
        }
        self.adapting = 0;
    }

    /// Where the trial's block ended: the next contender's code set in the
    /// executable graph, its block's first replay to run untimed.
    fn next_block(&mut self) -> Result<(), Error> {
        let Some(t) = &mut self.trial else {
            return Ok(());
        };
        if t.left > 0 {
            return Ok(());
        }
        let c = t.trial.next_contender();
        t.left = BLOCK;
        if t.holding != c {
            self.hold(c)?;
        }
        Ok(())
    }

    /// The next replay's turn of the trial, where one is under way and a
    /// pair of events is free: the slot of the events to record around the
    /// replay ([`GraphTrial::events`]). A block's contender is set after
    /// the replay before it (`next_block`), or here where none was (the
    /// graph's first replay, an update's trial).
    pub(super) fn trial_turn(&mut self) -> Result<Option<usize>, Error> {
        self.next_block()?;
        let Some(t) = &mut self.trial else {
            return Ok(None);
        };
        if t.left == BLOCK {
            // The block's first replay, untimed.
            t.left -= 1;
            return Ok(None);
        }
        let c = t.holding;
        let Some(slot) = t.trial.slot_for(c) else {
            // Every pair of events in flight: this replay untimed.
            return Ok(None);
        };
        t.left -= 1;
        crate::stats::TIMED_REPLAYS.fetch_add(1, Ordering::Relaxed);
        Ok(Some(slot))
    }

    /// Sets every node on trial to contender `c`'s code.
    fn hold(&mut self, c: usize) -> Result<(), Error> {
        let Some(t) = self.trial.take() else {
            return Ok(());
        };
        let mut result = Ok(());
        for (i, code) in &t.nodes {
            let Some(f) = code.get(c).or_else(|| code.last()) else {
                continue;
            };
            self.nodes[*i].function = f.clone();
            if let Err(e) = self.set_params(*i, true) {
                result = Err(e);
                break;
            }
        }
        self.trial = Some(GraphTrial { holding: c, ..t });
        result
    }

    /// Leaves the nodes on the configuration `verdict` kept, and no longer
    /// waiting.
    fn end_trial(&mut self, verdict: Verdict) -> Result<(), Error> {
        let kept = match verdict {
            Verdict::Variant(v) => v + 1,
            Verdict::Generic => 0,
        };
        let (means, record) = self
            .trial
            .as_ref()
            .map(|t| (t.trial.means(), t.record))
            .unwrap_or_default();
        self.hold(kept)?;
        if let Some((key, share)) = record {
            let arch = self.arch;
            ptxspec_core::lto::in_background(move || {
                crate::bundle::built::tier::record_graph_verdict(key, kept);
                if share {
                    ptxspec_core::lto::share_graph_verdict(&key, arch, kept);
                }
            });
        }
        let Some(t) = self.trial.take() else {
            return Ok(());
        };
        self.code_changed = true;
        let count = t.nodes.len() as u64;
        for (i, _) in &t.nodes {
            if self.nodes[*i].adapt.take().is_some() {
                self.adapting -= 1;
            }
            if let Some(candidate) = &self.nodes[*i].candidate {
                candidate.give_back_lease();
            }
        }
        let counter = match kept {
            0 => &crate::stats::VARIANTS_NOT_FASTER,
            _ => &crate::stats::ADAPTED_GRAPH_NODES,
        };
        counter.fetch_add(count, Ordering::Relaxed);
        tracing::info!(
            target: "ptxspec::adapt",
            nodes = count,
            kept = if kept == 0 { "the graph as captured" } else { "the nodes' variants" },
            captured_ms = means.first().copied().unwrap_or(f32::NAN),
            variants_ms = ?means.get(1..).unwrap_or_default(),
            "graph trial decided"
        );
        // Replays already queued may run any contender's code: it stays
        // loaded with the graph.
        self._adapted.extend(t.into_functions());
        Ok(())
    }

    /// Node `i`'s switch to the variant of adaptive arguments linked for
    /// it, looked at: the node runs it once its launches' trial (or the
    /// fleet) kept it — the graph keeps it loaded; a variant not kept, or
    /// a link that failed, leaves the node's code as it is.
    fn poll_adapt(&mut self, i: usize) {
        let Some(pending) = &self.nodes[i].adapt else {
            return;
        };
        let Some(done) = pending.get() else {
            return;
        };
        let done = done.clone();
        self.nodes[i].adapt = None;
        self.adapting -= 1;
        let Ok(variant) = done else {
            return;
        };
        let old = std::mem::replace(&mut self.nodes[i].function, variant.clone());
        if self.set_params(i, true).is_err() {
            self.nodes[i].function = old;
            return;
        }
        self._adapted.push(variant);
        self.code_changed = true;
        crate::stats::ADAPTED_GRAPH_NODES.fetch_add(1, Ordering::Relaxed);
        // Replays already queued may run the old function: it stays
        // loaded (its module is in the graph's cache, or a variant kept).
        self._adapted.push(old);
    }

    /// Ends a trial under way with its nodes on the code they were
    /// captured with (node `changed` is getting other code: its variant
    /// was made for its old values); the other nodes wait for the next.
    pub(super) fn abandon_trial(&mut self) -> Result<(), Error> {
        if self.trial.is_some() {
            self.hold(0)?;
        }
        if let Some(t) = self.trial.take() {
            self._adapted.extend(t.into_functions());
        }
        Ok(())
    }
}

/// The digest a graph trial's verdict is kept under: the number of
/// contenders, then each node on trial — its place in the graph, its
/// variant's identity and the ways its code was made, in the contenders'
/// order. `None` where a node's variant has no identity (no verdict is
/// kept for it).
fn trial_key(
    nodes: &[Node],
    on_trial: &[(usize, Vec<Function>)],
    contenders: usize,
) -> Option<Digest> {
    let mut key = KeyEncoder::new("ptxspec graph trial v1");
    key.u64(contenders as u64);
    for (i, _) in on_trial {
        let (identity, routes) = nodes.get(*i)?.candidate.as_ref()?.trial_identity()?;
        key.u64(*i as u64)
            .digest_field(&identity)
            .list(routes.iter().map(|r| r.as_bytes()));
    }
    Some(Digest::of(key.encoded()))
}
