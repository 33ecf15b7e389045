//! A panic of a dependency's parser on hostile input, caught and turned
//! into an error by the one call that runs the parser — without the panic
//! hook's message on standard error, which would read as a crash.
//!
//! The process's hook is wrapped once, when first needed: the wrapper says
//! nothing for a panic on a thread inside [`catch`], and hands every other
//! panic to the hook that was there before. (A program that sets its own
//! hook later replaces the wrapper; such panics are then printed, and
//! still caught.)

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Whether this thread is inside [`catch`].
    static CATCHING: Cell<bool> = const { Cell::new(false) };
}

/// `f`'s result, or the panic's message where it panicked.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static WRAP: Once = Once::new();
    WRAP.call_once(|| {
        let before = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(Cell::get) {
                before(info);
            }
        }));
    });
    let was = CATCHING.with(|c| c.replace(true));
    // Unwind safety: `f` owns or borrows only what its caller gives it,
    // and the caller discards all of it on a panic (an error is returned).
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    result.map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "it panicked".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_an_error_with_its_message() {
        assert_eq!(catch(|| 7), Ok(7));
        assert_eq!(
            catch(|| -> u8 { panic!("bad operand") }),
            Err("bad operand".into())
        );
        let n = 3;
        assert_eq!(
            catch(|| -> u8 { panic!("{n} bad operands") }),
            Err("3 bad operands".into())
        );
        assert_eq!(catch(|| -> u8 { panic!() }), Err("explicit panic".into()));
    }
}
