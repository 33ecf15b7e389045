//! The remote tier in a build without the `remote` feature (a build
//! script's `ptxspec-build`): always off. The same interface as
//! `remote/mod.rs` gives the cubin caches, over types that cannot exist.

use crate::digest::Digest;
use crate::settings::SettingError;

/// No store can be configured: no value of this type exists.
pub(crate) enum Remote {}

/// A lease on a link, which no store hands out here.
pub(crate) enum Lease {}

impl Lease {
    pub(crate) fn store(self, _arch: u32, _cubin: &[u8]) -> bool {
        match self {}
    }
}

/// What asking the store found.
pub(crate) enum Fetched {
    /// Never: there is no store.
    #[allow(dead_code)]
    Cubin(Vec<u8>),
    /// Never: there is no store.
    #[allow(dead_code)]
    Link(Option<Lease>),
}

/// The remote tier: off.
pub(crate) fn tier() -> Result<Option<&'static Remote>, SettingError> {
    Ok(None)
}

pub(crate) fn note(_: Option<&'static Remote>, _: &str) {}

pub(crate) fn connect_ahead(_: &'static Remote) {}

pub(crate) fn note_now(_: Option<&'static Remote>, _: &str) {}

pub(crate) fn ensure_stored(r: &'static Remote, _: &Digest, _: u32, _: &[u8]) -> super::Published {
    match *r {}
}

pub(crate) fn fetch(r: &'static Remote, _: &Digest, _: u32) -> Fetched {
    match *r {}
}

pub(crate) fn peek(r: &'static Remote, _: &Digest, _: u32) -> Option<Vec<u8>> {
    match *r {}
}

pub(crate) fn verdict(r: &'static Remote, _: &Digest, _: u32) -> Option<Vec<u8>> {
    match *r {}
}

pub(crate) fn store_verdict(r: &'static Remote, _: &Digest, _: u32, _: &[u8]) -> bool {
    match *r {}
}

/// A lease on a trial, which no store hands out here.
pub(crate) enum TrialLease {}

impl TrialLease {
    pub(crate) fn share(self, _word: &[u8]) -> bool {
        match self {}
    }
}

/// Whose turn a trial is: never asked, there is no store.
pub(crate) enum TrialTurn {
    /// Never: there is no store.
    #[allow(dead_code)]
    Decided(Vec<u8>),
    /// Never: there is no store.
    #[allow(dead_code)]
    TimeHere(Option<TrialLease>),
}

pub(crate) fn trial_turn(
    r: &'static Remote,
    _: &Digest,
    _: u32,
    _: &dyn Fn() -> bool,
) -> TrialTurn {
    match *r {}
}
