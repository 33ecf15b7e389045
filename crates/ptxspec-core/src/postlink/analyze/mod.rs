//! Finds the getter calls of a linked module and what each one needs: the
//! symbolic ID, the default value, the type's size and alignment, the pieces
//! the caller reads back, and the register with the buffer pointer (traced to
//! a kernel's `kernel_handler` parameter). Also the static call graph.
//!
//! [`analyze`] is the pipeline; each job has its module: `callgraph`
//! (symbols, getter declarations, calls), `sites` (one getter call and the
//! variables it names), `trace` (registers back to symbols and parameters),
//! `debug` (the `-G` fallback: the buffer in the last parameter),
//! `launchers` (device-side launches that pass the handler on), `scalars`
//! (types as mangled names and loads spell them). `Ctx` holds what they
//! share, with caches that the tracing of thousands of getters fills.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::fasthash::{FxHashMap, FxHashSet};
use std::rc::Rc;

use super::PostLinkError;
use super::link::{Linked, Location};
use crate::layout::{LayoutError, ScalarKind};
use crate::ptx::{self, Function, ItemKind, Module, Span, Stmt, StmtKind, Token, TokenKind};

mod callgraph;
mod launchers;
pub mod markup;
mod scalars;
mod sites;
mod trace;

use callgraph::{CallGraph, CallOps, GetterName, call_ops, func, stmts};
pub(crate) use callgraph::{func_name, reachable};
use markup::EntityOf;
use scalars::{mangled_kind, mangled_scalar, ptx_kind};
use sites::IdText;
pub(crate) use trace::address;
use trace::{DefList, Value};

/// What to do where a getter's buffer cannot be traced to the kernel's
/// `kernel_handler` parameter: every such error, whatever shape the code
/// took (a local handler, one a helper made, one copied away), ends with it.
const HANDLER_ADVICE: &str = "a kernel_handler must be the kernel's last parameter \
     (`__global__ void k(..., ptxspec::kernel_handler h)`), passed on to the functions that \
     read constants, not a local variable";

/// `e` with [`HANDLER_ADVICE`], where it does not say it already.
pub(super) fn with_handler_advice(mut e: PostLinkError) -> PostLinkError {
    if let PostLinkError::Getter { what, .. } = &mut e
        && !what.contains("last parameter")
    {
        what.push_str("; ");
        what.push_str(HANDLER_ADVICE);
    }
    e
}

/// Substrings that mark the getter functions (DPC++'s names, any mangling).
pub(crate) const SCALAR_GETTER: &str = "__sycl_getScalar2020SpecConstantValue";
pub(crate) const COMPOSITE_GETTER: &str = "__sycl_getComposite2020SpecConstantValue";

pub(crate) fn is_getter_name(name: &str) -> bool {
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

/// Every getter of one symbolic ID names one constant, whichever image it
/// ends up in: they must agree on its size, scalar type and default (an
/// explicit ID given to two constants, or one equal to another constant's
/// name, must not merge them). The error is at the getter that disagrees
/// with the first.
fn one_constant_per_id(ctx: &Ctx, sites: &[Site]) -> Result<(), PostLinkError> {
    let mut first: FxHashMap<&str, &Site> = FxHashMap::default();
    for s in sites {
        if let Some(why) = crate::props::PropertySets::unwritable_name(&s.symbolic_id) {
            return Err(ctx.err(
                s.func,
                s.at,
                format!(
                    "specialization constant ID {:?} cannot be written into the image's property file: \
                     {why}. Give the constant another ID",
                    s.symbolic_id
                ),
            ));
        }
        let Some(f) = first.get(&*s.symbolic_id) else {
            first.insert(&s.symbolic_id, s);
            continue;
        };
        let id = s.symbolic_id.to_string();
        let conflict = |what: String| LayoutError::Conflicting {
            symbolic_id: id.clone(),
            what,
        };
        let problem = if f.size != s.size {
            Some(LayoutError::InconsistentSize {
                symbolic_id: id.clone(),
                expected: f.size,
                got: s.size,
            })
        } else if let (Some(a), Some(b)) = (f.scalar_kind, s.scalar_kind)
            && a != b
        {
            Some(conflict(format!(
                "typed {} and {}",
                a.cpp_name(),
                b.cpp_name()
            )))
        } else if f.default != s.default {
            let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
            Some(conflict(format!(
                "with the default values {} and {}",
                hex(&f.default),
                hex(&s.default)
            )))
        } else {
            None
        };
        if let Some(source) = problem {
            return Err(PostLinkError::Layout {
                at: ctx.loc(s.at),
                source,
            });
        }
    }
    Ok(())
}

/// A getter call site.
#[derive(Clone, Debug)]
pub struct Site<'a> {
    /// Item index of the function that makes the call.
    pub func: usize,
    /// Offset of the call statement (for messages and ordering).
    pub at: u32,
    pub symbolic_id: Rc<str>,
    /// The external device constant that the header's LTO flavour reads
    /// for this constant (`lto_slot<KEY, SIZE, ALIGN>`), for getters with
    /// the header's markup.
    pub lto_symbol: Option<Rc<str>>,
    /// For an ID that is the C++ entity's name: which entity.
    pub entity: Option<EntityOf<'a>>,
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
    ///
    /// A composite's leaves are the scalars its code reads: the loads'
    /// destinations that `used` says the function reads again. A vector
    /// load also fills registers from the value's padding (`ld.param.v4.b8
    /// {%rs4, %rs5, %rs6, %rs7}` for a `char` and three bytes of tail
    /// padding), which nothing reads: they are not values.
    pub fn leaves(&self, used: impl Fn(&str) -> bool) -> Vec<(u32, ScalarKind)> {
        let mut leaves: Vec<(u32, ScalarKind)> = match self.scalar_kind {
            Some(k) => vec![(0, k)],
            None => self
                .pieces
                .iter()
                .flat_map(|p| {
                    let elem = ptx::scalar_type_size(p.ty).unwrap_or(1);
                    let kind = ptx_kind(p.ty);
                    let used = &used;
                    p.dests.iter().enumerate().filter_map(move |(i, d)| {
                        kind.filter(|_| used(d))
                            .map(|k| (p.offset + i as u32 * elem, k))
                    })
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
    /// Kernels that take a `ptxspec::kernel_handler` (their mangled name
    /// says so) but read no constant through it: the runtime still passes
    /// that parameter (a null pointer).
    pub unused_handlers: Vec<(usize, usize)>,
}

/// Whether a kernel's Itanium-mangled name ends with the parameter type
/// `ptxspec::kernel_handler` (`N7ptxspec14kernel_handlerE`, or with the
/// namespace abbreviated as an earlier `ptxspec::` type's substitution).
pub(crate) fn takes_kernel_handler_last(mangled: &str) -> bool {
    mangled.starts_with("_Z")
        && mangled.contains("7ptxspec")
        && mangled.ends_with("14kernel_handlerE")
}

/// An `extern "C"` kernel (no mangled name to say so) whose last parameter
/// has the shape a `kernel_handler` has in PTX — 8 bytes of a class type,
/// `.param .align 8 .b8 NAME[8]` — and which its body never reads: the
/// handler of a kernel that reads no constant, which the runtime passes
/// itself as for a C++ name.
fn unread_handler_shape(m: &Module, f: &Function) -> bool {
    let Some(last) = f.params.last() else {
        return false;
    };
    let name = m.text(f.name);
    let shaped = !name.starts_with("_Z")
        && last.ty == "b8"
        && last.array == Some(8)
        && last.align == Some(8);
    let read = f.body.as_ref().is_some_and(|b| {
        ptx::lex::word_positions(m.text(b.span), m.text(last.name))
            .next()
            .is_some()
    });
    shaped && !read
}

impl Analysis<'_> {
    /// Indices in `sites` of the getter calls in item `f`.
    pub(crate) fn sites_of(&self, f: usize) -> std::ops::Range<usize> {
        let lo = self.sites.partition_point(|s| s.func < f);
        lo..lo + self.sites[lo..].partition_point(|s| s.func == f)
    }
}

struct Ctx<'a> {
    linked: &'a Linked,
    m: &'a Module,
    by_name: FxHashMap<&'a str, usize>,
    /// Per function item: (caller item, call statement index) pairs.
    callers: FxHashMap<usize, Vec<(usize, usize)>>,
    /// Variable → its bytes as initialized.
    var_cache: RefCell<FxHashMap<&'a str, Rc<Vec<u8>>>>,
    /// (string variable, offset) → what the string there says: every
    /// getter of a constant names the same string.
    id_cache: RefCell<FxHashMap<(&'a str, i64), IdText>>,
    /// Default variable → the symbolic ID its symbol demangles to.
    entity_ids: RefCell<FxHashMap<&'a str, Rc<str>>>,
    /// (function, defining statement) → what tracing found there, for
    /// definitions far from their use (the buffer pointer, which every
    /// getter of a function traces to the same load).
    traced: RefCell<FxHashMap<(usize, usize), Value<'a>>>,
    /// (function, register) → every instruction index that writes it, for
    /// registers defined far from their use (the buffer pointer).
    def_lists: RefCell<FxHashMap<(usize, &'a str), DefList>>,
    /// (function, parameter, by reference) triples already shown to carry
    /// the buffer (or its address) from a kernel's last parameter.
    buffer_params_ok: RefCell<FxHashSet<(usize, usize, bool)>>,
    /// Interned LTO symbol names.
    names: RefCell<Vec<Rc<str>>>,
}

pub fn analyze(linked: &Linked) -> Result<Analysis<'_>, PostLinkError> {
    let m = &linked.module;
    let CallGraph {
        by_name,
        getter_decls,
        callees,
        extern_calls,
        callers,
        getter_calls,
    } = CallGraph::of(m)?;
    let ctx = Ctx {
        linked,
        m,
        by_name,
        callers,
        var_cache: RefCell::default(),
        id_cache: RefCell::default(),
        entity_ids: RefCell::default(),
        traced: RefCell::default(),
        def_lists: RefCell::default(),
        buffer_params_ok: RefCell::default(),
        names: RefCell::default(),
    };
    let mut sites = Vec::with_capacity(getter_calls.len());
    let mut buffer_params = HashMap::new();
    for (f, s, ops, getter) in getter_calls {
        let mut site = ctx.site(f, s, ops, getter)?;
        let st = stmts(m, f)[s];
        site.buffer_param = ctx
            .buffer_origin(
                f,
                site.buffer_reg,
                s,
                st.span.start,
                &mut buffer_params,
                &mut FxHashSet::default(),
            )
            .map_err(with_handler_advice)?;
        sites.push(site);
    }
    markup::disambiguate(&mut sites, linked)?;
    one_constant_per_id(&ctx, &sites)?;
    let launchers = if sites.is_empty() {
        Vec::new()
    } else {
        launchers::passing_the_handler_on(m, &callees, &extern_calls, &mut buffer_params)
    };
    let unused_handlers = m
        .items
        .iter()
        .enumerate()
        .filter(|(k, _)| !buffer_params.contains_key(k))
        .filter_map(|(k, item)| match &item.kind {
            ItemKind::Function(f)
                if f.is_kernel
                    && f.params.last().is_some_and(|p| p.size() == 8)
                    && (takes_kernel_handler_last(m.text(f.name))
                        || unread_handler_shape(m, f)) =>
            {
                Some((k, f.params.len() - 1))
            }
            _ => None,
        })
        .collect();
    Ok(Analysis {
        sites,
        callees,
        getter_decls,
        buffer_params,
        extern_calls,
        launchers,
        unused_handlers,
    })
}
