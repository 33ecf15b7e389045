//! The `ptxspec` command line's reports. The binary (`src/main.rs`) parses
//! arguments, calls the libraries and prints; what it prints about images,
//! property files and modules is made here, in [`views`], so that the
//! end-to-end tests can feed the same code damaged input directly.
//!
//! This library is the command line's, not an API: use `ptxspec`,
//! `ptxspec-build` or the `ptxspec` binary.

#![forbid(unsafe_code)]
pub mod views;
