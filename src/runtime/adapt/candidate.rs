//! A variant's link as a graph sees it (`graph/trial.rs`): whether it is
//! done, and the code it made.

use std::sync::{Arc, OnceLock};

use super::Linked;
use crate::runtime::cuda;
use ptxspec_core::digest::Digest;

/// The code linked for a variant before its verdict: what a graph that
/// only replays times its nodes on (`graph/trial.rs`), since no launch of
/// its arguments outside the graph may ever come to time it.
#[derive(Clone)]
pub(in crate::runtime) struct Candidate(pub(super) Arc<OnceLock<Result<Linked, String>>>);

impl Candidate {
    /// Whether its link is done (made or failed).
    pub(in crate::runtime) fn linked(&self) -> bool {
        self.0.get().is_some()
    }

    /// `None` while it links; then the code of each route made, the
    /// first the one a launch's trial would try first (none where the link
    /// failed, or where the fleet's verdict decides — that verdict comes as
    /// the variant's `Pending`).
    pub(in crate::runtime) fn code(&self) -> Option<Vec<cuda::Function>> {
        Some(match self.0.get()? {
            Ok(linked) if linked.fleet.is_none() => {
                linked.made.iter().map(|m| m.function.clone()).collect()
            }
            _ => Vec::new(),
        })
    }

    /// What a graph trial's key takes of this variant: its identity and
    /// the way each of its [`code`](Self::code)'s functions was made, in
    /// that order; `None` while it links, where its link failed or the
    /// fleet decided, or where it has no identity (no verdict is kept for
    /// it).
    pub(in crate::runtime) fn trial_identity(&self) -> Option<(Digest, Vec<&'static str>)> {
        match self.0.get()? {
            Ok(linked) if linked.fleet.is_none() => Some((
                linked.identity?,
                linked.made.iter().map(|m| m.route.kept().word()).collect(),
            )),
            _ => None,
        }
    }

    /// Gives back this process's lease on timing the variant for the fleet,
    /// where it holds one (the release is sent in the background): a graph's
    /// trial decided, and no launch trial of it is under way — a variant
    /// whose arguments only graphs replay would otherwise hold the lease
    /// until the process ends, and the fleet's other processes wait for a
    /// verdict that never comes.
    pub(in crate::runtime) fn give_back_lease(&self) {
        if let Some(Ok(linked)) = self.0.get() {
            drop(
                linked
                    .lease
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take(),
            );
        }
    }
}
