//! What the command prints on standard output: `out!` and `outln!`, which
//! end the program quietly when the reader has gone.

/// Prints to stdout like `print!`, but a reader that has gone (`| head`)
/// ends the program quietly instead of a panic; another write error is the
/// command's error.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::emit(&format!($($arg)*))?
    };
}

/// `out!` with a newline.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::emit(&format!("{}\n", format_args!($($arg)*)))?
    };
}

/// Writes `text` to stdout; see [`out!`].
pub(crate) fn emit(text: &str) -> Result<(), String> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(format!("writing to stdout: {e}")),
    }
}
