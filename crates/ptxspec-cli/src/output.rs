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

/// The most bytes of one line of a message that reach the terminal.
const MAX_LINE: usize = 2000;
/// The most lines of one message.
const MAX_LINES: usize = 400;

/// `text` as a message on standard error may show it, whatever input it
/// echoes (a list's line, a path, a value): each control or
/// direction-changing character but line breaks and tabs escaped, as
/// Rust's debug escape writes it (`\0`, `\u{202e}`: nothing reaches the
/// terminal as itself), each line cut at [`MAX_LINE`] bytes and the whole
/// at [`MAX_LINES`] lines, with what was cut said.
pub(crate) fn bounded(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.split('\n');
    for (n, line) in lines.by_ref().enumerate() {
        if n == MAX_LINES {
            out.push_str("\n… (more lines not shown)");
            break;
        }
        if n > 0 {
            out.push('\n');
        }
        let mut shown = 0usize;
        for (at, c) in line.char_indices() {
            if shown >= MAX_LINE {
                out.push_str(&format!("… ({} more bytes)", line.len() - at));
                break;
            }
            let escaped: String = match c {
                '\t' => "\t".into(),
                c if c.is_control() || is_direction_control(c) => c.escape_unicode().to_string(),
                c => c.to_string(),
            };
            shown += escaped.len();
            out.push_str(&escaped);
        }
    }
    out
}

/// Unicode's bidirectional-text controls (which make a terminal show text
/// in another order than it is).
fn is_direction_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Echoes of input are bounded and escaped: a 5 MB line with a NUL and
    /// a direction override comes out as at most a line's bound, escaped;
    /// thousands of lines as the lines' bound; ordinary messages as they are.
    #[test]
    fn echoes_of_input_are_bounded_and_escaped() {
        let huge = format!("{}\0\u{202e}", "x".repeat(5 << 20));
        let shown = bounded(&format!("{huge} y.prop"));
        assert!(shown.len() < MAX_LINE + 100, "{}", shown.len());
        assert!(shown.contains("more bytes"));
        let short = bounded("a\0b\u{202e}c\td");
        assert_eq!(short, "a\\u{0}b\\u{202e}c\td");
        let many = bounded(&"line\n".repeat(10_000));
        assert_eq!(many.lines().count(), MAX_LINES + 1);
        let plain = "file.ptx:3:4: expected ';'\nnote: see here";
        assert_eq!(bounded(plain), plain);
    }
}
