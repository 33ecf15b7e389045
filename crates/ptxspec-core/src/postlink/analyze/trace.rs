//! Tracing registers back through mov, cvta, add and loads to symbols and
//! parameters: the buffer pointer to a kernel's `kernel_handler`.
//!
//! The handler reaches a getter by value (a parameter of each function on
//! the way) or by reference: a pointer to a stack slot the handler was
//! stored in — a `const kernel_handler &` parameter, or a debug build's
//! `this`. A pointer loaded from memory is followed to the slot it points
//! to and the one store into that slot, so that the kernel parameter the
//! handler came from is found by what the code does, never assumed from
//! its position; what cannot be followed so is refused.

use super::*;
use crate::ptx::instr::Operand as Op;

/// What a register holds, as far as tracing can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Value<'a> {
    Symbol(&'a str, i64),
    Param(&'a str, i64),
    /// A pointer-sized load from memory (the handler kept in a stack
    /// slot): from the address `address` holds (`None`: an address that
    /// cannot be traced); `at`, the load's offset in the module, for
    /// messages.
    Loaded {
        address: Option<Box<Value<'a>>>,
        at: u32,
    },
}

impl<'a> Value<'a> {
    /// This value plus `imm`; `None` for a loaded value moved by an
    /// offset (not a value a slot held).
    fn plus(self, imm: i64) -> Option<Value<'a>> {
        match self {
            Value::Symbol(n, o) => Some(Value::Symbol(n, o + imm)),
            Value::Param(n, o) => Some(Value::Param(n, o + imm)),
            loaded @ Value::Loaded { .. } if imm == 0 => Some(loaded),
            Value::Loaded { .. } => None,
        }
    }
}

/// Whether `symbol` is a function's stack (NVVM's and clang's name for it).
fn is_stack(symbol: &str) -> bool {
    symbol.starts_with("__local_depot")
}

/// Indices of the instructions that write a register, ascending.
pub(super) type DefList = Rc<Vec<u32>>;

impl<'a> Ctx<'a> {
    /// What a stored operand holds: a register traced back, or a symbol.
    pub(super) fn trace_operand(
        &self,
        f: usize,
        operand: Operand<'a>,
        before: usize,
    ) -> Result<Value<'a>, PostLinkError> {
        let m = self.m;
        let at = stmts(m, f).get(before).map_or(0, |s| s.span.start);
        match operand.value {
            Some((w, off)) if w.starts_with('%') && off == 0 => self.trace(f, w, before, 0),
            Some((w, off)) if !w.starts_with('%') => Ok(Value::Symbol(w, off)),
            _ => Err(self.err(
                f,
                at,
                format!("cannot trace operand {:?}", m.text(operand.span)),
            )),
        }
    }

    /// Follows `reg` back from statement `before` through mov, cvta, add of a
    /// constant, and ld.param.
    pub(super) fn trace(
        &self,
        f: usize,
        reg: &'a str,
        before: usize,
        depth: u32,
    ) -> Result<Value<'a>, PostLinkError> {
        let m = self.m;
        let body = stmts(m, f);
        let at = body.get(before).map_or(0, |s| s.span.start);
        if depth > 64 {
            return Err(self.err(
                f,
                at,
                format!("register {reg} is defined through too many steps"),
            ));
        }
        // The nearest earlier instruction that writes `reg` (its first
        // operand). Compilers mostly put these right before their use, so
        // look back a few statements first; registers set far away (the
        // buffer pointer, read at the kernel's entry) get a list of their
        // definitions, made once per function and register.
        const NEAR: usize = 8;
        let writes = |j: usize| m.first_operand_is(&body[j], reg);
        let near = (before.saturating_sub(NEAR)..before)
            .rev()
            .find(|&j| writes(j));
        if let Some(j) = near {
            return self.trace_def(f, reg, j, depth);
        }
        let list = self.def_list(f, reg);
        let n = list.partition_point(|&j| (j as usize) < before);
        let Some(j) = n.checked_sub(1).map(|i| list[i] as usize) else {
            return Err(self.err(
                f,
                at,
                format!("register {reg} is never set before its use: the getter cannot be traced"),
            ));
        };
        if let Some(v) = self.traced.borrow().get(&(f, j)) {
            return Ok(v.clone());
        }
        let v = self.trace_def(f, reg, j, depth)?;
        self.traced.borrow_mut().insert((f, j), v.clone());
        Ok(v)
    }

    /// What the instruction `j` of function `f` writes into `reg`.
    pub(super) fn trace_def(
        &self,
        f: usize,
        reg: &'a str,
        j: usize,
        depth: u32,
    ) -> Result<Value<'a>, PostLinkError> {
        let m = self.m;
        let st = &stmts(m, f)[j];
        let untraceable = || {
            self.err(
                f,
                st.span.start,
                format!(
                    "cannot trace {reg} through `{}`: the getter cannot be traced",
                    m.text(st.span)
                ),
            )
        };
        let Some(i) = m.instr(st)? else {
            return Err(untraceable());
        };
        let ops = &i.operands;
        // A pointer-sized integer: what a load of the handler's slot reads.
        let pointer_sized = matches!(i.types.as_slice(), [t] if t.is_integer() && t.bits == 64);
        match i.opcode {
            "mov" | "cvta" if ops.len() == 2 => match value_of(&ops[1]) {
                Some((w, 0)) if w.starts_with('%') => self.trace(f, w, j, depth + 1),
                Some((w, off)) if !w.starts_with('%') => Ok(Value::Symbol(w, off)),
                _ => Err(untraceable()),
            },
            "add" if ops.len() == 3 => {
                let plus = |a: &Op<'a>, n: &Op<'a>| Some((value_of(a)?, n.integer()? as i64));
                let Some((a, imm)) = plus(&ops[1], &ops[2]).or_else(|| plus(&ops[2], &ops[1]))
                else {
                    return Err(untraceable());
                };
                let inner = if a.0.starts_with('%') {
                    self.trace(f, a.0, j, depth + 1)?
                } else {
                    Value::Symbol(a.0, a.1)
                };
                inner.plus(imm).ok_or_else(untraceable)
            }
            "ld" if i.has("param") && ops.len() == 2 => match &ops[1] {
                Op::Address {
                    base: Some(name),
                    offset,
                } => Ok(Value::Param(name, *offset)),
                _ => Err(untraceable()),
            },
            // A pointer-sized load from memory other than the parameter
            // space: from the address its operand holds.
            "ld" if ops.len() == 2 && pointer_sized => {
                let address = match &ops[1] {
                    Op::Address {
                        base: Some(w),
                        offset,
                    } if w.starts_with('%') => self
                        .trace(f, w, j, depth + 1)
                        .ok()
                        .and_then(|v| v.plus(*offset)),
                    Op::Address {
                        base: Some(w),
                        offset,
                    } => Some(Value::Symbol(w, *offset)),
                    _ => None,
                };
                Ok(Value::Loaded {
                    address: address.map(Box::new),
                    at: st.span.start,
                })
            }
            _ => Err(untraceable()),
        }
    }

    /// Checks that the buffer register of a getter call in function `f`
    /// comes from the last parameter of a kernel, through device-function
    /// parameters (by value, or by reference: a pointer to the stack slot
    /// holding the handler) and their call sites; records each kernel's
    /// buffer parameter.
    ///
    /// Returns the kernel parameter the register was read from when `f` is
    /// that kernel.
    ///
    /// The callers are walked depth first on a stack of our own, not the
    /// thread's: the input chooses how deep a call chain is.
    pub(super) fn buffer_origin(
        &self,
        f: usize,
        reg: &'a str,
        before: usize,
        at: u32,
        found: &mut HashMap<usize, usize>,
        visiting: &mut FxHashSet<usize>,
    ) -> Result<Option<&'a str>, PostLinkError> {
        let mut stack = match self.buffer_step(f, reg, before, at, found, visiting, 0)? {
            BufferStep::Done(r) => return Ok(r),
            BufferStep::Callers(frame) => vec![frame],
        };
        while let Some(top) = stack.last_mut() {
            let callers = self.callers.get(&top.f).map_or(&[][..], |v| v.as_slice());
            let Some(&(caller, s)) = callers.get(top.next) else {
                if top.next == 0 {
                    self.refuse_indirect_calls(top.f, at)?;
                }
                visiting.remove(&top.f);
                self.buffer_params_ok
                    .borrow_mut()
                    .insert((top.f, top.index, top.by_reference));
                stack.pop();
                continue;
            };
            top.next += 1;
            let by_reference = top.by_reference;
            let (reg, store, at) = self.passed_handler(top.f, top.index, caller, s)?;
            let step = if by_reference {
                // The argument is the address of the handler's slot.
                let address = self.trace(caller, reg, store, 0)?;
                self.through_address(caller, address, store, at, found, visiting, 0)?
            } else {
                self.buffer_step(caller, reg, store, at, found, visiting, 0)?
            };
            if let BufferStep::Callers(frame) = step {
                stack.push(frame);
            }
        }
        Ok(None)
    }

    /// `f` takes the handler as a parameter but no function calls it
    /// directly: where its address is taken (a function-pointer table, a
    /// virtual call), the kernel that calls it cannot be traced, and would
    /// get no buffer while `f` reads one — an error naming the place.
    /// Nothing takes it: it is called by no kernel, and needs no buffer.
    fn refuse_indirect_calls(&self, f: usize, at: u32) -> Result<(), PostLinkError> {
        let m = self.m;
        let name = func_name(m, f);
        let own: Vec<std::ops::Range<usize>> = m
            .items
            .iter()
            .filter(|i| i.name().is_some_and(|n| m.text(n) == name))
            .map(|i| i.span.range())
            .collect();
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
        let src = m.src.as_bytes();
        // In a `//` comment (NVRTC writes `// .globl NAME`): no use.
        let in_comment = |i: usize| {
            let line = src[..i]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |l| l + 1);
            memchr::memmem::find(&src[line..i], b"//").is_some()
        };
        let taken = memchr::memmem::find_iter(src, name.as_bytes()).find(|&i| {
            let end = i + name.len();
            let whole = (i == 0 || !word(src[i - 1])) && src.get(end).is_none_or(|&b| !word(b));
            whole && !own.iter().any(|r| r.contains(&i)) && !in_comment(i)
        });
        match taken {
            Some(i) => Err(self.err(
                f,
                at,
                format!(
                    "{name} reads specialization constants through its kernel_handler parameter, but no \
                     function calls it directly: its address is taken at {} (a function pointer or \
                     virtual call), so the kernel whose buffer it reads cannot be traced. Call it \
                     directly, or read the constants in the caller and pass the values",
                    self.loc(i as u32)
                ),
            )),
            None => Ok(()),
        }
    }

    /// One function of [`buffer_origin`](Self::buffer_origin)'s walk: the
    /// register traced in `f`; done at a kernel (or a function seen
    /// before), else its callers to walk. `hops`: slots followed so far.
    #[allow(clippy::too_many_arguments)]
    fn buffer_step(
        &self,
        f: usize,
        reg: &'a str,
        before: usize,
        at: u32,
        found: &mut HashMap<usize, usize>,
        visiting: &mut FxHashSet<usize>,
        hops: u32,
    ) -> Result<BufferStep<'a>, PostLinkError> {
        let m = self.m;
        let fun = func(m, f)
            .ok_or_else(|| PostLinkError::Internal("getter outside a function".into()))?;
        let value = self.trace(f, reg, before, 0)?;
        let name = match value {
            Value::Param(name, 0) => name,
            Value::Loaded {
                address: Some(address),
                at: load,
            } => {
                return self.through_address(f, *address, before, load, found, visiting, hops);
            }
            other => {
                return Err(self.err(
                    f,
                    at,
                    format!(
                        "the buffer pointer comes from {other:?}, not from a kernel_handler parameter \
                         (the kernel's last parameter, passed by value or by reference to device functions)"
                    ),
                ));
            }
        };
        let Some(index) = fun.params.iter().position(|p| m.text(p.name) == name) else {
            return Err(self.err(f, at, format!("the buffer pointer is read from {name}, which is not a parameter of this function")));
        };
        if fun.is_kernel {
            if index + 1 != fun.params.len() {
                return Err(self.err(
                    f,
                    at,
                    format!(
                        "the buffer pointer comes from parameter {} of {}, but the kernel_handler must be the kernel's last parameter",
                        index,
                        m.text(fun.name)
                    ),
                ));
            }
            found.insert(f, index);
            return Ok(BufferStep::Done(Some(name)));
        }
        Ok(self.walk_callers(f, index, false, visiting))
    }

    /// The handler read from (or, at a call, passed as) the address
    /// `address` in function `f` (before statement `before`): a slot of
    /// `f`'s stack — then what was stored in it — or a parameter of `f`
    /// that points to the handler — then what its callers pass.
    #[allow(clippy::too_many_arguments)]
    fn through_address(
        &self,
        f: usize,
        address: Value<'a>,
        before: usize,
        at: u32,
        found: &mut HashMap<usize, usize>,
        visiting: &mut FxHashSet<usize>,
        hops: u32,
    ) -> Result<BufferStep<'a>, PostLinkError> {
        let m = self.m;
        let fun = func(m, f)
            .ok_or_else(|| PostLinkError::Internal("getter outside a function".into()))?;
        if hops > 64 {
            return Err(self.err(
                f,
                at,
                "the kernel_handler is copied through too many stack slots to be traced".into(),
            ));
        }
        match address {
            Value::Symbol(stack, off) if is_stack(stack) => {
                let (reg, store) = self.stored_in_slot(f, stack, off, before, at)?;
                self.buffer_step(f, reg, store, at, found, visiting, hops + 1)
            }
            Value::Param(name, 0) if !fun.is_kernel => {
                let Some(index) = fun.params.iter().position(|p| m.text(p.name) == name) else {
                    return Err(self.err(f, at, format!("the kernel_handler's address is read from {name}, which is not a parameter of this function")));
                };
                Ok(self.walk_callers(f, index, true, visiting))
            }
            // The handler's address itself kept in a stack slot (a debug
            // build's copy of a reference): what was stored there.
            Value::Loaded {
                address: Some(slot),
                at: load,
            } if matches!(*slot, Value::Symbol(s, _) if is_stack(s)) => {
                let Value::Symbol(stack, off) = *slot else {
                    return Err(PostLinkError::Internal("a stack slot that is not one".into()));
                };
                let (reg, store) = self.stored_in_slot(f, stack, off, before, load)?;
                let address = self.trace(f, reg, store, 0)?;
                self.through_address(f, address, store, at, found, visiting, hops + 1)
            }
            Value::Param(name, _) if fun.is_kernel => Err(self.err(
                f,
                at,
                format!(
                    "the buffer pointer is read through {name}, a parameter of kernel {}: the \
                     kernel_handler must be the kernel's last parameter, passed by value",
                    m.text(fun.name)
                ),
            )),
            Value::Param(name, off) => Err(self.err(
                f,
                at,
                format!(
                    "the buffer pointer is read {off} bytes into what {name} points to: a \
                     kernel_handler inside an aggregate cannot be traced. Pass the kernel_handler \
                     itself, by value or by reference"
                ),
            )),
            other => Err(self.err(
                f,
                at,
                format!(
                    "the buffer pointer is read from memory at {other:?}, not from a stack slot the \
                     kernel_handler was stored in: the getter cannot be traced. Pass the \
                     kernel_handler by value or by reference"
                ),
            )),
        }
    }

    /// Where the walk goes from device function `f`'s parameter `index`
    /// (the handler, or with `by_reference` its address): to its callers,
    /// unless that parameter was shown to carry it before, or `f` is on
    /// the walk already (a recursion, checked on the way in).
    fn walk_callers(
        &self,
        f: usize,
        index: usize,
        by_reference: bool,
        visiting: &mut FxHashSet<usize>,
    ) -> BufferStep<'a> {
        if visiting.contains(&f)
            || self
                .buffer_params_ok
                .borrow()
                .contains(&(f, index, by_reference))
        {
            return BufferStep::Done(None);
        }
        visiting.insert(f);
        BufferStep::Callers(CallerWalk {
            f,
            index,
            by_reference,
            next: 0,
        })
    }

    /// The register stored into the stack slot `stack + off` of function
    /// `f` before statement `before`, and its store. Every pointer-sized
    /// store into the slot anywhere in `f` must store the same value (so
    /// that the order of `f`'s branches cannot matter), and nothing of
    /// another size may be stored over it.
    fn stored_in_slot(
        &self,
        f: usize,
        stack: &'a str,
        off: i64,
        before: usize,
        at: u32,
    ) -> Result<(&'a str, usize), PostLinkError> {
        let m = self.m;
        let body = stmts(m, f);
        let mut stores: Vec<(usize, &'a str)> = Vec::new();
        for (j, st) in body.iter().enumerate() {
            let Ok(Some(i)) = m.instr(st) else { continue };
            if i.opcode != "st" || i.has("param") {
                continue;
            }
            let (Some(dest), Some(src)) = (i.operands.first(), i.operands.get(1)) else {
                continue;
            };
            let Op::Address {
                base: Some(w),
                offset: o,
            } = dest
            else {
                continue;
            };
            let slot = if w.starts_with('%') {
                self.trace(f, w, j, 0).ok().and_then(|v| v.plus(*o))
            } else {
                Some(Value::Symbol(w, *o))
            };
            let Some(Value::Symbol(s, o)) = slot else {
                continue;
            };
            let wide = matches!(i.types.as_slice(), [t] if t.is_integer() && t.bits == 64);
            let overlaps = s == stack && o < off + 8 && off < o + 8;
            if !overlaps {
                continue;
            }
            match src {
                Op::Reg(reg) if wide && o == off && i.operands.len() == 2 => stores.push((j, reg)),
                _ => {
                    return Err(self.err(
                        f,
                        st.span.start,
                        format!(
                            "`{}` writes into the stack slot the kernel_handler is read from, other than \
                             by storing a whole register: the getter cannot be traced",
                            m.text(st.span)
                        ),
                    ));
                }
            }
        }
        let Some(&(j, reg)) = stores.iter().rev().find(|(j, _)| *j < before) else {
            return Err(self.err(
                f,
                at,
                format!("nothing is stored in the stack slot {stack}+{off} before the kernel_handler is read from it"),
            ));
        };
        let value = self.trace(f, reg, j, 0)?;
        for &(k, other) in &stores {
            if k != j && self.trace(f, other, k, 0)? != value {
                return Err(self.err(
                    f,
                    body[k].span.start,
                    "the stack slot the kernel_handler is read from is written with different \
                     values: the getter cannot be traced"
                        .into(),
                ));
            }
        }
        Ok((reg, j))
    }

    /// The register that `caller`'s call (statement `s`) of `f` passes as
    /// argument `index`, the statement that stores it, and the call's
    /// offset (for messages).
    fn passed_handler(
        &self,
        f: usize,
        index: usize,
        caller: usize,
        s: usize,
    ) -> Result<(&'a str, usize, u32), PostLinkError> {
        let m = self.m;
        let callee = func_name(m, f);
        let call = stmts(m, caller)[s];
        let ops = call_ops(m, &call)?;
        let Some(arg) = ops.args.get(index) else {
            return Err(self.err(
                caller,
                call.span.start,
                format!("call of {callee} passes no argument {index}"),
            ));
        };
        let (lo, _) = enclosing_block(stmts(m, caller), s);
        let body = stmts(m, caller);
        let store = (lo..s).rev().find_map(|j| {
            let i = m.instr(&body[j]).ok()??;
            if i.opcode != "st" || !i.has("param") {
                return None;
            }
            let Some(Op::Address { base: Some(n), .. }) = i.operands.first() else {
                return None;
            };
            (n == arg).then(|| (i.operands.get(1).cloned(), j))
        });
        let Some((Some(src), j)) = store else {
            return Err(self.err(
                caller,
                call.span.start,
                format!("no st.param stores argument {arg} of this call"),
            ));
        };
        match src {
            Op::Reg(w) => Ok((w, j, call.span.start)),
            _ => Err(self.err(
                caller,
                call.span.start,
                format!("the kernel_handler passed to {callee} is not a register"),
            )),
        }
    }

    /// Indices of the instructions of `f` that write `reg`, ascending.
    pub(super) fn def_list(&self, f: usize, reg: &'a str) -> Rc<Vec<u32>> {
        if let Some(l) = self.def_lists.borrow().get(&(f, reg)) {
            return Rc::clone(l);
        }
        let list: Rc<Vec<u32>> = Rc::new(
            func(self.m, f)
                .and_then(|g| g.body.as_ref())
                .map_or_else(Vec::new, |b| b.writers(self.m, reg)),
        );
        self.def_lists
            .borrow_mut()
            .insert((f, reg), Rc::clone(&list));
        list
    }
}

/// `[lo, hi)`: statement indices of the scope around statement `s`.
pub(super) fn enclosing_block(body: &[Stmt], s: usize) -> (usize, usize) {
    let mut depth = 0i32;
    let mut lo = 0;
    for j in (0..s).rev() {
        match body[j].kind {
            StmtKind::Close => depth += 1,
            StmtKind::Open if depth == 0 => {
                lo = j + 1;
                break;
            }
            StmtKind::Open => depth -= 1,
            _ => {}
        }
    }
    depth = 0;
    let mut hi = body.len();
    for (j, st) in body.iter().enumerate().skip(s + 1) {
        match st.kind {
            StmtKind::Open => depth += 1,
            StmtKind::Close if depth == 0 => {
                hi = j;
                break;
            }
            StmtKind::Close => depth -= 1,
            _ => {}
        }
    }
    (lo, hi)
}

/// An operand as tracing needs it: `word`, `word+N` or `word-N` if it is
/// one of those, and its text's span for messages.
#[derive(Clone, Copy)]
pub(super) struct Operand<'a> {
    pub(super) value: Option<(&'a str, i64)>,
    /// A single token (a bare register or symbol).
    pub(super) single: bool,
    pub(super) span: Span,
}

impl<'a> Operand<'a> {
    pub(super) fn of(m: &'a Module, toks: &[Token]) -> Self {
        let span = match (toks.first(), toks.last()) {
            (Some(a), Some(b)) => Span::new(a.start, b.end),
            _ => Span::default(),
        };
        Operand {
            value: sym_plus(m, toks),
            single: toks.len() == 1,
            span,
        }
    }
}

/// A register or a symbol, plus a constant (`%rd1`, `table`, `table+8`), as
/// the instruction model reads an operand.
fn value_of<'a>(o: &Op<'a>) -> Option<(&'a str, i64)> {
    match o {
        Op::Reg(w) | Op::Symbol(w) => Some((w, 0)),
        Op::Sum { base, offset } => Some((base, *offset)),
        _ => None,
    }
}

/// `word`, `word+N` or `word-N`.
pub(super) fn sym_plus<'a>(m: &'a Module, toks: &[Token]) -> Option<(&'a str, i64)> {
    let (first, rest) = toks.split_first()?;
    if first.kind != TokenKind::Word {
        return None;
    }
    let off = match rest {
        [] => 0,
        [sign, n] if sign.is(b'+') || sign.is(b'-') => {
            let v = parse_int(n.text(&m.src))?;
            if sign.is(b'-') { -v } else { v }
        }
        _ => return None,
    };
    Some((first.text(&m.src), off))
}

/// `[word]`, `[word+N]`.
pub(crate) fn address<'a>(m: &'a Module, toks: &[Token]) -> Option<(&'a str, i64)> {
    match toks {
        [open, inner @ .., close] if open.is(b'[') && close.is(b']') => sym_plus(m, inner),
        _ => None,
    }
}

/// An integer immediate as the instruction model reads one (decimal,
/// hexadecimal, octal: `16`, `0x10`, `020`), where it fits `i64`.
pub(super) fn parse_int(t: &str) -> Option<i64> {
    crate::ptx::instr::integer_immediate(t).and_then(|v| i64::try_from(v).ok())
}

/// Where [`Ctx::buffer_origin`]'s walk stands.
pub(super) enum BufferStep<'a> {
    /// Nothing more to walk from here (the kernel's buffer parameter when
    /// the walk started in a kernel).
    Done(Option<&'a str>),
    /// A device function whose callers are to be walked.
    Callers(CallerWalk),
}

/// A device function on the walk: its buffer parameter's index (holding
/// the handler, or with `by_reference` its address), and the first of its
/// call sites not walked yet.
pub(super) struct CallerWalk {
    f: usize,
    index: usize,
    by_reference: bool,
    next: usize,
}

#[cfg(test)]
mod tests {
    use super::{address, sym_plus};
    use crate::ptx::{self, ItemKind, StmtKind};

    /// An offset or an immediate means the same number in each way PTX
    /// writes an integer — decimal, hexadecimal, octal — where the
    /// instruction model reads them (`integer_immediate`); the postlink
    /// reads them through these helpers, which read octal as decimal before.
    #[test]
    fn offsets_and_immediates_mean_the_same_number_in_every_spelling() {
        for (spelled, value) in [
            ("16", 16i64),
            ("0x10", 16),
            ("0X10U", 16),
            ("020", 16),
            ("0", 0),
        ] {
            let src = format!(
                ".version 8.0\n.target sm_90\n.address_size 64\n\
                 .visible .entry k(.param .u64 p)\n{{\n.reg .b64 %rd<4>;\n\
                 ld.param.u64 %rd1, [p+{spelled}];\nadd.s64 %rd2, %rd1, {spelled};\n\
                 add.s64 %rd3, %rd1, -{spelled};\nmov.u64 %rd3, p+{spelled};\nret;\n}}\n"
            );
            let m = ptx::parse("k.ptx", src).unwrap();
            let Some(ItemKind::Function(f)) = m.items.last().map(|i| &i.kind) else {
                panic!("no kernel")
            };
            let body = f.body.as_ref().unwrap();
            let instrs: Vec<_> = body
                .stmts
                .iter()
                .filter(|s| s.kind == StmtKind::Instr)
                .collect();
            let ops = |i: usize| m.operands(instrs[i]).unwrap();
            assert_eq!(address(&m, &ops(0)[1]), Some(("p", value)), "[p+{spelled}]");
            let imm = |i: usize| m.instr(instrs[i]).unwrap().unwrap().operands[2].integer();
            assert_eq!(imm(1).map(|v| v as i64), Some(value), "{spelled}");
            assert_eq!(imm(2).map(|v| v as i64), Some(-value), "-{spelled}");
            assert_eq!(sym_plus(&m, &ops(3)[1]), Some(("p", value)), "p+{spelled}");
        }
    }
}
