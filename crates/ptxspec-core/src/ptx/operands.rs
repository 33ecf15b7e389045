//! An instruction's operands, split at top-level commas, without allocating
//! for the common few.

use super::Token;

/// A vector that keeps its first `N` elements inline: most instructions'
/// operands fit, and then splitting them allocates nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Small<T: Copy, const N: usize> {
    pub(super) len: usize,
    inline: [T; N],
    heap: Vec<T>,
}

impl<T: Copy, const N: usize> Small<T, N> {
    pub(super) fn new(fill: T) -> Self {
        Small {
            len: 0,
            inline: [fill; N],
            heap: Vec::new(),
        }
    }
    pub(super) fn push(&mut self, v: T) {
        if self.heap.is_empty() && self.len < N {
            self.inline[self.len] = v;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.inline[..self.len]);
            }
            self.heap.push(v);
        }
        self.len += 1;
    }
    pub(super) fn as_slice(&self) -> &[T] {
        if self.heap.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }
}

/// An instruction's operands, split at top-level commas: operand `i` is
/// `ops[i]`, its tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operands {
    pub(super) toks: Small<Token, 16>,
    /// Index in `toks` where each operand starts.
    pub(super) starts: Small<u32, 6>,
}

impl Default for Operands {
    fn default() -> Self {
        Operands {
            toks: Small::new(Token::NONE),
            starts: Small::new(0),
        }
    }
}

impl Operands {
    /// How many operands.
    pub fn len(&self) -> usize {
        self.starts.len
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.starts.len == 0
    }
    /// The tokens of operand `i`.
    pub fn get(&self, i: usize) -> Option<&[Token]> {
        let starts = self.starts.as_slice();
        let toks = self.toks.as_slice();
        let start = *starts.get(i)? as usize;
        let end = starts.get(i + 1).map_or(toks.len(), |&e| e as usize);
        Some(&toks[start..end])
    }
    /// The tokens of the first operand.
    pub fn first(&self) -> Option<&[Token]> {
        self.get(0)
    }
    /// Each operand's tokens.
    pub fn iter(&self) -> impl Iterator<Item = &[Token]> {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

impl std::ops::Index<usize> for Operands {
    type Output = [Token];
    fn index(&self, i: usize) -> &[Token] {
        self.get(i).unwrap_or(&[])
    }
}
