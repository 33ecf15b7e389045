//! One getter call: its symbolic ID, default value, type and the pieces
//! its caller reads back; the module's variables as bytes.

use super::trace::{Operand, enclosing_block};
use super::*;

pub(super) use super::markup::IdText;

/// What a getter call's sequence holds ([`Ctx::call_sequence`]).
struct CallSequence<'a> {
    /// The statements the rewrite removes: the call, its argument stores
    /// and parameter declarations.
    removed: Vec<Span>,
    /// What the call's three arguments (symbolic ID, default value,
    /// buffer) store, each with the statement that stores it.
    args: [(Operand<'a>, usize); 3],
    /// The loads of the return value after the call.
    pieces: Vec<Piece<'a>>,
}

impl<'a> Ctx<'a> {
    pub(super) fn loc(&self, offset: u32) -> Location {
        self.linked.map.locate(&self.m.src, offset)
    }

    pub(super) fn err(&self, func: usize, offset: u32, what: String) -> PostLinkError {
        let function = func_name(self.m, func);
        PostLinkError::Getter {
            at: self.loc(offset),
            function,
            what,
        }
    }

    /// The getter call at statement `s` of function `f`: its constant's
    /// ID, default bytes, size and layout, the buffer register, the
    /// pieces the caller reads back and the statements the rewrite
    /// removes.
    pub(super) fn site(
        &self,
        f: usize,
        s: usize,
        ops: CallOps<'a>,
        named: GetterName,
    ) -> Result<Site<'a>, PostLinkError> {
        let call = stmts(self.m, f)[s];
        let err = |what: String| self.err(f, call.span.start, what);
        if ops.args.len() != 3 {
            return Err(err(format!(
                "getter {} is called with {} arguments; the ABI has 3 (symbolic ID, default value, buffer)",
                ops.callee,
                ops.args.len()
            )));
        }
        let retval = ops.retval.ok_or_else(|| {
            err(format!(
                "getter {} is called without a return value",
                ops.callee
            ))
        })?;
        let decl = func(self.m, named.decl)
            .ok_or_else(|| err(format!("getter {} is not declared", ops.callee)))?;
        let ret = decl
            .returns
            .first()
            .ok_or_else(|| err(format!("getter {} has no return parameter", ops.callee)))?;
        let (ret_size, ret_align) = (ret.size(), ret.alignment());

        let CallSequence {
            mut removed,
            args,
            pieces,
        } = self.call_sequence(f, s, &ops, retval, ret_size)?;
        let [id_arg, default_arg, buffer_arg] = args;
        let id_text = self.traced_id(f, call.span.start, id_arg)?;
        let (default_var, default_off) =
            self.traced_default(f, call.span.start, default_arg, &id_text.id)?;
        let (symbolic_id, entity) = self.constant_id(f, call.span.start, &id_text, default_var)?;
        let ctx_err =
            |what: String| err(format!("specialization constant '{symbolic_id}': {what}"));
        let (size, align, narrowed) = if named.scalar {
            let (size, signed) = named.width.unwrap_or((ret_size, false));
            let narrowed = (size < ret_size).then_some(Narrow { size, signed });
            (size, size, narrowed)
        } else {
            (ret_size, ret_align, None)
        };
        let default = self.bytes_of(
            f,
            call.span.start,
            default_var,
            default_off,
            size,
            &symbolic_id,
        )?;
        let buffer_reg = match buffer_arg.0.value {
            Some((w, 0)) if buffer_arg.0.single && w.starts_with('%') => w,
            _ => {
                return Err(super::with_handler_advice(ctx_err(
                    "the buffer argument is not a register".into(),
                )));
            }
        };
        if let Some(n) = narrowed {
            for p in &pieces {
                if p.offset != 0 || p.dests.len() != 1 {
                    return Err(ctx_err(format!(
                        "a {}-byte scalar is read back at offset {} with {} registers",
                        n.size,
                        p.offset,
                        p.dests.len()
                    )));
                }
            }
        }
        removed.sort_by_key(|s| s.start);
        Ok(Site {
            func: f,
            at: call.span.start,
            symbolic_id,
            lto_symbol: id_text
                .lto_key
                .map(|k| self.intern(markup::lto_slot_symbol(k, size, align).as_bytes())),
            entity,
            size,
            align,
            default,
            // A scalar getter's type, or a 16-bit float class read through
            // the composite getter (the only composites it names).
            scalar_kind: named.kind,
            narrowed,
            buffer_reg,
            buffer_param: None,
            pieces,
            removed,
        })
    }

    /// The statements of the call sequence of the getter call at statement
    /// `s` — its enclosing block, from `{` (or the body's start) to `}`:
    /// the call, its argument stores and parameter declarations (to be
    /// removed), what each argument stores, and the loads of its return
    /// value `retval` (of `ret_size` bytes) after it.
    fn call_sequence(
        &self,
        f: usize,
        s: usize,
        ops: &CallOps<'a>,
        retval: &str,
        ret_size: u32,
    ) -> Result<CallSequence<'a>, PostLinkError> {
        let m = self.m;
        let body = stmts(m, f);
        let call = body[s];
        let (lo, hi) = enclosing_block(body, s);
        let mut removed = Vec::with_capacity(8);
        removed.push(call.span);
        let mut arg_src: [Option<(Operand<'a>, usize)>; 3] = [None, None, None];
        let mut pieces = Vec::new();
        for (j, st) in body.iter().enumerate().take(hi).skip(lo) {
            let op = m.text(st.op);
            if st.kind == StmtKind::Decl && op == ".param" {
                let declared = m.last_word(st);
                if declared.is_some_and(|d| d == retval || ops.args.contains(&d)) {
                    removed.push(st.span);
                }
            } else if j < s
                && m.opcode(st) == Some("st")
                && m.instr(st)?.is_some_and(|i| i.has("param"))
            {
                let o = m.operands(st)?;
                if let Some((name, _)) = o.first().and_then(|a| address(m, a))
                    && let Some(k) = ops.args.iter().position(|a| *a == name)
                {
                    arg_src[k] = o.get(1).map(|v| (Operand::of(m, v), j));
                    removed.push(st.span);
                }
            } else if j > s
                && m.opcode(st) == Some("ld")
                && let Some(load) = m.instr(st)?.filter(|i| i.has("param"))
            {
                let o = m.operands(st)?;
                let Some((name, off)) = o.get(1).and_then(|a| address(m, a)) else {
                    continue;
                };
                if name != retval {
                    continue;
                }
                let ty = load
                    .type_text()
                    .filter(|t| ptx::scalar_type_size(t).is_some())
                    .ok_or_else(|| {
                        self.err(f, st.span.start, format!("cannot read the type of {op:?}"))
                    })?;
                let vec = load.vector();
                let dests: Vec<&str> = o[0]
                    .iter()
                    .filter(|t| t.kind == TokenKind::Word)
                    .map(|t| t.text(&m.src))
                    .collect();
                let elem = ptx::scalar_type_size(ty).unwrap_or(0);
                let end = off as u64 + (elem * vec) as u64;
                if dests.len() != vec as usize || off < 0 || end > ret_size as u64 {
                    return Err(self.err(
                        f,
                        st.span.start,
                        format!("{op} of the getter's return value at offset {off} does not fit its {ret_size} bytes"),
                    ));
                }
                pieces.push(Piece {
                    stmt: st.span,
                    ty,
                    dests,
                    offset: off as u32,
                });
            }
        }
        let mut arg = |k: usize, what: &str| -> Result<(Operand<'a>, usize), PostLinkError> {
            arg_src[k].take().ok_or_else(|| {
                let e = self.err(
                    f,
                    call.span.start,
                    format!(
                        "no st.param stores the {what} argument ({}) of the getter call",
                        ops.args[k]
                    ),
                );
                // The buffer is the kernel_handler's: one the kernel did not
                // receive (a local variable) has none to give.
                if k == 2 {
                    super::with_handler_advice(e)
                } else {
                    e
                }
            })
        };
        let args = [
            arg(0, "symbolic ID")?,
            arg(1, "default value")?,
            arg(2, "buffer")?,
        ];
        Ok(CallSequence {
            removed,
            args,
            pieces,
        })
    }

    /// The symbolic ID's text, traced from the ID argument stored at
    /// statement `stored` back to a string of the module (`at`: the call's
    /// offset, where errors point).
    fn traced_id(
        &self,
        f: usize,
        at: u32,
        (operand, stored): (Operand<'a>, usize),
    ) -> Result<IdText, PostLinkError> {
        match self.trace_operand(f, operand, stored)? {
            Value::Symbol(name, off) => self.id_text(f, at, name, off),
            Value::Param(p, _) => Err(self.err(
                f,
                at,
                format!(
                    "the symbolic ID comes from parameter {p}, not from a string in this module: the getter cannot be traced"
                ),
            )),
            Value::Loaded { at: load, .. } => Err(self.err(
                f,
                load,
                "the symbolic ID is loaded from memory, not taken from a string of the module: the getter cannot be traced".into(),
            )),
        }
    }

    /// The default value's variable and offset, traced from the default
    /// argument; for a constant named by its C++ entity, that variable's
    /// symbol names the constant.
    fn traced_default(
        &self,
        f: usize,
        at: u32,
        (operand, stored): (Operand<'a>, usize),
        label: &str,
    ) -> Result<(&'a str, i64), PostLinkError> {
        match self.trace_operand(f, operand, stored)? {
            Value::Symbol(name, off) => Ok((name, off)),
            Value::Param(p, _) => Err(self.err(
                f,
                at,
                format!(
                    "specialization constant '{label}': the default value comes from parameter {p}, not from a variable: the getter cannot be traced"
                ),
            )),
            Value::Loaded { at: load, .. } => Err(self.err(
                f,
                load,
                format!("specialization constant '{label}': the default value's address is loaded from memory, not taken from a variable: the getter cannot be traced"),
            )),
        }
    }

    /// The constant's symbolic ID: the string's, or, where the string says
    /// the constant is named by its C++ entity, the name demangled from its
    /// default's symbol `default_var` (with that entity).
    fn constant_id(
        &self,
        f: usize,
        at: u32,
        id_text: &IdText,
        default_var: &'a str,
    ) -> Result<(Rc<str>, Option<EntityOf<'a>>), PostLinkError> {
        if !id_text.from_entity {
            return Ok((Rc::clone(&id_text.id), None));
        }
        let known = self.entity_ids.borrow().get(default_var).cloned();
        let id = match known {
            Some(id) => id,
            None => {
                let id: Rc<str> = markup::entity_id(default_var)
                    .ok_or_else(|| {
                        self.err(
                            f,
                            at,
                            format!(
                                "specialization constant '{}': its default's symbol \
                                 {default_var} does not demangle as \
                                 ptxspec::detail::default_of<NAME>, which names the constant \
                                 (give it an explicit ID with PTXSPEC_SPECIALIZATION_ID_NAMED)",
                                id_text.id
                            ),
                        )
                    })?
                    .into();
                self.entity_ids
                    .borrow_mut()
                    .insert(default_var, Rc::clone(&id));
                id
            }
        };
        let internal = self.variable(f, at, default_var)?.linkage == ptx::Linkage::Internal;
        Ok((
            id,
            Some(EntityOf {
                default_var,
                internal,
            }),
        ))
    }

    /// One shared copy of each LTO symbol's name (every getter of a
    /// constant names the same).
    pub(super) fn intern(&self, bytes: &[u8]) -> Rc<str> {
        let mut names = self.names.borrow_mut();
        if let Some(n) = names.iter().find(|n| n.as_bytes() == bytes) {
            return Rc::clone(n);
        }
        let n: Rc<str> = String::from_utf8_lossy(bytes).into();
        names.push(Rc::clone(&n));
        n
    }

    pub(super) fn variable(
        &self,
        f: usize,
        at: u32,
        name: &str,
    ) -> Result<&'a ptx::Variable, PostLinkError> {
        match self.by_name.get(name).map(|&i| &self.m.items[i].kind) {
            Some(ItemKind::Variable(v)) if v.linkage != ptx::Linkage::Extern => Ok(v),
            Some(ItemKind::Variable(_)) => Err(self.err(
                f,
                at,
                format!("variable {name} is only declared (.extern) in the linked module"),
            )),
            _ => Err(self.err(f, at, format!("{name} is not a variable of the module"))),
        }
    }

    /// The bytes of a variable as initialized (zeros without initializer).
    pub(super) fn var_bytes(
        &self,
        f: usize,
        at: u32,
        name: &'a str,
    ) -> Result<Rc<Vec<u8>>, PostLinkError> {
        if let Some(b) = self.var_cache.borrow().get(name) {
            return Ok(Rc::clone(b));
        }
        let v = self.variable(f, at, name)?;
        let size = v
            .size()
            .ok_or_else(|| self.err(f, at, format!("variable {name} has no known size")))?;
        // Checked before anything of the declared size is allocated.
        let max = crate::layout::MAX_CONSTANT_BYTES;
        if size > max {
            return Err(self.err(
                f,
                at,
                format!(
                    "variable {name} has {size} bytes: a specialization constant's default or \
                     symbolic ID holds at most {max}"
                ),
            ));
        }
        let bytes = Rc::new(match v.init {
            None => vec![0; size as usize],
            Some(_) => self.m.initializer_bytes(v).ok_or_else(|| {
                self.err(
                    f,
                    at,
                    format!("the initializer of {name} is not plain numbers"),
                )
            })?,
        });
        self.var_cache.borrow_mut().insert(name, Rc::clone(&bytes));
        Ok(bytes)
    }

    /// What the string at `name+off` says: the symbolic ID and, with the
    /// header's markup, the constant's LTO key ([`markup::read`]).
    pub(super) fn id_text(
        &self,
        f: usize,
        at: u32,
        name: &'a str,
        off: i64,
    ) -> Result<IdText, PostLinkError> {
        if let Some(t) = self.id_cache.borrow().get(&(name, off)) {
            return Ok(t.clone());
        }
        let bytes = self.var_bytes(f, at, name)?;
        let tail = usize::try_from(off)
            .ok()
            .and_then(|o| bytes.get(o..))
            .unwrap_or(&[]);
        let text = markup::read(tail).map_err(|what| {
            self.err(
                f,
                at,
                format!("the symbolic ID in {name} at offset {off} {what}"),
            )
        })?;
        self.id_cache.borrow_mut().insert((name, off), text.clone());
        Ok(text)
    }

    pub(super) fn bytes_of(
        &self,
        f: usize,
        at: u32,
        name: &'a str,
        off: i64,
        size: u32,
        id: &str,
    ) -> Result<Vec<u8>, PostLinkError> {
        let bytes = self.var_bytes(f, at, name)?;
        usize::try_from(off)
            .ok()
            .and_then(|o| bytes.get(o..o + size as usize))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| {
                self.err(
                    f,
                    at,
                    format!(
                        "specialization constant '{id}': the default value variable {name} has {} bytes, \
                         too few for a {size}-byte value at offset {off}",
                        bytes.len()
                    ),
                )
            })
    }
}
