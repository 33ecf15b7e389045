//! Printing: the source with replacements applied. Untouched text is copied
//! as it is, so a module printed with no edits is its input, byte for byte.

use super::Span;

/// Whether appending `next` to `text` would put two characters that are
/// not white space side by side: text joined from pieces of a module (items
/// kept while others between them are dropped, items of several units)
/// must keep tokens apart, or `.address_size 64` and `.global` read as one
/// (found by fuzzing). (Edits inside an item delete whole statements,
/// which end in punctuation.)
pub(crate) fn joins(text: &str, next: &str) -> bool {
    let end = text.chars().next_back();
    let start = next.chars().next();
    matches!((end, start), (Some(a), Some(b)) if !a.is_whitespace() && !b.is_whitespace())
}

/// Appends `piece` of a module's text to `text`, with a line break between
/// them where they would join ([`joins`]).
pub(crate) fn push_apart(text: &mut String, piece: &str) {
    if joins(text, piece) {
        text.push('\n');
    }
    text.push_str(piece);
}

/// Non-overlapping replacements of source ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Edits {
    edits: Vec<(Span, String)>,
    /// Set when an edit was added out of order.
    unsorted: bool,
}

impl Edits {
    pub fn new() -> Self {
        Edits::default()
    }

    /// Replaces `span` with `text` (an empty `text` deletes it).
    pub fn replace(&mut self, span: Span, text: impl Into<String>) {
        if self
            .edits
            .last()
            .is_some_and(|(last, _)| (span.start, span.end) < (last.start, last.end))
        {
            self.unsorted = true;
        }
        self.edits.push((span, text.into()));
    }

    /// Appends `src[span]` with the edits that fall inside it applied.
    /// Edits that overlap — two rewrites of one statement, as two getter
    /// calls that share the statements passing their arguments make (found
    /// by fuzzing) — are the error: the span of the second, with nothing
    /// appended. The same edit made twice is one.
    pub(crate) fn apply_range(
        &mut self,
        src: &str,
        span: Span,
        out: &mut String,
    ) -> Result<(), Span> {
        if self.unsorted {
            self.edits.sort_by_key(|(s, _)| (s.start, s.end));
            self.unsorted = false;
        }
        self.edits.dedup();
        let first = self.edits.partition_point(|(s, _)| s.start < span.start);
        let inside: Vec<&(Span, String)> = self.edits[first..]
            .iter()
            .take_while(|(s, _)| s.end <= span.end)
            .collect();
        let mut at = span.start;
        for (s, _) in &inside {
            if s.start < at {
                return Err(*s);
            }
            at = s.end;
        }
        let mut at = span.start;
        for (s, text) in inside {
            out.push_str(&src[at as usize..s.start as usize]);
            out.push_str(text);
            at = s.end;
        }
        out.push_str(&src[at as usize..span.end as usize]);
        Ok(())
    }

    /// The whole source with the edits applied; overlapping edits are the
    /// error, as for [`apply_range`](Self::apply_range).
    pub(crate) fn apply(&mut self, src: &str) -> Result<String, Span> {
        let mut out = String::with_capacity(src.len());
        self.apply_range(src, Span::new(0, src.len() as u32), &mut out)?;
        Ok(out)
    }
}
