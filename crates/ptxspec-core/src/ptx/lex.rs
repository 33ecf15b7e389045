//! PTX tokens. The lexer works on bytes, allocates nothing, and yields
//! tokens as byte ranges of the source; comments and white space are skipped
//! (they stay in the source, which is what the printer copies).

/// What a token is. Its text is `&src[start..end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// One punctuation byte: `{ } ( ) [ ] ; , : + - @ ! < > = |` and others.
    /// (First, so that `Token::NONE` is all zero bytes and arrays of it
    /// are filled by zeroing.)
    Punct(u8),
    /// An identifier or opcode, with any `.modifier` suffixes attached
    /// (`ld.param.u64`, `%rd1`, `$str$1`, `%tid.x`, `_Z3foov`).
    Word,
    /// A directive or type: `.reg`, `.b32`, `.entry`.
    Directive,
    /// A number: `42`, `0x1F`, `0f3F800000`, `0d4000000000000000`, `1.5`.
    Number,
    /// A string literal, quotes included.
    Str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// One token: its kind and its byte range in the source.
pub struct Token {
    /// What it is.
    pub kind: TokenKind,
    /// Its first byte in the source.
    pub start: u32,
    /// One past its last byte.
    pub end: u32,
}

impl Token {
    /// A placeholder (an empty punctuation token at offset 0).
    pub(crate) const NONE: Token = Token {
        kind: TokenKind::Punct(0),
        start: 0,
        end: 0,
    };

    /// Its text in `src` (the source it was lexed from).
    pub fn text<'a>(&self, src: &'a str) -> &'a str {
        &src[self.start as usize..self.end as usize]
    }
    /// Whether it is the punctuation byte `p`.
    pub fn is(&self, p: u8) -> bool {
        self.kind == TokenKind::Punct(p)
    }
}

/// A byte the lexer cannot start a token with, or an unterminated comment or
/// string, at this byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LexError {
    pub offset: u32,
    pub what: &'static str,
}

/// Iterator over the tokens of `src[pos..end]`.
pub(crate) struct Lexer<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
}

/// Byte classes, looked up rather than compared one by one.
const SPACE: u8 = 1;
const IDENT_START: u8 = 2;
const IDENT_CONTINUE: u8 = 4;
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
            t[c] |= SPACE;
        }
        if b.is_ascii_alphabetic() || b == b'_' || b == b'$' || b == b'%' {
            t[c] |= IDENT_START;
        }
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'$' {
            t[c] |= IDENT_CONTINUE;
        }
        c += 1;
    }
    t
};

/// White space as the lexer skips it (form feed and vertical tab included).
pub(crate) fn is_space(b: u8) -> bool {
    CLASS[b as usize] & SPACE != 0
}

/// The first offset at or after `pos` in `b` that is not white space.
pub(crate) fn skip_space(b: &[u8], mut pos: usize) -> usize {
    while pos < b.len() && is_space(b[pos]) {
        pos += 1;
    }
    pos
}

fn is_ident_start(b: u8) -> bool {
    CLASS[b as usize] & IDENT_START != 0
}
pub(crate) fn is_ident_continue(b: u8) -> bool {
    CLASS[b as usize] & IDENT_CONTINUE != 0
}

/// Byte offsets where `word` stands in `text` as a whole identifier: no
/// identifier character right before or after it.
pub(crate) fn word_positions<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let b = text.as_bytes();
    memchr::memmem::find_iter(b, word.as_bytes()).filter(move |&i| {
        let end = i + word.len();
        (i == 0 || !is_ident_continue(b[i - 1])) && (end >= b.len() || !is_ident_continue(b[end]))
    })
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Self {
        Lexer {
            bytes: src.as_bytes(),
            pos: 0,
            end: src.len(),
        }
    }

    /// Lexes only `src[start..end]` (offsets stay relative to `src`).
    pub fn range(src: &'a str, start: u32, end: u32) -> Self {
        Lexer {
            bytes: src.as_bytes(),
            pos: start as usize,
            end: end as usize,
        }
    }

    /// Goes on from byte `pos` (forward, within the range), after a caller
    /// looked at the bytes up to it itself.
    pub(crate) fn advance_to(&mut self, pos: u32) {
        self.pos = (pos as usize).clamp(self.pos, self.end);
    }

    /// Skips white space and comments.
    fn skip_trivia(&mut self) -> Result<(), LexError> {
        let b = self.bytes;
        loop {
            let rest = &b[self.pos..self.end];
            match rest.iter().position(|&c| CLASS[c as usize] & SPACE == 0) {
                None => {
                    self.pos = self.end;
                    return Ok(());
                }
                Some(i) => self.pos += i,
            }
            let rest = &b[self.pos..self.end];
            if rest.starts_with(b"//") {
                match memchr(b'\n', rest) {
                    Some(i) => self.pos += i + 1,
                    None => self.pos = self.end,
                }
            } else if rest.starts_with(b"/*") {
                match find(&rest[2..], b"*/") {
                    Some(i) => self.pos += 2 + i + 2,
                    None => {
                        return Err(LexError {
                            offset: self.pos as u32,
                            what: "unterminated /* comment",
                        });
                    }
                }
            } else {
                return Ok(());
            }
        }
    }

    /// Skips to the end of the statement: the next `;` outside comments and
    /// strings, returned as a token (`None` at the end of input). Much
    /// faster than lexing every token of instructions nobody looks at.
    pub(crate) fn skip_statement(&mut self) -> Result<Option<Token>, LexError> {
        let b = self.bytes;
        loop {
            let rest = &b[self.pos..self.end];
            let Some(i) = memchr::memchr3(b';', b'/', b'"', rest) else {
                self.pos = self.end;
                return Ok(None);
            };
            self.pos += i;
            match b[self.pos] {
                b';' => {
                    self.pos += 1;
                    return Ok(Some(Token {
                        kind: TokenKind::Punct(b';'),
                        start: self.pos as u32 - 1,
                        end: self.pos as u32,
                    }));
                }
                b'"' => {
                    self.next_token()?;
                }
                _ => {
                    let before = self.pos;
                    self.skip_trivia()?;
                    if self.pos == before {
                        self.pos += 1; // a lone '/'
                    }
                }
            }
        }
    }

    pub(crate) fn next_token(&mut self) -> Result<Option<Token>, LexError> {
        // The common case inline: blanks, then a word or punctuation. One
        // slice bounded by the range, so the loops need no other bounds.
        let b = &self.bytes[..self.end];
        let mut pos = skip_space(b, self.pos);
        if pos < b.len() && b[pos] == b'/' {
            self.pos = pos;
            self.skip_trivia()?;
            pos = self.pos;
        }
        if pos >= b.len() {
            self.pos = pos;
            return Ok(None);
        }
        let start = pos;
        let c = b[start];
        let class = CLASS[c as usize];
        let kind = if class & IDENT_START != 0 {
            pos += 1;
            loop {
                while pos < b.len() && CLASS[b[pos] as usize] & IDENT_CONTINUE != 0 {
                    pos += 1;
                }
                // `.modifier` suffixes belong to the word (`ld.param.u64`),
                // and so do `::` sub-qualifiers (`fence.proxy.async.shared::cta`,
                // `ld.global.L1::no_allocate`, `mbarrier::complete_tx::bytes`).
                if pos + 1 < b.len() && b[pos] == b'.' && is_ident_continue(b[pos + 1]) {
                    pos += 1;
                } else if pos + 2 < b.len()
                    && b[pos] == b':'
                    && b[pos + 1] == b':'
                    && is_ident_continue(b[pos + 2])
                {
                    pos += 2;
                } else {
                    break;
                }
            }
            TokenKind::Word
        } else if c == b'.' && start + 1 < b.len() && is_ident_start(b[start + 1]) {
            pos += 1;
            while pos < b.len() && is_ident_continue(b[pos]) {
                pos += 1;
            }
            TokenKind::Directive
        } else if c.is_ascii_digit() {
            pos += 1;
            while pos < b.len() {
                let d = b[pos];
                if d.is_ascii_alphanumeric() || d == b'.' {
                    pos += 1;
                } else if (d == b'+' || d == b'-')
                    && matches!(b[pos - 1], b'e' | b'E')
                    && !is_hex_literal(&b[start..pos])
                {
                    pos += 1; // exponent sign of a decimal float
                } else {
                    break;
                }
            }
            TokenKind::Number
        } else if c == b'"' {
            pos += 1;
            loop {
                if pos >= b.len() || b[pos] == b'\n' {
                    self.pos = start;
                    return Err(LexError {
                        offset: start as u32,
                        what: "unterminated string literal",
                    });
                }
                match b[pos] {
                    b'\\' => pos += 2,
                    b'"' => {
                        pos += 1;
                        break;
                    }
                    _ => pos += 1,
                }
            }
            TokenKind::Str
        } else if c.is_ascii_punctuation() {
            pos += 1;
            TokenKind::Punct(c)
        } else {
            self.pos = start;
            return Err(LexError {
                offset: start as u32,
                what: "unexpected character",
            });
        };
        self.pos = pos;
        Ok(Some(Token {
            kind,
            start: start as u32,
            end: pos as u32,
        }))
    }
}

fn is_hex_literal(s: &[u8]) -> bool {
    s.len() >= 2 && s[0] == b'0' && matches!(s[1], b'x' | b'X' | b'f' | b'F' | b'd' | b'D')
}

pub(crate) fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    memchr::memchr(needle, hay)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// All tokens of `src[start..end]`.
pub(crate) fn tokens(src: &str, start: u32, end: u32) -> Result<Vec<Token>, LexError> {
    let mut lx = Lexer::range(src, start, end);
    let mut out = Vec::new();
    while let Some(t) = lx.next_token()? {
        out.push(t);
    }
    Ok(out)
}

/// 1-based line and column of a byte offset.
pub(crate) fn line_col(src: &str, offset: u32) -> (usize, usize) {
    let upto = &src.as_bytes()[..(offset as usize).min(src.len())];
    let line = upto.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = upto.len() - upto.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_words_only() {
        let text = "ld.param.u64 %rd1, [k_param_4]; mov.u64 %rd2, k_param_40; k_param_4";
        let at: Vec<usize> = word_positions(text, "k_param_4").collect();
        assert_eq!(at, [20, text.len() - 9]);
        assert_eq!(
            word_positions("xk_param_4 $k_param_4", "k_param_4").count(),
            0
        );
    }

    fn kinds(src: &str) -> Vec<(TokenKind, &str)> {
        tokens(src, 0, src.len() as u32)
            .unwrap()
            .into_iter()
            .map(|t| (t.kind, t.text(src)))
            .collect()
    }

    #[test]
    fn words_directives_numbers_punct() {
        use TokenKind::*;
        assert_eq!(
            kinds("ld.param.u64 %rd1, [k_param_2+8]; // c\n"),
            [
                (Word, "ld.param.u64"),
                (Word, "%rd1"),
                (Punct(b','), ","),
                (Punct(b'['), "["),
                (Word, "k_param_2"),
                (Punct(b'+'), "+"),
                (Number, "8"),
                (Punct(b']'), "]"),
                (Punct(b';'), ";"),
            ]
        );
        assert_eq!(
            kinds(".global .align 1 .b8 $str$1[5] = {105, 0x1f}; /* x */ 0f3F800000 1.5e-3 @!%p1"),
            [
                (Directive, ".global"),
                (Directive, ".align"),
                (Number, "1"),
                (Directive, ".b8"),
                (Word, "$str$1"),
                (Punct(b'['), "["),
                (Number, "5"),
                (Punct(b']'), "]"),
                (Punct(b'='), "="),
                (Punct(b'{'), "{"),
                (Number, "105"),
                (Punct(b','), ","),
                (Number, "0x1f"),
                (Punct(b'}'), "}"),
                (Punct(b';'), ";"),
                (Number, "0f3F800000"),
                (Number, "1.5e-3"),
                (Punct(b'@'), "@"),
                (Punct(b'!'), "!"),
                (Word, "%p1"),
            ]
        );
        assert_eq!(kinds(".pragma \"nounroll\";")[1], (Str, "\"nounroll\""));
    }

    #[test]
    fn errors_have_offsets() {
        let e = tokens("a /* b", 0, 6).unwrap_err();
        assert_eq!((e.offset, e.what), (2, "unterminated /* comment"));
        assert_eq!(tokens("x \"ab", 0, 5).unwrap_err().offset, 2);
        assert_eq!(tokens("x \u{e9}", 0, 4).unwrap_err().offset, 2);
        assert_eq!(line_col("ab\ncd\nef", 7), (3, 2));
        assert_eq!(line_col("abc", 0), (1, 1));
    }
}
