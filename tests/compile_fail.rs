//! What must not compile: each way memory reaches a captured launch — a
//! cudarc slice read or written, a `DeviceBuffer`, a graph returned past a
//! local slice, a slice freed inside the capture's loop — freed while the
//! graph that replays it still exists (issue: a graph replayed freed
//! memory through safe code); and each way safe code could reach freed
//! memory or code around the types — a raw address for a pointer
//! parameter, a capture of the queue's stream that the queue does not
//! know of, a queue over a stream the program keeps, a `VecLayout` of
//! another crate; and a misspelled or mistyped specialization constant
//! named through the typed constants `ptxspec-build` generates. The
//! expected errors are `tests/compile_fail/*.stderr`,
//! written once with `TRYBUILD=overwrite` and reviewed.

#[test]
fn memory_cannot_be_freed_while_a_graph_replays_it() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
