//! The switch of one launch site — a queue's launch plan, or a graph's
//! node — from a tiered image's emulated code to its specialized tier:
//! *linking* (a worker links the tier's cubin; the site asks for the link
//! once it has run long enough), *loading* (the linked code loads on the
//! loader thread, which no launch waits for), *switched* (the site runs the
//! specialized code), or *stays emulated* (the link or the load failed: the
//! tier's log says why). Plans and graph nodes both go through
//! [`TierSwitch::poll`]; [`next`] is the state machine itself, without
//! effects, and its tests say every transition.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaContext;

use super::{CodeRef, LoadedModule, ModuleKey, loader};
use crate::bundle::built::tier::{LinkState, TierUp};
use crate::bundle::{BuiltImage, SpecMode};

/// The mode a site that runs `built` reports: a tiered image's emulated
/// code until the site switched.
pub(super) fn running_mode(built: &BuiltImage) -> SpecMode {
    match built.tier {
        Some(_) => SpecMode::Emulated,
        None => built.mode(),
    }
}

/// Whether a new site of `tier` (a queue's plan, a graph node's new values)
/// starts on its specialized code: where that is linked (or its cubin is in
/// this process already) and loaded where the site runs (`in_cache`, by the
/// code's key). Otherwise the site runs the emulated code with a
/// [`TierSwitch`] (its link asked for, or already ready), and the loader
/// thread loads the code — no launch waits for a load, which waits for the
/// device's queued work.
pub(super) fn starts_specialized(
    tier: &TierUp,
    link: &LinkState,
    arch: u32,
    kernel: &str,
    in_cache: impl Fn(&ModuleKey) -> bool,
) -> bool {
    tier.ready_or_cached(link, arch, kernel)
        && CodeRef::of(tier.specialized(), arch, kernel).is_ok_and(|code| in_cache(&code.key))
}

/// What a site sees of its link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Link {
    /// Not linked yet (idle, or queued for a worker).
    Pending,
    Ready,
    Failed,
}

/// What a site sees of the load of the linked code, once it is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Load {
    /// The code is loaded where the site runs already.
    InCache,
    /// Not asked for, or still on the loader thread.
    Pending,
    Loaded,
    Failed,
}

/// What a site does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Nothing yet: keep running emulated.
    Wait,
    /// Ask a worker for the link (then keep running emulated).
    AskForLink,
    /// Look at (or start) the load of the linked code.
    LoadCode,
    /// Run the specialized code from now on.
    Switch,
    /// Run emulated for good (the log says why).
    StayEmulated,
}

/// The state machine: from what the site sees — its link, whether it
/// asked for it already and has run long enough to, and (once linked) its
/// load — what it does. `load` is `None` until the site looked at the
/// load.
pub(super) fn next(link: Link, asked: bool, ran_long_enough: bool, load: Option<Load>) -> Action {
    match (link, load) {
        (Link::Failed, _) => Action::StayEmulated,
        (Link::Pending, _) if !asked && ran_long_enough => Action::AskForLink,
        (Link::Pending, _) => Action::Wait,
        (Link::Ready, None) => Action::LoadCode,
        (Link::Ready, Some(Load::InCache | Load::Loaded)) => Action::Switch,
        (Link::Ready, Some(Load::Pending)) => Action::Wait,
        (Link::Ready, Some(Load::Failed)) => Action::StayEmulated,
    }
}

/// A site's switch: its link, and when it started running emulated.
pub(super) struct TierSwitch {
    link: Arc<LinkState>,
    since: Instant,
    asked: bool,
}

/// What [`TierSwitch::poll`] found.
pub(super) enum Step {
    /// Keep running emulated.
    Wait,
    /// Switch to the specialized code: `Some` where it was just loaded
    /// (for the site's cache to keep), `None` where the cache has it.
    Switch(Option<(ModuleKey, LoadedModule)>),
    /// Run emulated for good: why.
    StayEmulated(String),
}

/// Where a site stands, as [`TierSwitch::poll`] needs it.
pub(super) struct Site<'a> {
    pub(super) tier: &'a Arc<TierUp>,
    pub(super) ctx: &'a Arc<CudaContext>,
    pub(super) arch: u32,
    pub(super) kernel: &'a str,
    /// How long the site runs emulated before it asks for its link (zero:
    /// at once).
    pub(super) ask_after: Duration,
}

impl TierSwitch {
    /// The switch of a site that starts running emulated now.
    pub(super) fn new(link: Arc<LinkState>) -> TierSwitch {
        TierSwitch {
            link,
            since: Instant::now(),
            asked: false,
        }
    }

    /// Whether the link is ready (a graph tells its nodes' state by it).
    pub(super) fn is_linked(&self) -> bool {
        self.link.is_ready()
    }

    /// The link it waits for.
    pub(super) fn link(&self) -> &Arc<LinkState> {
        &self.link
    }

    /// Asks for the link now (a graph does at its capture's end, so that
    /// its first replay need not come first).
    pub(super) fn ask_now(&mut self, tier: &Arc<TierUp>, arch: u32, kernel: &str) {
        self.asked = true;
        tier.ask(&self.link, arch, kernel);
    }

    /// One look at where the switch stands, acting on it: asks for the
    /// link when due, starts or looks at the load of the linked code on
    /// the loader thread (in `loading`, by the code's key: sites waiting
    /// for the same code share its load), and says whether to switch.
    /// `in_cache` tells whether the site's cache has the linked code's
    /// module already.
    pub(super) fn poll(
        &mut self,
        site: &Site<'_>,
        loading: &mut HashMap<ModuleKey, loader::Slot>,
        in_cache: impl Fn(&ModuleKey) -> bool,
    ) -> Step {
        let link = if self.link.is_ready() {
            Link::Ready
        } else if self.link.has_failed() {
            Link::Failed
        } else {
            Link::Pending
        };
        let ran_long_enough = self.since.elapsed() >= site.ask_after;
        let mut action = next(link, self.asked, ran_long_enough, None);
        if action == Action::AskForLink {
            self.asked = true;
            site.tier.ask(&self.link, site.arch, site.kernel);
            action = next(link, self.asked, ran_long_enough, None);
        }
        match action {
            Action::Wait | Action::AskForLink => Step::Wait,
            Action::StayEmulated => Step::StayEmulated("its link failed (the log says why)".into()),
            Action::Switch => Step::Switch(None),
            Action::LoadCode => {
                let specialized = site.tier.specialized();
                let code = match CodeRef::of(specialized, site.arch, site.kernel) {
                    Ok(code) => code,
                    Err(e) => return Step::StayEmulated(e.to_string()),
                };
                let key = code.key;
                let mut failure = String::new();
                let (load, module) = if in_cache(&key) {
                    (Load::InCache, None)
                } else {
                    let mut pending = loading.remove(&key);
                    let polled = loader::poll(&mut pending, site.ctx, code, specialized);
                    if let Some(slot) = pending {
                        loading.insert(key, slot);
                    }
                    match polled {
                        loader::Load::Pending => (Load::Pending, None),
                        loader::Load::Loaded(m) => (Load::Loaded, Some((key, m))),
                        loader::Load::Failed(e) => {
                            failure = e;
                            (Load::Failed, None)
                        }
                    }
                };
                match next(link, self.asked, ran_long_enough, Some(load)) {
                    Action::Switch => Step::Switch(module),
                    Action::StayEmulated => {
                        Step::StayEmulated(format!("its code did not load: {failure}"))
                    }
                    _ => Step::Wait,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every transition of the state machine, written out.
    #[test]
    fn every_transition() {
        use Action::*;
        let table: &[(Link, bool, bool, Option<Load>, Action)] = &[
            // Linking: ask once, when the site ran long enough.
            (Link::Pending, false, false, None, Wait),
            (Link::Pending, false, true, None, AskForLink),
            (Link::Pending, true, true, None, Wait),
            (Link::Pending, true, false, None, Wait),
            // A failed link: emulated for good, whatever else.
            (Link::Failed, false, false, None, StayEmulated),
            (Link::Failed, true, true, None, StayEmulated),
            (Link::Failed, true, true, Some(Load::Loaded), StayEmulated),
            // Linked: load, then switch once loaded (or in the cache).
            (Link::Ready, false, false, None, LoadCode),
            (Link::Ready, true, true, None, LoadCode),
            (Link::Ready, true, true, Some(Load::Pending), Wait),
            (Link::Ready, true, true, Some(Load::Loaded), Switch),
            (Link::Ready, false, false, Some(Load::InCache), Switch),
            (Link::Ready, true, true, Some(Load::Failed), StayEmulated),
        ];
        for &(link, asked, long, load, want) in table {
            assert_eq!(
                next(link, asked, long, load),
                want,
                "{link:?} asked {asked} long enough {long} load {load:?}"
            );
        }
    }

    /// Walks of a site through the machine: it never switches before its
    /// link is ready and its code loaded, never asks twice, and a failure
    /// anywhere ends in emulated code.
    #[test]
    fn walks_through_the_machine() {
        // The link and the load at each look of a walk, and where it ends.
        type Walk<'a> = (&'a [(Link, Option<Load>)], Action);
        let walks: &[Walk] = &[
            (
                &[
                    (Link::Pending, None),
                    (Link::Pending, None),
                    (Link::Ready, Some(Load::Pending)),
                    (Link::Ready, Some(Load::Loaded)),
                ],
                Action::Switch,
            ),
            (
                &[(Link::Pending, None), (Link::Failed, None)],
                Action::StayEmulated,
            ),
            (
                &[
                    (Link::Ready, Some(Load::Pending)),
                    (Link::Ready, Some(Load::Failed)),
                ],
                Action::StayEmulated,
            ),
        ];
        for (walk, end) in walks {
            let mut asked = false;
            let mut asks = 0;
            let mut last = Action::Wait;
            for &(link, load) in walk.iter() {
                let mut a = next(link, asked, true, None);
                if a == Action::AskForLink {
                    asks += 1;
                    asked = true;
                    a = next(link, asked, true, None);
                }
                if a == Action::LoadCode {
                    a = next(link, asked, true, load);
                }
                assert!(
                    a != Action::Switch || (link == Link::Ready && load.is_some()),
                    "switched before linked and loaded"
                );
                last = a;
            }
            assert!(asks <= 1);
            assert_eq!(last, *end);
        }
    }
}
