//! One module per subcommand: each reads its inputs, calls the libraries
//! and says what it did.

pub(crate) mod aspect_filter;
pub(crate) mod cache;
pub(crate) mod choices;
pub(crate) mod header;
pub(crate) mod inspect;
pub(crate) mod post_link;
pub(crate) mod specialize;
