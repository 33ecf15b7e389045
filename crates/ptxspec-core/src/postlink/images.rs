//! One device image from a linked, analysed module: which kernels and items
//! it keeps, where its buffer goes, its rewritten PTX, its layout and
//! property sets.

use super::{BufferPlacement, Mode, PostLinkError, PostLinkedImage, analyze, link, rewrite};
use crate::driver_symbols::is_device_runtime;
use crate::fasthash::{FxHashMap as HashMap, FxHashSet as HashSet};
use crate::features::Requirements;
use crate::image::{Delivery, HandlerParam, KernelSignature};
use crate::layout::{Layout, Numbering, SpecConstant};
use crate::props::{ImageProps, LtoSymbol, PropertySets, SpecConstProps};
use crate::ptx::{self, Edits, ItemKind, Module, TokenKind};

/// Adds the LTO symbol of `site`'s constant to `symbols`, unless the
/// constant has one there or the getter has no LTO markup; with its default
/// value for constants of other images (which the image's LTO link needs
/// defined).
fn add_lto_symbol(symbols: &mut Vec<LtoSymbol>, site: &analyze::Site, with_default: bool) {
    let Some(symbol) = &site.lto_symbol else {
        return;
    };
    if symbols.iter().any(|s| *s.symbolic_id == *site.symbolic_id) {
        return;
    }
    symbols.push(LtoSymbol {
        symbolic_id: site.symbolic_id.to_string(),
        symbol: symbol.to_string(),
        align: site.align,
        default: with_default.then(|| site.default.clone()),
    });
}

/// The most bytes of kernel parameters every CUDA driver takes (newer ones
/// take 32 764 on Volta and later, with PTX ISA 8.1): what `auto` allows.
pub(crate) const PARAM_SPACE_BYTES: u32 = 4096;

/// A kernel's reads of its kernel_handler pointer (statement, register).
type ParamReads = Vec<(ptx::Span, String)>;

/// The size and alignment of the values where they travel in a kernel's
/// parameter space.
#[derive(Clone, Copy)]
struct ParamBuffer {
    size: u32,
    align: u32,
}

/// Where the image's buffer goes — the post-link's one decision of it: in
/// the code (no buffer) for AOT images and images whose kernels read no
/// constant; global memory for images that launch kernels from device code
/// (which pass each other the kernel_handler's pointer), or when asked; the
/// parameter space when asked (an error where it cannot be) or, for `auto`,
/// where it can — then with its size and alignment, and each buffer
/// kernel's reads of its pointer, in the order of `buffer_kernels`.
fn choose_placement(
    m: &Module,
    asked: BufferPlacement,
    mode: Mode,
    layout: &Layout,
    buffer_kernels: &[(usize, usize)],
    needs_device_runtime: bool,
) -> Result<(Delivery, Option<ParamBuffer>, Vec<ParamReads>), String> {
    let global = Ok((Delivery::GlobalBuffer, None, Vec::new()));
    if mode == Mode::Aot || layout.is_empty() || buffer_kernels.is_empty() {
        return Ok((Delivery::InCode, None, Vec::new()));
    }
    if needs_device_runtime {
        return match asked {
            BufferPlacement::Param => Err(
                "it launches kernels from device code (CUDA's device runtime), which pass \
                 each other the kernel_handler's pointer"
                    .into(),
            ),
            _ => global,
        };
    }
    // The buffer's own size and alignment, not the handler's 8 bytes: the
    // driver's launch of a kernel whose last parameter is 4 bytes costs
    // less host time than one of 8 (BENCHMARKS.md, "launch overhead").
    let align = layout
        .constants()
        .iter()
        .map(|c| c.constant.align())
        .max()
        .unwrap_or(1)
        .max(1);
    let size = (layout.default_blob().len() as u32)
        .max(1)
        .next_multiple_of(align);
    let param = |reads| {
        (
            Delivery::ParamSpace,
            Some(ParamBuffer { size, align }),
            reads,
        )
    };
    let possible = || rewrite::param_placement_possible(m, buffer_kernels, size, align);
    match asked {
        BufferPlacement::Global => global,
        BufferPlacement::Param => possible().map(param),
        BufferPlacement::Auto => possible().map(param).or(global),
    }
}

/// What every image of a module needs, worked out once rather than per
/// image (with thousands of kernels split per kernel, per-image passes over
/// the whole module would make the post-link quadratic).
pub(super) struct Shared<'a> {
    linked: &'a link::Linked,
    analysis: &'a analyze::Analysis<'a>,
    /// Items every image keeps: the header, and the line and debug
    /// information that every function's `.loc`s refer to.
    header: Vec<usize>,
    /// Per input: the first getter site of each constant with an LTO
    /// symbol, ascending.
    lto_sites: Vec<Vec<usize>>,
    /// Per constant, the scalars any getter of the module reads (offset,
    /// kind): what its values are parsed as, the same in every image.
    leaves: HashMap<&'a str, Vec<(u32, crate::layout::ScalarKind)>>,
}

/// The scalars `site`'s caller reads of the value: loads whose
/// destinations the function names again.
fn site_leaves(m: &Module, site: &analyze::Site) -> Vec<(u32, crate::layout::ScalarKind)> {
    let body = match &m.items[site.func].kind {
        ItemKind::Function(f) => f.body.as_ref().map(|b| m.text(b.span)),
        _ => None,
    };
    let used = |reg: &str| {
        reg != "_" && body.is_none_or(|t| crate::ptx::lex::word_positions(t, reg).nth(1).is_some())
    };
    site.leaves(used)
}

impl<'a> Shared<'a> {
    pub(super) fn new(linked: &'a link::Linked, analysis: &'a analyze::Analysis<'a>) -> Self {
        let m = &linked.module;
        let header = (0..m.items.len())
            .filter(|&i| {
                matches!(
                    m.items[i].kind,
                    ItemKind::Version
                        | ItemKind::Target
                        | ItemKind::AddressSize
                        | ItemKind::File
                        | ItemKind::Section
                )
            })
            .collect();
        let inputs = linked.origin.iter().max().map_or(0, |&o| o + 1);
        let mut lto_sites: Vec<Vec<usize>> = vec![Vec::new(); inputs];
        let mut seen: Vec<HashSet<&str>> = vec![HashSet::default(); inputs];
        for (n, site) in analysis.sites.iter().enumerate() {
            let origin = linked.origin[site.func];
            if site.lto_symbol.is_some() && seen[origin].insert(&site.symbolic_id) {
                lto_sites[origin].push(n);
            }
        }
        let mut leaves: HashMap<&str, Vec<(u32, crate::layout::ScalarKind)>> = HashMap::default();
        for site in &analysis.sites {
            let known = leaves.entry(&site.symbolic_id).or_default();
            // A scalar's one leaf (offset 0) is the same at every getter.
            if site.scalar_kind.is_some() && known.iter().any(|l| l.0 == 0) {
                continue;
            }
            for l in site_leaves(m, site) {
                if !known.iter().any(|x| x.0 == l.0) {
                    known.push(l);
                }
            }
            known.sort_by_key(|l| l.0);
        }
        Shared {
            linked,
            analysis,
            header,
            lto_sites,
            leaves,
        }
    }
}

pub(super) fn post_link_image(
    shared: &Shared,
    refs: &mut References,
    selected: &HashSet<usize>,
    kernels: &[usize],
    mode: Mode,
    buffer: BufferPlacement,
    stem: String,
) -> Result<PostLinkedImage, PostLinkError> {
    let (linked, analysis) = (shared.linked, shared.analysis);
    let m = &linked.module;
    let items = image_items(shared, selected);
    let Placed {
        layout,
        offsets,
        uses_buffer,
        growth,
        mut lto_symbols,
        value_types,
    } = place_constants(shared, &items)?;
    let sources = sources_of(shared, refs, selected, &mut lto_symbols)?;
    let buffer_kernels = buffer_kernels(analysis, kernels, &uses_buffer, !layout.is_empty());
    // Kernels launched from device code (dynamic parallelism) are passed
    // the 8-byte kernel_handler their parent has: their buffer stays a
    // pointer to global memory.
    let needs_device_runtime = selected.iter().any(|&f| {
        analysis.extern_calls[f]
            .iter()
            .any(|&(d, _)| is_device_runtime(&analyze::func_name(m, d)))
    });
    let (placement, in_param_space, reads) = choose_placement(
        m,
        buffer,
        mode,
        &layout,
        &buffer_kernels,
        needs_device_runtime,
    )
    .map_err(|reason| PostLinkError::Placement {
        image: stem.clone(),
        reason,
    })?;
    // Per buffer kernel: its buffer parameter's index and name, and (in
    // the parameter space) its reads of the pointer.
    let param_names: HashMap<usize, (usize, &str)> = buffer_kernels
        .iter()
        .filter_map(|&(k, p)| match &m.items[k].kind {
            ItemKind::Function(f) => f.params.get(p).map(|q| (k, (p, m.text(q.name)))),
            _ => None,
        })
        .collect();
    let reads_of: HashMap<usize, &ParamReads> =
        buffer_kernels.iter().map(|&(k, _)| k).zip(&reads).collect();
    let buffer_in = BufferIn {
        param_space: in_param_space,
        param_names: &param_names,
        reads_of: &reads_of,
    };
    let mut text = write_text(shared, &items, &buffer_in, offsets, growth)?;
    if mode == Mode::Aot {
        text = rewrite::specialize(&format!("{stem}.ptx"), &text, layout.default_blob())?;
    }
    let signatures = signatures(shared, kernels, &buffer_in);
    let mut props = PropertySets::default();
    SpecConstProps::write(&layout, &mut props);
    crate::image::write_signatures(&signatures, placement, &mut props);
    let info = ImageProps {
        spec_consts_replaced_with_default: mode == Mode::Aot && !layout.is_empty(),
        needs_device_runtime,
        lto_symbols,
        value_types,
    };
    Ok(PostLinkedImage {
        stem,
        ptx: text,
        layout,
        kernels: signatures,
        placement,
        requirements: Requirements::default(),
        warnings: Vec::new(),
        info,
        sources,
        ltoir: None,
        props,
    })
}

/// The image's items in module order: the module's header and the
/// selected functions and variables, less the getters' declarations.
fn image_items(shared: &Shared, selected: &HashSet<usize>) -> Vec<usize> {
    let mut items: Vec<usize> = shared
        .header
        .iter()
        .chain(
            selected
                .iter()
                .filter(|i| !shared.analysis.getter_decls.contains(i)),
        )
        .copied()
        .collect();
    items.sort_unstable();
    items.dedup();
    items
}

/// The kernels that receive the buffer, each with its buffer parameter's
/// index: those that reach a function reading it (`uses_buffer`), and
/// those that launch kernels from device code where the image has
/// constants (`has_constants`). Where the buffer is — a pointer to global
/// memory or the contents in the parameter space — is chosen for them.
fn buffer_kernels(
    analysis: &analyze::Analysis,
    kernels: &[usize],
    uses_buffer: &HashSet<usize>,
    has_constants: bool,
) -> Vec<(usize, usize)> {
    kernels
        .iter()
        .filter(|&&k| {
            analyze::reachable(&analysis.callees, k).any(|f| uses_buffer.contains(&f))
                || (has_constants && analysis.launchers.contains(&k))
        })
        .filter_map(|&k| analysis.buffer_params.get(&k).map(|&p| (k, p)))
        .collect()
}

/// An image's constants as its getters meet them: the layout, each site's
/// offset (in the order of the items' sites), the functions that read the
/// buffer, about how much the rewrite adds, and the constants' LTO symbols
/// and value types.
struct Placed {
    layout: Layout,
    offsets: Vec<u32>,
    uses_buffer: HashSet<usize>,
    growth: isize,
    lto_symbols: Vec<LtoSymbol>,
    value_types: Vec<(String, Vec<(u32, crate::layout::ScalarKind)>)>,
}

/// Numbers and places the constants of the getter sites of `items` (first
/// encounter in module order). Each item is later written with the edits
/// of its own getters only: the whole module's edits never exist at once.
fn place_constants(shared: &Shared, items: &[usize]) -> Result<Placed, PostLinkError> {
    let (linked, analysis) = (shared.linked, shared.analysis);
    let m = &linked.module;
    let mut layout = Layout::new(Numbering::Emulated);
    let mut offsets: Vec<u32> = Vec::new();
    let mut uses_buffer: HashSet<usize> = HashSet::default();
    let mut growth = 0isize;
    let mut lto_symbols: Vec<LtoSymbol> = Vec::new();
    let mut value_types: Vec<(String, Vec<(u32, crate::layout::ScalarKind)>)> = Vec::new();
    for n in items.iter().flat_map(|&i| analysis.sites_of(i)) {
        let site = &analysis.sites[n];
        // Most getters name a constant placed before: only the first of
        // each makes one (and a size that disagrees fails in `add`).
        let known = layout
            .get(&site.symbolic_id)
            .filter(|p| p.constant.size() == site.size);
        if let Some(placed) = known {
            offsets.push(placed.offset);
        } else {
            let at = || linked.map.locate(&m.src, site.at);
            let c = SpecConstant::opaque(
                site.symbolic_id.to_string(),
                site.size,
                site.align,
                site.default.clone(),
            )
            .map_err(|source| PostLinkError::Layout { at: at(), source })?;
            let i = layout
                .add(c)
                .map_err(|source| PostLinkError::Layout { at: at(), source })?;
            offsets.push(layout.constants()[i].offset);
        }
        add_lto_symbol(&mut lto_symbols, site, false);
        if !value_types.iter().any(|(id, _)| **id == *site.symbolic_id) {
            let leaves = shared
                .leaves
                .get(&*site.symbolic_id)
                .cloned()
                .unwrap_or_default();
            value_types.push((site.symbolic_id.to_string(), leaves));
        }
        uses_buffer.insert(site.func);
        // About what the rewrite adds: each piece becomes ~100 bytes of
        // loads, the call sequence goes (an upper bound close enough that
        // the output is neither copied while it grows nor much too big).
        let removed: u32 = site.removed.iter().map(|r| r.end - r.start).sum();
        growth += 128 * site.pieces.len() as isize - removed as isize;
    }
    Ok(Placed {
        layout,
        offsets,
        uses_buffer,
        growth,
        lto_symbols,
        value_types,
    })
}

/// The translation units an LTO link of the image needs: those its
/// functions come from, and every unit that defines what those units
/// mention (`References::unit_closure`: a unit's LTO-IR holds all of its
/// functions, also kernels of other images and what they call). The link
/// needs every constant they declare, also those of kernels in other
/// images (with their defaults), which are added to `lto_symbols`.
/// Definitions only: a declaration (a getter's, an extern function's)
/// stands in the linked module under the first unit that declared it.
fn sources_of(
    shared: &Shared,
    refs: &mut References,
    selected: &HashSet<usize>,
    lto_symbols: &mut Vec<LtoSymbol>,
) -> Result<Vec<usize>, PostLinkError> {
    let (linked, analysis) = (shared.linked, shared.analysis);
    let m = &linked.module;
    let mut sources: Vec<usize> = selected
        .iter()
        .filter(|&&i| matches!(&m.items[i].kind, ItemKind::Function(f) if f.body.is_some()))
        .map(|&i| linked.origin[i])
        .collect();
    sources.sort_unstable();
    sources.dedup();
    let sources = refs.unit_closure(&linked.origin, sources)?;
    let mut others: Vec<usize> = sources
        .iter()
        .flat_map(|&o| shared.lto_sites.get(o).into_iter().flatten().copied())
        .collect();
    others.sort_unstable();
    for n in others {
        add_lto_symbol(lto_symbols, &analysis.sites[n], true);
    }
    Ok(sources)
}

/// Where an image's kernels find the buffer: in the parameter space (its
/// size and alignment) or through a pointer, each buffer kernel's
/// parameter (index and name), and its reads of the pointer.
struct BufferIn<'a> {
    param_space: Option<ParamBuffer>,
    param_names: &'a HashMap<usize, (usize, &'a str)>,
    reads_of: &'a HashMap<usize, &'a ParamReads>,
}

/// The image's own text, each item with its getters rewritten (and, in the
/// parameter space, its kernels' buffer parameter): not the module's —
/// with thousands of kernels split one per image, module-sized buffers
/// held until written would be thousands of times the module. Sized for
/// what the rewrite adds (`growth`), so that it is never copied while it
/// grows.
fn write_text(
    shared: &Shared,
    items: &[usize],
    buffer: &BufferIn,
    offsets: Vec<u32>,
    growth: isize,
) -> Result<String, PostLinkError> {
    let (linked, analysis) = (shared.linked, shared.analysis);
    let m = &linked.module;
    let (in_param_space, param_names, reads_of) =
        (buffer.param_space, buffer.param_names, buffer.reads_of);
    let own: usize = items.iter().map(|&i| m.items[i].full.range().len()).sum();
    let mut text = String::with_capacity((own as isize + growth).max(0) as usize);
    let mut offsets = offsets.into_iter();
    for &i in items {
        let item = &m.items[i];
        // A kernel's parameter and its reads of the pointer come before
        // its getters in the text: edits made in text order need no sort.
        let mut edits = Edits::new();
        if let Some(ParamBuffer { size, align }) = in_param_space {
            if item.kind == ItemKind::Version {
                rewrite::at_least_version(m, item, (7, 7), &mut edits);
            }
            if let (Some(&(_, name)), Some(r)) = (param_names.get(&i), reads_of.get(&i)) {
                rewrite::param_buffer_kernel(m, i, name, (size, align), r, &mut edits);
            }
        }
        for site in &analysis.sites[analysis.sites_of(i)] {
            let form = match in_param_space {
                None => rewrite::LoadForm::Global,
                Some(_) => match (param_names.get(&i), site.buffer_param) {
                    (Some(&(_, k)), Some(p)) if k == p => rewrite::LoadForm::Param(k),
                    _ => rewrite::LoadForm::Generic,
                },
            };
            let base = offsets.next().ok_or_else(|| {
                PostLinkError::Internal("a getter site without a buffer offset".into())
            })?;
            rewrite::emulate_site(site, base, form, &mut edits);
        }
        // Another item dropped before this one may leave the two items'
        // tokens touching.
        if ptx::joins(&text, &m.src[item.full.range()]) {
            text.push('\n');
        }
        edits
            .apply_range(&m.src, item.full, &mut text)
            .map_err(|at| m.error_at(at.start, rewrite::OVERLAPPING_REWRITES))?;
    }
    if let Some(last) = m.items.last() {
        ptx::push_apart(&mut text, &m.src[last.full.end as usize..]);
    }
    Ok(text)
}

/// Each kernel's signature: its buffer parameter (reading constants, or an
/// unread handler), and the buffer's contents in the parameter space.
fn signatures(shared: &Shared, kernels: &[usize], buffer: &BufferIn) -> Vec<KernelSignature> {
    let (m, analysis) = (&shared.linked.module, shared.analysis);
    kernels
        .iter()
        .map(|&k| {
            let reading = buffer.param_names.get(&k).map(|&(index, _)| HandlerParam {
                index,
                reads_constants: true,
            });
            let unread = || {
                let &(_, index) = analysis.unused_handlers.iter().find(|u| u.0 == k)?;
                Some(HandlerParam {
                    index,
                    reads_constants: false,
                })
            };
            let contents = buffer.param_space.map(|b| (b.size, b.align));
            KernelSignature::of(m, k, reading.or_else(unread), contents)
        })
        .collect()
}

/// Which module-scope symbols each item mentions, computed on demand.
pub(super) struct References<'a> {
    m: &'a Module,
    by_name: HashMap<&'a str, Vec<usize>>,
    cache: HashMap<usize, Vec<usize>>,
}

impl<'a> References<'a> {
    pub(super) fn new(m: &'a Module) -> Self {
        let mut by_name: HashMap<&str, Vec<usize>> = HashMap::default();
        for (i, item) in m.items.iter().enumerate() {
            if let Some(n) = item.name() {
                by_name.entry(m.text(n)).or_default().push(i);
            }
        }
        References {
            m,
            by_name,
            cache: HashMap::default(),
        }
    }

    pub(super) fn of(&mut self, item: usize) -> Result<&[usize], PostLinkError> {
        if !self.cache.contains_key(&item) {
            let span = self.m.items[item].span;
            let toks = ptx::lex::tokens(&self.m.src, span.start, span.end)
                .map_err(|e| self.m.error_at(e.offset, e.what))?;
            let mut out: Vec<usize> = Vec::new();
            for t in toks {
                if t.kind == TokenKind::Word {
                    for &i in self
                        .by_name
                        .get(t.text(&self.m.src))
                        .map_or(&[][..], |v| v.as_slice())
                    {
                        if i != item && !out.contains(&i) {
                            out.push(i);
                        }
                    }
                }
            }
            self.cache.insert(item, out);
        }
        Ok(self.cache.get(&item).map_or(&[], |v| v.as_slice()))
    }

    /// `units`, and every unit that defines a symbol (a function with a
    /// body, a variable that is not `.extern`) that an item of a unit among
    /// them mentions, to a fixed point; ascending. One unit needs no other.
    pub(super) fn unit_closure(
        &mut self,
        origin: &[usize],
        units: Vec<usize>,
    ) -> Result<Vec<usize>, PostLinkError> {
        let count = origin.iter().max().map_or(0, |&o| o + 1);
        if count <= 1 {
            return Ok(units);
        }
        let mut items_of: Vec<Vec<usize>> = vec![Vec::new(); count];
        for (i, &o) in origin.iter().enumerate() {
            items_of[o].push(i);
        }
        let mut have = vec![false; count];
        for &u in &units {
            have[u] = true;
        }
        let m = self.m;
        let defines = |j: usize| match &m.items[j].kind {
            ItemKind::Function(f) => f.body.is_some(),
            ItemKind::Variable(v) => v.linkage != ptx::Linkage::Extern,
            _ => false,
        };
        let mut stack = units;
        while let Some(u) = stack.pop() {
            for &i in &items_of[u] {
                for &j in self.of(i)? {
                    let d = origin[j];
                    if !have[d] && defines(j) {
                        have[d] = true;
                        stack.push(d);
                    }
                }
            }
        }
        Ok((0..count).filter(|&u| have[u]).collect())
    }

    /// The kernels, everything they call, and every symbol those mention.
    pub(super) fn closure(
        &mut self,
        kernels: &[usize],
        callees: &[Vec<usize>],
    ) -> Result<HashSet<usize>, PostLinkError> {
        let mut seen: HashSet<usize> = HashSet::default();
        let mut stack: Vec<usize> = kernels.to_vec();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            stack.extend(callees.get(i).into_iter().flatten().copied());
            let refs = self.of(i)?.to_vec();
            stack.extend(refs);
        }
        // Other kernels mentioned by name are not part of this image.
        let m = self.m;
        seen.retain(|&i| {
            kernels.contains(&i)
                || !matches!(&m.items[i].kind, ItemKind::Function(f) if f.is_kernel)
        });
        Ok(seen)
    }
}
