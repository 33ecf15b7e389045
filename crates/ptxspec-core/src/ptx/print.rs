//! Printing: the source with replacements applied. Untouched text is copied
//! as it is, so a module printed with no edits is its input, byte for byte.

use super::Span;

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

    /// Appends `src[span]` with the edits that fall inside it applied. Edits
    /// must not overlap each other or straddle `span`'s ends.
    pub(crate) fn apply_range(&mut self, src: &str, span: Span, out: &mut String) {
        if self.unsorted {
            self.edits.sort_by_key(|(s, _)| (s.start, s.end));
            self.unsorted = false;
        }
        let first = self.edits.partition_point(|(s, _)| s.start < span.start);
        let mut at = span.start;
        for (s, text) in &self.edits[first..] {
            if s.end > span.end {
                break;
            }
            debug_assert!(s.start >= at, "overlapping edits");
            out.push_str(&src[at as usize..s.start as usize]);
            out.push_str(text);
            at = s.end;
        }
        out.push_str(&src[at as usize..span.end as usize]);
    }

    /// The whole source with the edits applied.
    pub(crate) fn apply(&mut self, src: &str) -> String {
        let mut out = String::with_capacity(src.len());
        self.apply_range(src, Span::new(0, src.len() as u32), &mut out);
        out
    }
}
