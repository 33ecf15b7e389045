//! Finds the getter calls of a linked module and what each one needs: the
//! symbolic ID, the default value, the type's size and alignment, the pieces
//! the caller reads back, and the register with the buffer pointer (traced to
//! a kernel's `kernel_handler` parameter). Also the static call graph.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::fasthash::{FxHashMap, FxHashSet};
use std::rc::Rc;

use super::PostLinkError;
use super::link::{Linked, Location};
use crate::layout::ScalarKind;
use crate::ptx::{self, Function, ItemKind, Module, Span, Stmt, StmtKind, Token, TokenKind};

/// Substrings that mark the getter functions (DPC++'s names, any mangling).
pub const SCALAR_GETTER: &str = "__sycl_getScalar2020SpecConstantValue";
pub const COMPOSITE_GETTER: &str = "__sycl_getComposite2020SpecConstantValue";

/// Prefix of the external device constants of the header's LTO flavour.
pub const LTO_SYMBOL_PREFIX: &str = "ptxspec_lto_";

pub fn is_getter_name(name: &str) -> bool {
    name.contains(SCALAR_GETTER) || name.contains(COMPOSITE_GETTER)
}

/// One `ld.param` of the getter's return value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The whole `ld.param` statement, which the rewrite replaces.
    pub stmt: Span,
    /// Its element type without the dot (`b32`, `f32`, `b8`).
    pub ty: &'a str,
    /// Destination registers (one, or 2/4 for `.v2`/`.v4`).
    pub dests: Vec<&'a str>,
    /// Byte offset in the returned value.
    pub offset: u32,
}

/// A getter call site.
#[derive(Clone, Debug)]
pub struct Site<'a> {
    /// Item index of the function that makes the call.
    pub func: usize,
    /// Offset of the call statement (for messages and ordering).
    pub at: u32,
    pub symbolic_id: Rc<str>,
    /// The external device constant that the header's LTO flavour declares
    /// for this constant (the bytes after the symbolic ID's NUL), if any.
    pub lto_symbol: Option<Rc<str>>,
    pub size: u32,
    pub align: u32,
    pub default: Vec<u8>,
    /// The scalar type of a scalar getter, from its mangled name.
    pub scalar_kind: Option<ScalarKind>,
    /// A scalar returned in a wider return register (`bool`, `char`,
    /// `short` come back as `.b32`): loads use the constant's own width,
    /// extended by its signedness.
    pub narrowed: Option<Narrow>,
    /// Register holding the buffer pointer at the call.
    pub buffer_reg: &'a str,
    /// The kernel parameter `buffer_reg` was read from with `ld.param`, when
    /// the call is in the kernel itself and tracing found it there.
    pub buffer_param: Option<&'a str>,
    pub pieces: Vec<Piece<'a>>,
    /// Statements that go away: the call, its argument stores, its
    /// parameter declarations.
    pub removed: Vec<Span>,
}

impl Site<'_> {
    /// The scalars the caller reads, by offset in the value, as far as the
    /// getter's type (scalars) or the return value's loads (composites)
    /// tell: what `ptxspec specialize --set` parses values as.
    pub fn leaves(&self) -> Vec<(u32, ScalarKind)> {
        let mut leaves: Vec<(u32, ScalarKind)> = match self.scalar_kind {
            Some(k) => vec![(0, k)],
            None => self
                .pieces
                .iter()
                .flat_map(|p| {
                    let elem = ptx::scalar_type_size(p.ty).unwrap_or(1);
                    let kind = ptx_kind(p.ty);
                    (0..p.dests.len() as u32)
                        .filter_map(move |i| kind.map(|k| (p.offset + i * elem, k)))
                })
                .collect(),
        };
        leaves.sort_by_key(|l| l.0);
        leaves.dedup_by_key(|l| l.0);
        leaves
    }
}

/// Width and signedness of a narrowed scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Narrow {
    pub size: u32,
    pub signed: bool,
}

/// What the post-link knows about the functions of the module.
pub struct Analysis<'a> {
    /// The getter calls in module order: by function item, then by offset.
    pub sites: Vec<Site<'a>>,
    /// Per item: the items it calls (functions only; empty otherwise).
    pub callees: Vec<Vec<usize>>,
    /// Item indices of getter declarations.
    pub getter_decls: Vec<usize>,
    /// Kernel item → index of its buffer parameter, for kernels that reach
    /// a getter.
    pub buffer_params: HashMap<usize, usize>,
    /// Per item: the external functions (declared, not defined in the
    /// module, getters aside) it calls, each with the call's offset.
    pub extern_calls: Vec<Vec<(usize, u32)>>,
    /// Kernels that pass their kernel_handler to kernels they launch from
    /// device code.
    pub launchers: Vec<usize>,
}

impl Analysis<'_> {
    /// Indices in `sites` of the getter calls in item `f`.
    pub fn sites_of(&self, f: usize) -> std::ops::Range<usize> {
        let lo = self.sites.partition_point(|s| s.func < f);
        lo..lo + self.sites[lo..].partition_point(|s| s.func == f)
    }
}

/// What a register holds, as far as tracing can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value<'a> {
    Symbol(&'a str, i64),
    Param(&'a str, i64),
    /// Loaded from memory (a debug build keeps the `kernel_handler` on the
    /// stack and reads its pointer through `this`): not traceable further.
    /// The load's offset in the module, for messages.
    Memory(u32),
}

struct Ctx<'a> {
    linked: &'a Linked,
    m: &'a Module,
    by_name: FxHashMap<&'a str, usize>,
    /// Per function item: (caller item, call statement index) pairs.
    callers: FxHashMap<usize, Vec<(usize, usize)>>,
    /// Variable → its bytes as initialized.
    var_cache: RefCell<FxHashMap<&'a str, Rc<Vec<u8>>>>,
    /// (string variable, offset) → the symbolic ID there and its LTO
    /// symbol: every getter of a constant names the same string.
    id_cache: RefCell<FxHashMap<(&'a str, i64), IdStrings>>,
    /// (function, defining statement) → what tracing found there, for
    /// definitions far from their use (the buffer pointer, which every
    /// getter of a function traces to the same load).
    traced: RefCell<FxHashMap<(usize, usize), Value<'a>>>,
    /// (function, register) → every instruction index that writes it, for
    /// registers defined far from their use (the buffer pointer).
    def_lists: RefCell<FxHashMap<(usize, &'a str), DefList>>,
    /// (function, parameter) pairs already shown to carry the buffer from
    /// a kernel's last parameter.
    buffer_params_ok: RefCell<FxHashSet<(usize, usize)>>,
    /// Functions whose getters read the buffer pointer from memory.
    opaque_buffer: RefCell<FxHashSet<usize>>,
    /// Interned LTO symbol names.
    names: RefCell<Vec<Rc<str>>>,
}

/// Indices of the instructions that write a register, ascending.
type DefList = Rc<Vec<u32>>;

/// A symbolic ID and the LTO symbol the header's markup gives it.
type IdStrings = (Rc<str>, Option<Rc<str>>);

/// What a getter's (mangled) name says of the constant's type.
#[derive(Clone, Copy)]
struct GetterName {
    /// Its declaration's item.
    decl: usize,
    /// The scalar getter (else the composite one).
    scalar: bool,
    /// Size and signedness of a scalar.
    width: Option<(u32, bool)>,
    kind: Option<ScalarKind>,
}

fn func(m: &Module, item: usize) -> Option<&Function> {
    match &m.items.get(item)?.kind {
        ItemKind::Function(f) => Some(f),
        _ => None,
    }
}

fn stmts(m: &Module, item: usize) -> &[Stmt] {
    func(m, item)
        .and_then(|f| f.body.as_ref())
        .map_or(&[], |b| &b.stmts)
}

/// A `call` statement's pieces: return parameter, callee, arguments.
struct CallOps<'a> {
    retval: Option<&'a str>,
    callee: &'a str,
    args: Vec<&'a str>,
}

fn call_ops<'a>(m: &'a Module, st: &Stmt) -> Result<CallOps<'a>, ptx::ParseError> {
    let ops = m.operands(st)?;
    fn words<'a, 't>(m: &'a Module, toks: &'t [Token]) -> impl Iterator<Item = &'a str> + 't
    where
        'a: 't,
    {
        toks.iter()
            .filter(|t| t.kind == TokenKind::Word)
            .map(|t| t.text(&m.src))
    }
    let mut it = ops.iter();
    let mut first = it.next().unwrap_or(&[]);
    let mut retval = None;
    if first.first().is_some_and(|t| t.is(b'(')) {
        retval = words(m, first).next();
        first = it.next().unwrap_or(&[]);
    }
    let callee = words(m, first).next().unwrap_or_default();
    let args = it.next().map(|a| words(m, a).collect()).unwrap_or_default();
    Ok(CallOps {
        retval,
        callee,
        args,
    })
}

pub fn analyze(linked: &Linked) -> Result<Analysis<'_>, PostLinkError> {
    let m = &linked.module;
    let mut by_name = FxHashMap::default();
    for (i, item) in m.items.iter().enumerate() {
        if let Some(n) = item.name() {
            let defines = match &item.kind {
                ItemKind::Function(f) => f.body.is_some(),
                ItemKind::Variable(v) => v.linkage != ptx::Linkage::Extern,
                _ => false,
            };
            let entry = by_name.entry(m.text(n)).or_insert(i);
            if defines {
                *entry = i;
            }
        }
    }
    let getter_decls: Vec<usize> = (0..m.items.len())
        .filter(|&i| func(m, i).is_some_and(|f| f.body.is_none() && is_getter_name(m.text(f.name))))
        .collect();
    // What each getter's name says, worked out once per declaration.
    let getters: FxHashMap<&str, GetterName> = getter_decls
        .iter()
        .filter_map(|&i| m.items[i].name().map(|n| (i, m.text(n))))
        .map(|(decl, name)| {
            let scalar = name.contains(SCALAR_GETTER);
            (
                name,
                GetterName {
                    decl,
                    scalar,
                    width: mangled_scalar(name),
                    kind: mangled_kind(name),
                },
            )
        })
        .collect();

    // Call graph, and the getter calls to look at.
    let mut callees = vec![Vec::new(); m.items.len()];
    let mut extern_calls = vec![Vec::new(); m.items.len()];
    let mut callers: FxHashMap<usize, Vec<(usize, usize)>> = FxHashMap::default();
    let mut getter_calls = Vec::new();
    for (i, callee_list) in callees.iter_mut().enumerate() {
        for (s, st) in stmts(m, i).iter().enumerate() {
            if st.kind != StmtKind::Instr || !m.text(st.op).starts_with("call") {
                continue;
            }
            let ops = call_ops(m, st)?;
            if let Some(&getter) = getters.get(ops.callee) {
                getter_calls.push((i, s, ops, getter));
            } else if let Some(&c) = by_name.get(ops.callee) {
                if func(m, c).is_some_and(|f| f.body.is_none()) {
                    extern_calls[i].push((c, st.span.start));
                } else if !callee_list.contains(&c) {
                    callee_list.push(c);
                }
                callers.entry(c).or_default().push((i, s));
            }
        }
    }
    let ctx = Ctx {
        linked,
        m,
        by_name,
        callers,
        var_cache: RefCell::default(),
        id_cache: RefCell::default(),
        traced: RefCell::default(),
        def_lists: RefCell::default(),
        buffer_params_ok: RefCell::default(),
        opaque_buffer: RefCell::default(),
        names: RefCell::default(),
    };
    let mut sites = Vec::with_capacity(getter_calls.len());
    let mut buffer_params = HashMap::new();
    for (f, s, ops, getter) in getter_calls {
        let mut site = ctx.site(f, s, ops, getter)?;
        let st = stmts(m, f)[s];
        site.buffer_param = ctx.buffer_origin(
            f,
            site.buffer_reg,
            s,
            st.span.start,
            &mut buffer_params,
            &mut Vec::new(),
        )?;
        sites.push(site);
    }
    // A kernel whose getters read the buffer through memory (debug builds)
    // has it where the ABI puts it: in its last parameter.
    for (k, item) in m.items.iter().enumerate() {
        let ItemKind::Function(f) = &item.kind else {
            continue;
        };
        if !f.is_kernel || f.body.is_none() || buffer_params.contains_key(&k) {
            continue;
        }
        let reaches_opaque =
            reachable(&callees, k).any(|g| ctx.opaque_buffer.borrow().contains(&g));
        if !reaches_opaque {
            continue;
        }
        match f.params.last() {
            Some(p) if p.size() == 8 => {
                buffer_params.insert(k, f.params.len() - 1);
            }
            _ => {
                return Err(ctx.err(
                    k,
                    item.span.start,
                    format!(
                        "kernel {} reaches a getter but its last parameter is not an 8-byte kernel_handler",
                        m.text(f.name)
                    ),
                ));
            }
        }
    }
    // A kernel that launches kernels from device code and stores its last
    // parameter for them passes its kernel_handler on (dynamic
    // parallelism): that parameter carries the buffer too.
    let mut launchers = Vec::new();
    if !sites.is_empty() {
        for (k, item) in m.items.iter().enumerate() {
            let ItemKind::Function(f) = &item.kind else {
                continue;
            };
            if !f.is_kernel || f.body.is_none() || buffer_params.contains_key(&k) {
                continue;
            }
            let launches = reachable(&callees, k).any(|g| {
                extern_calls[g].iter().any(|&(d, _)| {
                    let n = func_name(m, d);
                    n.starts_with("cudaLaunchDevice") || n.starts_with("__cudaCDP2LaunchDevice")
                })
            });
            if !launches {
                continue;
            }
            if let Some(last) = f.params.last().filter(|p| p.size() == 8)
                && passes_on(m, k, m.text(last.name))
            {
                buffer_params.insert(k, f.params.len() - 1);
                launchers.push(k);
            }
        }
    }
    Ok(Analysis {
        sites,
        callees,
        getter_decls,
        buffer_params,
        extern_calls,
        launchers,
    })
}

impl<'a> Ctx<'a> {
    fn loc(&self, offset: u32) -> Location {
        self.linked.map.locate(&self.m.src, offset)
    }

    fn err(&self, func: usize, offset: u32, what: String) -> PostLinkError {
        let function = func_name(self.m, func);
        PostLinkError::Getter {
            at: self.loc(offset),
            function,
            what,
        }
    }

    fn site(
        &self,
        f: usize,
        s: usize,
        ops: CallOps<'a>,
        named: GetterName,
    ) -> Result<Site<'a>, PostLinkError> {
        let m = self.m;
        let body = stmts(m, f);
        let call = body[s];
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
        let decl = func(m, named.decl)
            .ok_or_else(|| err(format!("getter {} is not declared", ops.callee)))?;
        let ret = decl
            .returns
            .first()
            .ok_or_else(|| err(format!("getter {} has no return parameter", ops.callee)))?;
        let (ret_size, ret_align) = (ret.size(), ret.alignment());

        // The statements of this call sequence: from the enclosing block's
        // `{` (or the body's start) to its `}`.
        let (lo, hi) = enclosing_block(body, s);
        // The call, its argument stores and parameter declarations.
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
            } else if st.kind == StmtKind::Instr && j < s && op.starts_with("st.param") {
                let o = m.operands(st)?;
                if let Some((name, _)) = o.first().and_then(|a| address(m, a))
                    && let Some(k) = ops.args.iter().position(|a| *a == name)
                {
                    arg_src[k] = o.get(1).map(|v| (Operand::of(m, v), j));
                    removed.push(st.span);
                }
            } else if st.kind == StmtKind::Instr && j > s && op.starts_with("ld.param") {
                let o = m.operands(st)?;
                let Some((name, off)) = o.get(1).and_then(|a| address(m, a)) else {
                    continue;
                };
                if name != retval {
                    continue;
                }
                let (vec, ty) = ld_type(op).ok_or_else(|| {
                    self.err(f, st.span.start, format!("cannot read the type of {op:?}"))
                })?;
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
                err(format!(
                    "no st.param stores the {what} argument ({}) of the getter call",
                    ops.args[k]
                ))
            })
        };
        let (id_tok, id_at) = arg(0, "symbolic ID")?;
        let (def_tok, def_at) = arg(1, "default value")?;
        let (buf_tok, _) = arg(2, "buffer")?;

        let (symbolic_id, lto_symbol) = match self.trace_operand(f, id_tok, id_at)? {
            Value::Symbol(name, off) => self.id_strings(f, call.span.start, name, off)?,
            Value::Param(p, _) => {
                return Err(err(format!(
                    "the symbolic ID comes from parameter {p}, not from a string in this module: the getter cannot be traced"
                )));
            }
            Value::Memory(load) => {
                return Err(self.err(
                    f,
                    load,
                    "the symbolic ID is loaded from memory, not taken from a string of the module: the getter cannot be traced".into(),
                ));
            }
        };
        let ctx_err =
            |what: String| err(format!("specialization constant '{symbolic_id}': {what}"));
        let scalar = named.scalar;
        let (size, align, narrowed) = if scalar {
            let (size, signed) = named.width.unwrap_or((ret_size, false));
            let narrowed = (size < ret_size).then_some(Narrow { size, signed });
            (size, size, narrowed)
        } else {
            (ret_size, ret_align, None)
        };
        let default = match self.trace_operand(f, def_tok, def_at)? {
            Value::Symbol(name, off) => {
                self.bytes_of(f, call.span.start, name, off, size, &symbolic_id)?
            }
            Value::Param(p, _) => {
                return Err(ctx_err(format!(
                    "the default value comes from parameter {p}, not from a variable: the getter cannot be traced"
                )));
            }
            Value::Memory(load) => {
                return Err(self.err(
                    f,
                    load,
                    format!("specialization constant '{symbolic_id}': the default value's address is loaded from memory, not taken from a variable: the getter cannot be traced"),
                ));
            }
        };
        let buffer_reg = match buf_tok.value {
            Some((w, 0)) if buf_tok.single && w.starts_with('%') => w,
            _ => return Err(ctx_err("the buffer argument is not a register".into())),
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
            lto_symbol,
            size,
            align,
            default,
            scalar_kind: named.kind.filter(|_| scalar),
            narrowed,
            buffer_reg,
            buffer_param: None,
            pieces,
            removed,
        })
    }

    /// What a stored operand holds: a register traced back, or a symbol.
    fn trace_operand(
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
    fn trace(
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
    fn trace_def(
        &self,
        f: usize,
        reg: &'a str,
        j: usize,
        depth: u32,
    ) -> Result<Value<'a>, PostLinkError> {
        let m = self.m;
        let st = &stmts(m, f)[j];
        let op = m.text(st.op);
        let ops = m.operands(st)?;
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
        let base = op.split('.').next().unwrap_or("");
        match base {
            "mov" | "cvta" if ops.len() == 2 => match sym_plus(m, &ops[1]) {
                Some((w, 0)) if w.starts_with('%') => self.trace(f, w, j, depth + 1),
                Some((w, off)) if !w.starts_with('%') => Ok(Value::Symbol(w, off)),
                _ => Err(untraceable()),
            },
            "add" if ops.len() == 3 => {
                let (a, b) = (sym_plus(m, &ops[1]), number(m, &ops[2]));
                let (a, imm) = match (a, b) {
                    (Some(a), Some(imm)) => (a, imm),
                    _ => match (sym_plus(m, &ops[2]), number(m, &ops[1])) {
                        (Some(a), Some(imm)) => (a, imm),
                        _ => return Err(untraceable()),
                    },
                };
                let inner = if a.0.starts_with('%') {
                    self.trace(f, a.0, j, depth + 1)?
                } else {
                    Value::Symbol(a.0, a.1)
                };
                Ok(match inner {
                    Value::Symbol(n, o) => Value::Symbol(n, o + imm),
                    Value::Param(n, o) => Value::Param(n, o + imm),
                    Value::Memory(at) => Value::Memory(at),
                })
            }
            "ld" if op.starts_with("ld.param") && ops.len() == 2 => match address(m, &ops[1]) {
                Some((name, off)) => Ok(Value::Param(name, off)),
                None => Err(untraceable()),
            },
            // A pointer-sized load from memory other than the parameter
            // space: what it reads is not known here.
            "ld" if ops.len() == 2
                && (op.ends_with(".u64") || op.ends_with(".b64") || op.ends_with(".s64")) =>
            {
                Ok(Value::Memory(st.span.start))
            }
            _ => Err(untraceable()),
        }
    }

    /// Checks that the buffer register of a getter call in function `f`
    /// comes from the last parameter of a kernel, through device-function
    /// parameters and their call sites; records each kernel's buffer
    /// parameter.
    ///
    /// Returns the kernel parameter the register was read from when `f` is
    /// that kernel. A pointer read from memory (a debug build's `this`) is
    /// accepted: the kernel's last parameter is then taken as the buffer.
    fn buffer_origin(
        &self,
        f: usize,
        reg: &'a str,
        before: usize,
        at: u32,
        found: &mut HashMap<usize, usize>,
        visiting: &mut Vec<usize>,
    ) -> Result<Option<&'a str>, PostLinkError> {
        let m = self.m;
        let fun = func(m, f)
            .ok_or_else(|| PostLinkError::Internal("getter outside a function".into()))?;
        let value = self.trace(f, reg, before, 0)?;
        if let Value::Memory(_) = value {
            self.opaque_buffer.borrow_mut().insert(f);
            return Ok(None);
        }
        let Value::Param(name, 0) = value else {
            return Err(self.err(
                f,
                at,
                format!(
                    "the buffer pointer comes from {value:?}, not from a kernel_handler parameter \
                     (the kernel's last parameter, passed by value to device functions)"
                ),
            ));
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
            return Ok(Some(name));
        }
        if visiting.contains(&f) || self.buffer_params_ok.borrow().contains(&(f, index)) {
            return Ok(None); // recursion (checked on the way in), or done before
        }
        visiting.push(f);
        for &(caller, s) in self.callers.get(&f).map_or(&[][..], |v| v.as_slice()) {
            let call = stmts(m, caller)[s];
            let ops = call_ops(m, &call)?;
            let Some(arg) = ops.args.get(index) else {
                return Err(self.err(
                    caller,
                    call.span.start,
                    format!("call of {} passes no argument {index}", m.text(fun.name)),
                ));
            };
            let (lo, _) = enclosing_block(stmts(m, caller), s);
            let body = stmts(m, caller);
            let store = (lo..s).rev().find_map(|j| {
                let st = &body[j];
                if st.kind != StmtKind::Instr || !m.text(st.op).starts_with("st.param") {
                    return None;
                }
                let o = m.operands(st).ok()?;
                let (n, _) = address(m, o.first()?)?;
                (n == *arg).then(|| (o.get(1).map(<[Token]>::to_vec), j))
            });
            let Some((Some(src), j)) = store else {
                return Err(self.err(
                    caller,
                    call.span.start,
                    format!("no st.param stores argument {arg} of this call"),
                ));
            };
            match sym_plus(m, &src) {
                Some((w, 0)) if w.starts_with('%') => {
                    self.buffer_origin(caller, w, j, call.span.start, found, visiting)?;
                }
                _ => {
                    return Err(self.err(
                        caller,
                        call.span.start,
                        format!(
                            "the kernel_handler passed to {} is not a register",
                            m.text(fun.name)
                        ),
                    ));
                }
            }
        }
        visiting.pop();
        self.buffer_params_ok.borrow_mut().insert((f, index));
        Ok(None)
    }

    /// One shared copy of each LTO symbol's name (every getter of a
    /// constant names the same).
    fn intern(&self, bytes: &[u8]) -> Rc<str> {
        let mut names = self.names.borrow_mut();
        if let Some(n) = names.iter().find(|n| n.as_bytes() == bytes) {
            return Rc::clone(n);
        }
        let n: Rc<str> = String::from_utf8_lossy(bytes).into();
        names.push(Rc::clone(&n));
        n
    }

    /// Indices of the instructions of `f` that write `reg`, ascending.
    fn def_list(&self, f: usize, reg: &'a str) -> Rc<Vec<u32>> {
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

    fn variable(&self, f: usize, at: u32, name: &str) -> Result<&'a ptx::Variable, PostLinkError> {
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
    fn var_bytes(&self, f: usize, at: u32, name: &'a str) -> Result<Rc<Vec<u8>>, PostLinkError> {
        if let Some(b) = self.var_cache.borrow().get(name) {
            return Ok(Rc::clone(b));
        }
        let v = self.variable(f, at, name)?;
        let size = v
            .size()
            .ok_or_else(|| self.err(f, at, format!("variable {name} has no known size")))?;
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

    /// The symbolic ID (a NUL-terminated string at `name+off`) and, when
    /// the header's markup follows it (`ID\0ptxspec_lto_NAME\0`), the
    /// symbol of the constant in the header's LTO flavour.
    fn id_strings(
        &self,
        f: usize,
        at: u32,
        name: &'a str,
        off: i64,
    ) -> Result<IdStrings, PostLinkError> {
        if let Some(ids) = self.id_cache.borrow().get(&(name, off)) {
            return Ok(ids.clone());
        }
        let bytes = self.var_bytes(f, at, name)?;
        let tail = usize::try_from(off)
            .ok()
            .and_then(|o| bytes.get(o..))
            .unwrap_or(&[]);
        let end = tail.iter().position(|&b| b == 0).ok_or_else(|| {
            self.err(
                f,
                at,
                format!("the symbolic ID in {name} at offset {off} is not NUL-terminated"),
            )
        })?;
        let id: Rc<str> = std::str::from_utf8(&tail[..end])
            .map_err(|_| self.err(f, at, format!("the symbolic ID in {name} is not UTF-8")))?
            .into();
        let rest = &tail[end + 1..];
        let lto = rest
            .iter()
            .position(|&b| b == 0)
            .map(|e| &rest[..e])
            .filter(|s| s.starts_with(LTO_SYMBOL_PREFIX.as_bytes()))
            .filter(|s| s.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_'))
            .map(|s| self.intern(s));
        self.id_cache
            .borrow_mut()
            .insert((name, off), (Rc::clone(&id), lto.clone()));
        Ok((id, lto))
    }

    fn bytes_of(
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

/// Whether function `f` loads parameter `param` as a pointer and stores
/// that register somewhere (into a launch's parameter buffer).
fn passes_on(m: &Module, f: usize, param: &str) -> bool {
    let body = stmts(m, f);
    let loaded: Vec<&str> = body
        .iter()
        .filter(|st| st.kind == StmtKind::Instr && m.text(st.op).starts_with("ld.param"))
        .filter_map(|st| {
            let ops = m.operands(st).ok()?;
            let (name, _) = address(m, ops.get(1)?)?;
            (name == param).then(|| ops.first()?.first().map(|t| t.text(&m.src)))?
        })
        .collect();
    body.iter()
        .filter(|st| st.kind == StmtKind::Instr && m.text(st.op).starts_with("st."))
        .any(|st| {
            m.operands(st).ok().is_some_and(|ops| {
                ops.get(1)
                    .and_then(|v| v.first())
                    .is_some_and(|t| loaded.contains(&t.text(&m.src)))
            })
        })
}

/// Items reachable from `start` through calls, `start` included.
pub fn reachable(callees: &[Vec<usize>], start: usize) -> impl Iterator<Item = usize> {
    let mut seen = std::collections::HashSet::from([start]);
    let mut stack = vec![start];
    let mut order = Vec::new();
    while let Some(f) = stack.pop() {
        order.push(f);
        for &c in callees.get(f).map_or(&[][..], |v| v.as_slice()) {
            if seen.insert(c) {
                stack.push(c);
            }
        }
    }
    order.into_iter()
}

pub fn func_name(m: &Module, item: usize) -> String {
    m.items
        .get(item)
        .and_then(|i| i.name())
        .map_or_else(|| "?".to_string(), |n| m.text(n).to_string())
}

/// `[lo, hi)`: statement indices of the scope around statement `s`.
fn enclosing_block(body: &[Stmt], s: usize) -> (usize, usize) {
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
struct Operand<'a> {
    value: Option<(&'a str, i64)>,
    /// A single token (a bare register or symbol).
    single: bool,
    span: Span,
}

impl<'a> Operand<'a> {
    fn of(m: &'a Module, toks: &[Token]) -> Self {
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

/// `word`, `word+N` or `word-N`.
fn sym_plus<'a>(m: &'a Module, toks: &[Token]) -> Option<(&'a str, i64)> {
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

fn number(m: &Module, toks: &[Token]) -> Option<i64> {
    match toks {
        [n] if n.kind == TokenKind::Number => parse_int(n.text(&m.src)),
        [sign, n] if sign.is(b'-') && n.kind == TokenKind::Number => {
            parse_int(n.text(&m.src)).map(|v| -v)
        }
        _ => None,
    }
}

fn parse_int(t: &str) -> Option<i64> {
    let t = t.trim_end_matches(['u', 'U']);
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

/// `ld.param.v4.b8` → (4, "b8"); `ld.param.f32` → (1, "f32").
fn ld_type(op: &str) -> Option<(u32, &str)> {
    let mut vec = 1;
    let mut ty = None;
    for part in op.split('.').skip(1) {
        if let Some(n) = part.strip_prefix('v').and_then(|n| n.parse().ok()) {
            vec = n;
        } else if ptx::scalar_type_size(part).is_some() {
            ty = Some(part);
        }
    }
    Some((vec, ty?))
}

/// The scalar type in a scalar getter's Itanium-mangled name.
fn mangled_kind(name: &str) -> Option<ScalarKind> {
    let after = &name[name.find(SCALAR_GETTER)? + SCALAR_GETTER.len()..];
    let code = after.strip_prefix('I')?;
    Some(match code.as_bytes().first()? {
        b'b' => ScalarKind::Bool,
        b'c' | b'a' => ScalarKind::I8,
        b'h' => ScalarKind::U8,
        b's' => ScalarKind::I16,
        b't' => ScalarKind::U16,
        b'i' => ScalarKind::I32,
        b'j' => ScalarKind::U32,
        b'l' | b'x' => ScalarKind::I64,
        b'm' | b'y' => ScalarKind::U64,
        b'f' => ScalarKind::F32,
        b'd' => ScalarKind::F64,
        b'D' if code.starts_with("Dh") || code.starts_with("DF16_") => ScalarKind::F16,
        _ => return None,
    })
}

/// The scalar a load of PTX type `ty` reads (`.bN` as an integer).
fn ptx_kind(ty: &str) -> Option<ScalarKind> {
    Some(match ty {
        "f16" => ScalarKind::F16,
        "f32" => ScalarKind::F32,
        "f64" => ScalarKind::F64,
        "s8" => ScalarKind::I8,
        "u8" | "b8" => ScalarKind::U8,
        "s16" => ScalarKind::I16,
        "u16" | "b16" => ScalarKind::U16,
        "s32" => ScalarKind::I32,
        "u32" | "b32" => ScalarKind::U32,
        "s64" => ScalarKind::I64,
        "u64" | "b64" => ScalarKind::U64,
        _ => return None,
    })
}

/// Size and signedness of the scalar type in a getter's Itanium-mangled
/// name (`…ValueIaET_…` is `signed char`).
fn mangled_scalar(name: &str) -> Option<(u32, bool)> {
    let after = &name[name.find(SCALAR_GETTER)? + SCALAR_GETTER.len()..];
    let code = after.strip_prefix('I')?;
    Some(match code.as_bytes().first()? {
        b'b' | b'h' => (1, false),
        b'c' | b'a' => (1, true),
        b's' => (2, true),
        b't' => (2, false),
        b'i' => (4, true),
        b'j' | b'f' => (4, false),
        b'l' | b'x' => (8, true),
        b'm' | b'y' | b'd' => (8, false),
        b'D' if code.starts_with("Dh") || code.starts_with("DF16_") => (2, false),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mangled_scalars() {
        let n = |t: &str| format!("_Z37{SCALAR_GETTER}I{t}ET_PKcPKvS4_");
        assert_eq!(mangled_scalar(&n("b")), Some((1, false)));
        assert_eq!(mangled_scalar(&n("a")), Some((1, true)));
        assert_eq!(mangled_scalar(&n("s")), Some((2, true)));
        assert_eq!(mangled_scalar(&n("y")), Some((8, false)));
        assert_eq!(mangled_scalar(&n("Dh")), Some((2, false)));
        assert_eq!(mangled_scalar(&n("6Padded")), None);
    }

    #[test]
    fn load_types() {
        assert_eq!(ld_type("ld.param.v4.b8"), Some((4, "b8")));
        assert_eq!(ld_type("ld.param.f64"), Some((1, "f64")));
        assert_eq!(ld_type("ld.param"), None);
    }
}
