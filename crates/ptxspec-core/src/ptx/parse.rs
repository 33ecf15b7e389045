//! Recursive-descent parser from tokens to the [`Module`] model.

use super::lex::{LexError, Lexer, Token, TokenKind};
use super::{
    Body, Function, Item, ItemKind, Linkage, Module, Param, ParseError, Span, Stmt, StmtKind,
    Variable, scalar_type_size,
};

/// The largest parameter taken: 1 MiB, far above PTX's own limits (a
/// kernel's parameters take at most 32 764 bytes); a declared size past it
/// is an error, so that no size computed from it overflows.
pub(crate) const MAX_PARAM_BYTES: u64 = 1 << 20;

/// Parses a whole PTX module. `file` names it in errors.
pub fn parse(file: impl Into<String>, src: String) -> Result<Module, ParseError> {
    let file = file.into();
    // PTX is text: a NUL byte anywhere — in a comment too, where the lexer
    // would skip it and the written image keep it for ptxas to refuse — is
    // an error at its place.
    if let Some(at) = src.find('\0') {
        let (line, col) = super::line_col(&src, at as u32);
        return Err(ParseError {
            file,
            line,
            col,
            what: "a NUL byte: PTX is text, and ptxas refuses it".into(),
        });
    }
    let items = {
        let mut p = Parser {
            src: &src,
            lx: Lexer::new(&src),
            peeked: None,
        };
        p.module().map_err(|(offset, what)| {
            let (line, col) = super::line_col(&src, offset);
            ParseError {
                file: file.clone(),
                line,
                col,
                what,
            }
        })?
    };
    Ok(Module { file, src, items })
}

type PResult<T> = Result<T, (u32, String)>;

struct Parser<'a> {
    src: &'a str,
    lx: Lexer<'a>,
    peeked: Option<Token>,
}

impl From<LexError> for (u32, String) {
    fn from(e: LexError) -> Self {
        (e.offset, e.what.to_string())
    }
}

impl<'a> Parser<'a> {
    fn peek(&mut self) -> PResult<Option<Token>> {
        if self.peeked.is_none() {
            self.peeked = self.lx.next_token()?;
        }
        Ok(self.peeked)
    }

    fn next(&mut self) -> PResult<Option<Token>> {
        match self.peeked.take() {
            Some(t) => Ok(Some(t)),
            None => Ok(self.lx.next_token()?),
        }
    }

    fn eof_offset(&self) -> u32 {
        self.src.len() as u32
    }

    /// The next token, which must exist.
    fn expect_any(&mut self, what: &str) -> PResult<Token> {
        match self.next()? {
            Some(t) => Ok(t),
            None => Err((
                self.eof_offset(),
                format!("unexpected end of file: expected {what}"),
            )),
        }
    }

    fn expect_punct(&mut self, p: u8) -> PResult<Token> {
        let Some(t) = self.next()? else {
            return Err((
                self.eof_offset(),
                format!("unexpected end of file: expected '{}'", p as char),
            ));
        };
        if t.is(p) {
            Ok(t)
        } else {
            Err((
                t.start,
                format!("expected '{}', found {:?}", p as char, t.text(self.src)),
            ))
        }
    }

    fn expect_word(&mut self, what: &str) -> PResult<Token> {
        let t = self.expect_any(what)?;
        if t.kind == TokenKind::Word {
            Ok(t)
        } else {
            Err((
                t.start,
                format!("expected {what}, found {:?}", t.text(self.src)),
            ))
        }
    }

    fn expect_number(&mut self) -> PResult<u64> {
        let t = self.expect_any("a number")?;
        let text = t.text(self.src);
        if t.kind == TokenKind::Number
            && let Ok(v) = text.parse::<u64>()
        {
            return Ok(v);
        }
        Err((t.start, format!("expected a number, found {text:?}")))
    }

    fn eat_punct(&mut self, p: u8) -> PResult<bool> {
        if self.peek()?.is_some_and(|t| t.is(p)) {
            self.next()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Consumes tokens through the next `;`; returns the `;`.
    fn skip_to_semicolon(&mut self, what: &str) -> PResult<Token> {
        loop {
            match self.next()? {
                Some(t) if t.is(b';') => return Ok(t),
                Some(_) => {}
                None => {
                    return Err((
                        self.eof_offset(),
                        format!("unexpected end of file: expected ';' ending {what}"),
                    ));
                }
            }
        }
    }

    /// Skips the rest of an instruction through its `;` without lexing it.
    fn skip_instruction(&mut self) -> PResult<Token> {
        if let Some(t) = self.peeked.take()
            && t.is(b';')
        {
            return Ok(t);
        }
        match self.lx.skip_statement()? {
            Some(t) => Ok(t),
            None => Err((
                self.eof_offset(),
                "unexpected end of file: expected ';' ending the instruction".into(),
            )),
        }
    }

    /// After a word at the start of a statement: consumes the `:` that
    /// makes it a label, if there is one, and returns where it ends. Looks
    /// at the bytes after the word rather than lexing the instruction's
    /// first operand.
    fn label_colon(&mut self, word: Token) -> PResult<Option<u32>> {
        if self.peeked.is_none() {
            let b = self.src.as_bytes();
            let p = super::lex::skip_space(b, word.end as usize);
            match b.get(p) {
                Some(b':') => {
                    self.lx.advance_to(p as u32 + 1);
                    return Ok(Some(p as u32 + 1));
                }
                // A comment may hide the colon: lex.
                Some(b'/') => {}
                _ => return Ok(None),
            }
        }
        match self.peek()? {
            Some(t) if t.is(b':') => {
                self.next()?;
                Ok(Some(t.end))
            }
            _ => Ok(None),
        }
    }

    /// Consumes the tokens that start on the line of offset `from`.
    fn skip_line(&mut self, from: u32) -> PResult<u32> {
        let line_end = super::lex::memchr(b'\n', &self.src.as_bytes()[from as usize..])
            .map_or(self.src.len(), |i| from as usize + i) as u32;
        let mut end = from;
        while let Some(t) = self.peek()? {
            if t.start >= line_end {
                break;
            }
            end = t.end;
            self.next()?;
        }
        Ok(end)
    }

    fn module(&mut self) -> PResult<Vec<Item>> {
        let mut items = Vec::new();
        let mut prev_end = 0u32;
        while let Some(t) = self.next()? {
            let (kind, end) = self.item(t)?;
            items.push(Item {
                kind,
                span: Span::new(t.start, end),
                full: Span::new(prev_end, end),
            });
            prev_end = end;
        }
        Ok(items)
    }

    fn item(&mut self, first: Token) -> PResult<(ItemKind, u32)> {
        let text = first.text(self.src);
        if first.kind != TokenKind::Directive {
            return Err((
                first.start,
                format!("expected a directive at module scope, found {text:?}"),
            ));
        }
        match text {
            ".version" => {
                let end = self.expect_any("a version")?.end;
                Ok((ItemKind::Version, end))
            }
            ".target" => {
                let mut end = self.expect_word("a target")?.end;
                while self.eat_punct(b',')? {
                    end = self.expect_word("a target option")?.end;
                }
                Ok((ItemKind::Target, end))
            }
            ".address_size" => {
                let end = self.expect_any("an address size")?.end;
                Ok((ItemKind::AddressSize, end))
            }
            ".file" => Ok((ItemKind::File, self.skip_line(first.end)?)),
            ".loc" => Ok((ItemKind::Other, self.skip_line(first.end)?)),
            ".section" => {
                // Debug sections: `.section .debug_x { ... }`.
                let mut depth = 0;
                loop {
                    let t = self.expect_any("'}' closing the section")?;
                    if t.is(b'{') {
                        depth += 1;
                    } else if t.is(b'}') {
                        depth -= 1;
                        if depth == 0 {
                            return Ok((ItemKind::Section, t.end));
                        }
                    }
                }
            }
            ".visible" | ".extern" | ".weak" | ".common" => {
                let linkage = match text {
                    ".visible" => Linkage::Visible,
                    ".extern" => Linkage::Extern,
                    ".weak" => Linkage::Weak,
                    _ => Linkage::Common,
                };
                let next = self.expect_any("a declaration after the linkage")?;
                self.declaration(next, linkage)
            }
            _ => self.declaration(first, Linkage::Internal),
        }
    }

    fn declaration(&mut self, first: Token, linkage: Linkage) -> PResult<(ItemKind, u32)> {
        match first.text(self.src) {
            ".entry" => self.function(true, linkage),
            ".func" => self.function(false, linkage),
            ".global" | ".const" | ".shared" | ".local" | ".tex" => self.variable(first, linkage),
            ".pragma" | ".alias" => Ok((
                ItemKind::Other,
                self.skip_to_semicolon("the directive")?.end,
            )),
            other => Err((
                first.start,
                format!("unknown module-scope directive {other:?}"),
            )),
        }
    }

    fn variable(&mut self, space: Token, linkage: Linkage) -> PResult<(ItemKind, u32)> {
        let mut var = Variable {
            name: Span::default(),
            linkage,
            space: space.text(self.src)[1..].to_string(),
            align: None,
            elem_type: String::new(),
            vector: 1,
            dims: Vec::new(),
            init: None,
        };
        loop {
            let t = self.expect_any("a variable name")?;
            let text = t.text(self.src);
            match t.kind {
                TokenKind::Directive if text == ".align" => {
                    var.align = Some(self.expect_number()? as u32)
                }
                TokenKind::Directive
                    if text.starts_with(".v") && text[2..].parse::<u32>().is_ok() =>
                {
                    var.vector = text[2..].parse().unwrap_or(1);
                }
                TokenKind::Directive => var.elem_type = text[1..].to_string(),
                TokenKind::Word => {
                    var.name = Span::new(t.start, t.end);
                    break;
                }
                _ => return Err((t.start, format!("expected a variable name, found {text:?}"))),
            }
        }
        loop {
            let t = self.expect_any("';' ending the variable")?;
            if t.is(b'[') {
                if self.eat_punct(b']')? {
                    var.dims.push(None);
                } else {
                    var.dims.push(Some(self.expect_number()?));
                    self.expect_punct(b']')?;
                }
            } else if t.is(b'=') {
                let start = self.peek()?.map_or(t.end, |n| n.start);
                let semi = self.skip_to_semicolon("the initializer")?;
                var.init = Some(Span::new(start, semi.start));
                return Ok((ItemKind::Variable(var), semi.end));
            } else if t.is(b';') {
                return Ok((ItemKind::Variable(var), t.end));
            } else if t.is(b'<') {
                // `.reg .b32 %r<4>`-style counts are not module-scope, but
                // accept and ignore a parameterized name.
                self.expect_number()?;
                self.expect_punct(b'>')?;
            } else {
                return Err((
                    t.start,
                    format!("unexpected {:?} in variable declaration", t.text(self.src)),
                ));
            }
        }
    }

    fn params(&mut self) -> PResult<Vec<Param>> {
        self.expect_punct(b'(')?;
        let mut params = Vec::new();
        if self.eat_punct(b')')? {
            return Ok(params);
        }
        loop {
            params.push(self.param()?);
            let t = self.expect_any("',' or ')'")?;
            if t.is(b')') {
                return Ok(params);
            }
            if !t.is(b',') {
                return Err((
                    t.start,
                    format!("expected ',' or ')', found {:?}", t.text(self.src)),
                ));
            }
        }
    }

    fn param(&mut self) -> PResult<Param> {
        let mut p = Param {
            name: Span::default(),
            ty: String::new(),
            align: None,
            array: None,
            span: Span::default(),
        };
        let mut start = None;
        loop {
            let t = self.expect_any("a parameter")?;
            start.get_or_insert(t.start);
            let text = t.text(self.src);
            match t.kind {
                TokenKind::Directive if text == ".align" => {
                    p.align = Some(self.expect_number()? as u32)
                }
                TokenKind::Directive => {
                    if scalar_type_size(&text[1..]).is_some() {
                        p.ty = text[1..].to_string();
                    }
                }
                TokenKind::Word => {
                    p.name = Span::new(t.start, t.end);
                    let mut end = t.end;
                    if self.eat_punct(b'[')? {
                        let at = self.peek()?.map_or(t.end, |n| n.start);
                        let count = self.expect_number()?;
                        let elem = scalar_type_size(&p.ty).unwrap_or(1) as u64;
                        if count.saturating_mul(elem) > MAX_PARAM_BYTES {
                            return Err((
                                at,
                                format!(
                                    "parameter {text}[{count}] is larger than any parameter can be \
                                     ({MAX_PARAM_BYTES} bytes)"
                                ),
                            ));
                        }
                        p.array = Some(count as u32);
                        end = self.expect_punct(b']')?.end;
                    }
                    p.span = Span::new(start.unwrap_or(t.start), end);
                    return Ok(p);
                }
                _ => return Err((t.start, format!("unexpected {text:?} in a parameter"))),
            }
        }
    }

    fn function(&mut self, is_kernel: bool, linkage: Linkage) -> PResult<(ItemKind, u32)> {
        let mut returns = Vec::new();
        if !is_kernel && self.peek()?.is_some_and(|t| t.is(b'(')) {
            returns = self.params()?;
        }
        let name = self.expect_word("a function name")?;
        let mut f = Function {
            is_kernel,
            linkage,
            name: Span::new(name.start, name.end),
            returns,
            params: Vec::new(),
            perf: Vec::new(),
            body: None,
        };
        if self.peek()?.is_some_and(|t| t.is(b'(')) {
            f.params = self.params()?;
        }
        loop {
            let t = self.expect_any("'{' or ';' after the function header")?;
            let text = t.text(self.src);
            if t.is(b';') {
                return Ok((ItemKind::Function(f), t.end));
            }
            if t.is(b'{') {
                let body = self.body(t)?;
                let end = body.span.end;
                f.body = Some(body);
                return Ok((ItemKind::Function(f), end));
            }
            match t.kind {
                TokenKind::Directive if text == ".pragma" => {
                    self.skip_to_semicolon(".pragma")?;
                }
                TokenKind::Directive => {
                    let mut nums = Vec::new();
                    while self.peek()?.is_some_and(|n| n.kind == TokenKind::Number) {
                        nums.push(self.expect_number()?);
                        if !self.eat_punct(b',')? {
                            break;
                        }
                    }
                    f.perf.push((text[1..].to_string(), nums));
                }
                _ => {
                    return Err((
                        t.start,
                        format!("unexpected {text:?} after the function header"),
                    ));
                }
            }
        }
    }

    fn body(&mut self, open: Token) -> PResult<Body> {
        let mut stmts = Vec::new();
        let mut depth = 1u32;
        let whole = |t: &Token| Span::new(t.start, t.end);
        loop {
            let Some(t) = self.next()? else {
                return Err((
                    open.start,
                    "function body is not closed: unbalanced '{'".into(),
                ));
            };
            let text = t.text(self.src);
            match t.kind {
                TokenKind::Punct(b'{') => {
                    depth += 1;
                    stmts.push(Stmt {
                        kind: StmtKind::Open,
                        span: whole(&t),
                        op: whole(&t),
                    });
                }
                TokenKind::Punct(b'}') => {
                    depth -= 1;
                    if depth == 0 {
                        stmts.shrink_to_fit();
                        return Ok(Body {
                            span: Span::new(open.start, t.end),
                            stmts,
                        });
                    }
                    stmts.push(Stmt {
                        kind: StmtKind::Close,
                        span: whole(&t),
                        op: whole(&t),
                    });
                }
                TokenKind::Punct(b'@') => {
                    // Predicate guard, then the instruction.
                    let _ = self.eat_punct(b'!')?;
                    self.expect_word("a predicate register")?;
                    let op = self.expect_word("an opcode")?;
                    let semi = self.skip_instruction()?;
                    stmts.push(Stmt {
                        kind: StmtKind::Instr,
                        span: Span::new(t.start, semi.end),
                        op: whole(&op),
                    });
                }
                TokenKind::Word => {
                    if let Some(end) = self.label_colon(t)? {
                        stmts.push(Stmt {
                            kind: StmtKind::Label,
                            span: Span::new(t.start, end),
                            op: whole(&t),
                        });
                    } else {
                        let semi = self.skip_instruction()?;
                        stmts.push(Stmt {
                            kind: StmtKind::Instr,
                            span: Span::new(t.start, semi.end),
                            op: whole(&t),
                        });
                    }
                }
                TokenKind::Directive => {
                    let (kind, end) = match text {
                        // Not lexed either: nothing reads a declaration's
                        // tokens but the few who look at one.
                        ".reg" | ".param" | ".local" | ".shared" | ".const" | ".global" => {
                            (StmtKind::Decl, self.skip_instruction()?.end)
                        }
                        ".loc" | ".file" => (StmtKind::Directive, self.skip_line(t.end)?),
                        ".entry" | ".func" | ".visible" | ".extern" | ".weak" | ".common"
                        | ".version" | ".target" | ".address_size" => {
                            return Err((
                                open.start,
                                format!(
                                    "function body is not closed before {text}: unbalanced '{{'"
                                ),
                            ));
                        }
                        _ => (
                            StmtKind::Directive,
                            self.skip_to_semicolon("the directive")?.end,
                        ),
                    };
                    stmts.push(Stmt {
                        kind,
                        span: Span::new(t.start, end),
                        op: whole(&t),
                    });
                }
                _ => return Err((t.start, format!("unexpected {text:?} in a function body"))),
            }
        }
    }
}
