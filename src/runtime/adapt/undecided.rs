//! The count of variants not yet decided (`Stats::variants_undecided`),
//! kept by a token that each undecided variant's state holds: made with
//! the state, dropped with it, whichever way the variant is decided or
//! dropped.

use std::sync::atomic::Ordering;

/// One variant not yet decided (linking, waiting for the fleet's verdict,
/// or on trial), counted while it lives: `Stats::variants_undecided`.
pub(super) struct Undecided(());

impl Undecided {
    pub(super) fn new() -> Self {
        crate::stats::VARIANTS_UNDECIDED.fetch_add(1, Ordering::Relaxed);
        Undecided(())
    }
}

impl Drop for Undecided {
    fn drop(&mut self) {
        crate::stats::VARIANTS_UNDECIDED.fetch_sub(1, Ordering::Relaxed);
    }
}
