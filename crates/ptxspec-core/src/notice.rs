//! What the library tells its user about without failing: a cache tier
//! turned off, an entry refused. Each distinct message is a `tracing`
//! warning (target `ptxspec`) once per process; where the program installed
//! no `tracing` subscriber, it goes to standard error instead, so that it
//! is never lost.

use std::collections::HashSet;
use std::sync::Mutex;

/// Says `what` once per process (per distinct text).
pub fn once(what: String) {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if said.get_or_insert_with(HashSet::new).insert(what.clone()) {
        tracing::warn!(target: "ptxspec", "{what}");
        if !tracing::dispatcher::has_been_set() {
            eprintln!("ptxspec: {what}");
        }
    }
}
