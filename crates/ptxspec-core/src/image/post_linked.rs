//! A device image as the post-link wrote it: PTX (and, for LTO builds, its
//! units' LTO-IR), the buffer's layout and defaults, the kernels'
//! signatures and what the image needs of a device.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use super::Delivery;
use super::ImageError as Error;
use super::signature::KernelSignature;

use super::LtoIr;
use crate::digest::Digest;
use crate::features::Requirements;
use crate::props::{ImageProps, PropertySets, SpecConstProps};

/// Where a constant lives in an image's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Its offset in the buffer, in bytes.
    pub offset: u32,
    /// Its size in bytes.
    pub size: u32,
}

impl Slot {
    /// Writes `value`, the value of constant `symbolic_id` (for messages),
    /// here in `blob`: an error where its size is not the slot's or the
    /// slot lies past `blob`. (No "compiled with its defaults" check, which
    /// [`ImageData::write_value`] makes and [`ImageData::check_settable`] is: a
    /// launch layout that takes values is of an image that can take them.)
    #[inline]
    pub fn write(self, blob: &mut [u8], symbolic_id: &str, value: &[u8]) -> Result<(), Error> {
        if self.size as usize != value.len() {
            return Err(self.wrong_size(symbolic_id, value.len()));
        }
        let len = blob.len();
        match blob.get_mut(self.offset as usize..self.offset as usize + value.len()) {
            Some(place) => super::few_bytes::copy_few(place, value),
            None => return Err(past_the_values(symbolic_id, len)),
        }
        Ok(())
    }

    #[cold]
    fn wrong_size(self, symbolic_id: &str, given: usize) -> Error {
        Error::SpecConst {
            id: symbolic_id.to_string(),
            what: format!(
                "specialization constant '{symbolic_id}' has {} bytes, {given} given",
                self.size,
            ),
        }
    }
}

/// Constant `symbolic_id`'s slot lies past the `len` bytes of the values.
#[cold]
fn past_the_values(symbolic_id: &str, len: usize) -> Error {
    Error::SpecConst {
        id: symbolic_id.to_string(),
        what: format!(
            "specialization constant '{symbolic_id}' lies past the {len} bytes of the values"
        ),
    }
}

/// An image's LTO-IR and its identity in the cubin caches.
#[derive(Debug)]
pub struct LtoImage {
    /// The LTO-IR of the image's translation units.
    pub ir: LtoIr,
    /// Its identity in the cubin caches: the SHA-256 of the `.ltoir`
    /// bytes, or of what it was compiled from
    /// ([`ImageData::with_ltoir_known_as`]).
    pub identity: Digest,
}

/// A device image: emulated PTX, its buffer layout and default values, its
/// kernels, and optionally the LTO-IR of its translation units.
#[derive(Clone, Debug)]
pub struct ImageData {
    id: String,
    ptx: PtxText,
    ltoir: Option<Arc<LtoImage>>,
    slots: crate::fasthash::FxHashMap<String, Slot>,
    defaults: Vec<u8>,
    kernels: Vec<KernelSignature>,
    /// Where the image's own PTX finds the values (recorded once, here).
    placement: Delivery,
    /// The `.prop` text (read in place for an embedded image, else kept):
    /// with the PTX and LTO-IR, what tells two images of one ID apart.
    props_text: PropsText,
    requirements: Requirements,
    info: ImageProps,
    /// Functions the image calls without defining them, and the ones it
    /// defines with external linkage (computed when a link asks).
    symbols: OnceLock<(Vec<String>, Vec<String>)>,
    /// Whether the PTX declares an external function (found once).
    declares_extern_function: OnceLock<bool>,
    /// Per kernel defined in the PTX, which parameters may hold an address
    /// (read once, when a launch layout first asks).
    address_params: OnceLock<Vec<(String, Vec<bool>)>>,
}

/// An image's PTX: text it owns, or text embedded in the program, read in
/// place and copied into a shared string only when code asks for one
/// (emulated and native builds do, an LTO build does not: a new process's
/// first disk-cache hit then copies no PTX).
#[derive(Clone, Debug)]
enum PtxText {
    Owned(Arc<String>),
    Embedded {
        text: &'static str,
        shared: OnceLock<Arc<String>>,
    },
}

/// An image's `.prop` text: a program's own (read in place), or a copy.
#[derive(Clone, Debug)]
enum PropsText {
    Owned(Box<str>),
    Embedded(&'static str),
}

impl PropsText {
    fn as_str(&self) -> &str {
        match self {
            PropsText::Owned(text) => text,
            PropsText::Embedded(text) => text,
        }
    }
}

impl PtxText {
    fn as_str(&self) -> &str {
        match self {
            PtxText::Owned(text) => text,
            PtxText::Embedded { text, .. } => text,
        }
    }

    fn shared(&self) -> &Arc<String> {
        match self {
            PtxText::Owned(text) => text,
            PtxText::Embedded { text, shared } => {
                shared.get_or_init(|| Arc::new((*text).to_string()))
            }
        }
    }
}

impl ImageData {
    /// An image from post-linked PTX and its `.prop` text (kernel
    /// signatures come from the property file).
    pub fn new(
        id: impl Into<String>,
        ptx: impl Into<String>,
        props: &str,
    ) -> Result<ImageData, Error> {
        ImageData::with_ptx(
            id.into(),
            PtxText::Owned(Arc::new(ptx.into())),
            PropsText::Owned(props.into()),
        )
    }

    /// [`new`](Self::new) of PTX embedded in the program: read in place,
    /// copied only where [`ptx`](Self::ptx) is asked for.
    pub fn embedded(
        id: impl Into<String>,
        ptx: &'static str,
        props: &'static str,
    ) -> Result<ImageData, Error> {
        let shared = OnceLock::new();
        ImageData::with_ptx(
            id.into(),
            PtxText::Embedded { text: ptx, shared },
            PropsText::Embedded(props),
        )
    }

    fn with_ptx(id: String, ptx: PtxText, props_text: PropsText) -> Result<ImageData, Error> {
        let props = props_text.as_str();
        let bad = |what: String| Error::BadImage {
            image: id.clone(),
            what,
        };
        let sets = PropertySets::parse(props).map_err(|e| bad(e.to_string()))?;
        let schema = |source| Error::Schema {
            image: id.clone(),
            source,
        };
        let sc = SpecConstProps::read(&sets).map_err(schema)?;
        let (kernels, marked) = KernelSignature::read_all(&sets).map_err(schema)?;
        let requirements = Requirements::read(&sets).map_err(schema)?;
        let info = ImageProps::read(&sets).map_err(schema)?;
        let defaults = sc.default_values.clone().unwrap_or_default();
        let offsets = sc.buffer_offsets().ok_or_else(|| {
            bad(
                "specialization constants are not in the emulated (one descriptor each) form, \
                 or their sizes add up past 4 GiB"
                    .into(),
            )
        })?;
        let mut slots = crate::fasthash::FxHashMap::default();
        for ((name, descs), offset) in sc.constants.iter().zip(offsets) {
            let size = descs.first().map_or(0, |d| d.size);
            if offset
                .checked_add(size)
                .is_none_or(|end| end as usize > defaults.len())
            {
                return Err(bad("default values are shorter than the layout".into()));
            }
            slots.insert(name.clone(), Slot { offset, size });
        }
        // The defaults of an AOT image, or constants no kernel reads, are in
        // the code: nothing reaches a kernel at launch.
        let placement = if info.spec_consts_replaced_with_default || slots.is_empty() {
            Delivery::InCode
        } else {
            marked
        };
        for k in &kernels {
            if let Some(b) = k.buffer_param()
                && placement == Delivery::ParamSpace
                && k.reads_constants()
                && (k.params[b].size as usize) < defaults.len()
            {
                return Err(bad(format!(
                    "kernel {} takes {} bytes of values in its parameter space, but the buffer has {}",
                    k.name,
                    k.params[b].size,
                    defaults.len()
                )));
            }
        }
        Ok(ImageData {
            id,
            ptx,
            ltoir: None,
            slots,
            defaults,
            kernels,
            placement,
            props_text,
            requirements,
            info,
            symbols: OnceLock::new(),
            declares_extern_function: OnceLock::new(),
            address_params: OnceLock::new(),
        })
    }

    /// Whether `other` is the same image: the same ID, PTX, property sets
    /// and LTO-IR (two crates may embed different images of one stem).
    pub fn same_as(&self, other: &ImageData) -> bool {
        self.id == other.id
            && self.props_text.as_str() == other.props_text.as_str()
            && self.ptx.as_str() == other.ptx.as_str()
            && self.ltoir.as_ref().map(|l| l.identity) == other.ltoir.as_ref().map(|l| l.identity)
    }

    /// The same image with the LTO-IR of its units (a `.ltoir` file).
    pub fn with_ltoir(self, bytes: &[u8]) -> Result<ImageData, Error> {
        self.with_ltoir_known_as(bytes, Digest::of(bytes))
    }

    /// [`with_ltoir`](Self::with_ltoir), the LTO-IR known in the cubin
    /// caches by `identity` rather than by its bytes' hash: NVRTC's LTO-IR
    /// of one source differs from compile to compile, so an image compiled
    /// at run time is known by what it was compiled from (its source,
    /// options and compiler), the same in every process of a fleet.
    pub fn with_ltoir_known_as(self, bytes: &[u8], identity: Digest) -> Result<ImageData, Error> {
        let ir = LtoIr::from_bytes(bytes);
        self.with_read_ltoir(ir, identity)
    }

    /// [`with_ltoir`](Self::with_ltoir) of a container embedded in the
    /// program, read in place; `sha256`, where the registration gives it,
    /// is the SHA-256 of `bytes` as the build script found it (else it is
    /// found here). A new process whose cubins are in a cache then reads
    /// no LTO-IR but the units' headers. A `sha256` that is not the bytes'
    /// would give their cubins another's identity: registrations that
    /// ptxspec-build generates compute it from the file they embed.
    pub fn with_embedded_ltoir(
        self,
        bytes: &'static [u8],
        sha256: Option<[u8; 32]>,
    ) -> Result<ImageData, Error> {
        let identity = sha256.map_or_else(|| Digest::of(bytes), Digest);
        self.with_read_ltoir(LtoIr::from_static(bytes), identity)
    }

    fn with_read_ltoir(
        mut self,
        ir: Result<LtoIr, super::ContainerError>,
        identity: Digest,
    ) -> Result<ImageData, Error> {
        let ir = ir.map_err(|e| Error::BadImage {
            image: self.id.clone(),
            what: e.to_string(),
        })?;
        self.ltoir = Some(Arc::new(LtoImage { ir, identity }));
        Ok(self)
    }

    /// The image's name (the post-link's file stem).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The post-link's PTX (emulated, or AOT with the defaults).
    pub fn ptx(&self) -> &Arc<String> {
        self.ptx.shared()
    }

    /// The LTO-IR of the image's units, for an LTO build.
    pub fn ltoir(&self) -> Option<&Arc<LtoImage>> {
        self.ltoir.as_ref()
    }

    /// Its kernels' signatures.
    pub fn kernels(&self) -> &[KernelSignature] {
        &self.kernels
    }

    /// What the image needs of a device (`SYCL/device requirements`).
    pub fn requirements(&self) -> &Requirements {
        &self.requirements
    }

    /// What the image says of itself: AOT mark, device runtime, LTO
    /// symbols, value types.
    pub fn info(&self) -> &ImageProps {
        &self.info
    }

    /// Where constant `symbolic_id` lives in the buffer.
    pub fn slot(&self, symbolic_id: &str) -> Option<Slot> {
        self.slots.get(symbolic_id).copied()
    }

    /// Checks a value type (`ty`, named `type_name` in the message) of
    /// constant `symbolic_id` against the scalars the image records its
    /// kernels reading: each must be a scalar of `ty` at the same offset
    /// that it takes ([`ScalarKind::takes`](crate::layout::ScalarKind::takes)),
    /// or fall in `ty`'s padding.
    /// Sizes are checked elsewhere; an image that records no types (DPC++'s,
    /// or ptxspec's before they were recorded) checks nothing.
    pub fn check_value_type(
        &self,
        symbolic_id: &str,
        ty: &crate::layout::SpecType,
        type_name: &str,
    ) -> Result<(), Error> {
        let Some((_, recorded)) = self
            .info
            .value_types
            .iter()
            .find(|(id, _)| id == symbolic_id)
        else {
            return Ok(());
        };
        let mut leaves = Vec::new();
        ty.for_each_leaf(0, &mut |offset, kind| leaves.push((offset, kind)));
        for &(offset, kind) in recorded {
            let given = leaves.iter().find(|l| l.0 == offset).map(|l| l.1);
            // Bytes that are padding in `ty` may be read by a kernel that
            // copies the whole value (a vec<float, 3>'s fourth element): a
            // recorded scalar that no scalar of `ty` overlaps is fine.
            let overlaps = |&(o, k): &(u32, crate::layout::ScalarKind)| {
                o < offset + kind.size() && offset < o + k.size()
            };
            if given.is_none() && !leaves.iter().any(overlaps) {
                continue;
            }
            if !given.is_some_and(|g| kind.takes(g)) {
                return Err(Error::SpecConst {
                    id: symbolic_id.to_string(),
                    what: format!(
                        "specialization constant '{symbolic_id}' holds {} at byte {offset}, but {type_name} has {} there",
                        kind.cpp_name(),
                        given.map_or("no scalar", |g| g.cpp_name())
                    ),
                });
            }
        }
        Ok(())
    }

    /// What an LTO link of the image defines: each LTO symbol with its
    /// value — from `blob` (the image's buffer with the values set) for the
    /// image's own constants, the recorded default for constants of its
    /// translation units that are outside its layout.
    pub fn lto_definitions<'s>(
        &'s self,
        blob: &'s [u8],
    ) -> Result<Vec<super::Definition<'s>>, Error> {
        // Two constants of internal linkage with one C++ name in two units
        // (`NAME@UNIT`) have one LTO key: an image with both cannot be
        // linked (their units' own images can).
        let symbols = &self.info.lto_symbols;
        for (i, a) in symbols.iter().enumerate() {
            if let Some(b) = symbols[..i].iter().find(|b| b.symbol == a.symbol) {
                return Err(Error::BadImage {
                    image: self.id.clone(),
                    what: format!(
                        "constants '{}' and '{}' read the same LTO symbol {} (constants of \
                         internal linkage with one name in two translation units): split the \
                         image per source, rename one, or give each an explicit ID \
                         (PTXSPEC_SPECIALIZATION_ID_NAMED)",
                        b.symbolic_id, a.symbolic_id, a.symbol
                    ),
                });
            }
        }
        symbols
            .iter()
            .map(|s| {
                let bytes = match (&s.default, self.slot(&s.symbolic_id)) {
                    (Some(d), _) => d.as_slice(),
                    (None, Some(slot)) => blob
                        .get(slot.offset as usize..(slot.offset as usize + slot.size as usize))
                        .ok_or_else(|| Error::BadImage {
                            image: self.id.clone(),
                            what: format!("the values do not hold LTO symbol {}", s.symbol),
                        })?,
                    (None, None) => {
                        return Err(Error::BadImage {
                            image: self.id.clone(),
                            what: format!("LTO symbol {} names no constant of the image", s.symbol),
                        });
                    }
                };
                Ok(super::Definition {
                    symbol: &s.symbol,
                    align: s.align,
                    bytes,
                })
            })
            .collect()
    }

    /// The symbolic IDs of its constants.
    pub fn symbolic_ids(&self) -> impl Iterator<Item = &str> {
        self.slots.keys().map(String::as_str)
    }

    /// Whether the image has specialization constants.
    pub fn has_constants(&self) -> bool {
        !self.slots.is_empty()
    }

    /// The default-values blob (the buffer's initial contents).
    pub fn default_blob(&self) -> &[u8] {
        &self.defaults
    }

    /// The signature of kernel `name`, if the image defines it.
    pub fn kernel(&self, name: &str) -> Option<&KernelSignature> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// Where the image's own PTX (the post-link's, emulated) finds the
    /// values: in its code (AOT, or no kernel reads a constant), in global
    /// memory, or in the parameter space. How a build passes them is
    /// [`delivery`](super::delivery()) of this and the code it loads.
    pub fn placement(&self) -> Delivery {
        self.placement
    }

    /// Writes `value` over the constant `symbolic_id` in `blob` (this
    /// image's buffer contents); a constant the image does not have, a
    /// value of the wrong size, or an image compiled ahead of time with its
    /// defaults is `spec_const_error`.
    pub fn write_value(
        &self,
        blob: &mut [u8],
        symbolic_id: &str,
        value: &[u8],
    ) -> Result<(), Error> {
        self.check_settable(symbolic_id)?;
        self.constant_slot(symbolic_id)?
            .write(blob, symbolic_id, value)
    }

    /// The slot of constant `symbolic_id`; one the image does not have is
    /// `spec_const_error`.
    pub fn constant_slot(&self, symbolic_id: &str) -> Result<Slot, Error> {
        self.slot(symbolic_id).ok_or_else(|| Error::SpecConst {
            id: symbolic_id.to_string(),
            what: format!(
                "kernel image {} has no specialization constant '{symbolic_id}'",
                self.id
            ),
        })
    }

    /// An error when the image was compiled with its constants replaced by
    /// their defaults (`--mode aot`): a value set on it would be ignored.
    pub fn check_settable(&self, symbolic_id: &str) -> Result<(), Error> {
        if self.info.spec_consts_replaced_with_default {
            return Err(Error::SpecConst {
                id: symbolic_id.to_string(),
                what: format!(
                    "specialization constant '{symbolic_id}' cannot be set: kernel image {} was compiled ahead of \
                     time with its defaults (specConstsReplacedWithDefault)",
                    self.id
                ),
            });
        }
        Ok(())
    }

    /// The defaults with `values` written over the constants this image has
    /// (a bundle's values span all its images; others are skipped).
    pub fn blob_with(&self, values: &BTreeMap<String, Vec<u8>>) -> Result<Vec<u8>, Error> {
        let mut blob = self.defaults.clone();
        for (id, v) in values.iter().filter(|(id, _)| self.slot(id).is_some()) {
            self.write_value(&mut blob, id, v)?;
        }
        Ok(blob)
    }

    /// Whether the PTX may declare an external function: some `.extern`
    /// followed (after white space) by `.func`. Conservative (a comment
    /// that says so counts too); where it is false, the image calls nothing
    /// outside itself and [`link_symbols`](Self::link_symbols) need not
    /// parse it for a link's check. Found once per image.
    pub fn declares_extern_function(&self) -> bool {
        *self.declares_extern_function.get_or_init(|| {
            let ptx = self.ptx.as_str();
            // `contains` is std's vectorized search; most kernels' PTX has
            // no `.func` at all (every device function inlined), and the
            // word-by-word search below is then not needed.
            ptx.contains(".func")
                && ptx
                    .match_indices(".extern")
                    .any(|(at, word)| ptx[at + word.len()..].trim_start().starts_with(".func"))
        })
    }

    /// Which parameters of kernel `signature` may hold an address
    /// ([`AddressParams`](super::AddressParams)): as the kernel's PTX shows
    /// (`addresses`; the module is parsed once per image), else — where the
    /// PTX does not parse or does not define the kernel — every parameter of
    /// 8 bytes or more. A launch passes such a parameter device memory only.
    pub fn address_params(&self, signature: &KernelSignature) -> super::AddressParams {
        let kernels = self.address_params.get_or_init(|| {
            let Ok(m) = crate::ptx::parse("image.ptx", self.ptx.as_str().to_string()) else {
                return Vec::new();
            };
            m.items
                .iter()
                .filter_map(|i| match &i.kind {
                    crate::ptx::ItemKind::Function(f) if f.is_kernel && f.body.is_some() => Some((
                        m.text(f.name).to_string(),
                        super::addresses::may_hold_address(&m, f),
                    )),
                    _ => None,
                })
                .collect()
        });
        match kernels.iter().find(|(k, _)| *k == signature.name) {
            Some((_, holds)) => super::AddressParams::from_fn(signature.params.len(), |i| {
                holds.get(i).copied().unwrap_or(true)
            }),
            None => super::AddressParams::every_wide(signature),
        }
    }

    /// The same image, whose PTX is known to declare an external function
    /// or not (`declares`, as [`declares_extern_function`](Self::declares_extern_function)
    /// would find it): a registration generated at build time says so,
    /// and the PTX need not be searched at run time. Where the image is
    /// wrongly said to declare none, a call to a function no image defines
    /// fails when the code loads rather than when the bundle is built.
    pub fn with_extern_function_known(self, declares: bool) -> ImageData {
        let _ = self.declares_extern_function.set(declares);
        self
    }

    /// Functions called but not defined here (besides the driver's and the
    /// device runtime's), and functions defined with external linkage.
    pub fn link_symbols(&self) -> &(Vec<String>, Vec<String>) {
        self.symbols.get_or_init(|| {
            let Ok(m) =
                crate::ptx::parse(format!("{}.ptx", self.id), self.ptx.as_str().to_string())
            else {
                return (Vec::new(), Vec::new());
            };
            let mut undefined = Vec::new();
            let mut defined = Vec::new();
            for item in &m.items {
                if let crate::ptx::ItemKind::Function(f) = &item.kind {
                    let name = m.text(f.name).to_string();
                    match (&f.body, f.linkage) {
                        (Some(_), crate::ptx::Linkage::Visible | crate::ptx::Linkage::Weak) => {
                            defined.push(name)
                        }
                        (None, crate::ptx::Linkage::Extern)
                            if !crate::driver_symbols::is_resolved_by_driver(&name)
                                && m.src.matches(name.as_str()).count() > 1 =>
                        {
                            undefined.push(name)
                        }
                        _ => {}
                    }
                }
            }
            (undefined, defined)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Descriptor;

    /// `.prop` text with these constants' descriptors and default values.
    fn props(constants: &[(&str, Vec<Descriptor>)], defaults: usize) -> String {
        use crate::props::{DEFAULT_VALUES_SET, PropertyValue, SPEC_CONSTANTS_SET, encode_u32s};
        let mut sets = PropertySets::default();
        for (name, descs) in constants {
            let words: Vec<u32> = descs
                .iter()
                .flat_map(|d| [d.id, d.offset, d.size])
                .collect();
            sets.set_mut(SPEC_CONSTANTS_SET)
                .insert(*name, PropertyValue::bytes(encode_u32s(&words)));
        }
        sets.set_mut(DEFAULT_VALUES_SET)
            .insert("all", PropertyValue::bytes(vec![0; defaults]));
        sets.to_text()
    }

    #[test]
    fn sizes_that_wrap_are_an_error_not_a_panic() {
        let d = |id, size| Descriptor {
            id,
            offset: 0,
            size,
        };
        // Offsets 0 and 0xFFFF_FFF0: the second constant's end wraps.
        let text = props(
            &[("a", vec![d(0, 0xFFFF_FFF0)]), ("b", vec![d(1, 0x20)])],
            16,
        );
        let e = ImageData::new("x", "", &text).expect_err("an error");
        assert!(matches!(e, Error::BadImage { .. }), "{e}");
        // Sizes that add up past 4 GiB.
        let text = props(
            &[
                ("a", vec![d(0, 0x8000_0000)]),
                ("b", vec![d(1, 0x8000_0000)]),
                ("c", vec![d(2, 4)]),
            ],
            16,
        );
        assert!(ImageData::new("x", "", &text).is_err());
        // A constant past the default values.
        let text = props(&[("a", vec![d(0, 8)])], 4);
        assert!(ImageData::new("x", "", &text).is_err());
    }

    #[test]
    fn embedded_ptx_is_shared_once_asked_for_and_is_the_same_image_as_owned_ptx() {
        const PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n// .extern .func f\n";
        let text = props(&[("a", vec![Descriptor::new(0, 0, 4)])], 4);
        let text: &'static str = Box::leak(text.into_boxed_str());
        let embedded = ImageData::embedded("x", PTX, text).unwrap();
        let owned = ImageData::new("x", PTX, text).unwrap();
        // Read in place before anything asks for the shared string.
        assert!(embedded.declares_extern_function());
        assert!(embedded.same_as(&owned) && owned.same_as(&embedded));
        let first = Arc::clone(embedded.ptx());
        assert_eq!(first.as_str(), PTX);
        assert!(Arc::ptr_eq(&first, embedded.ptx()), "one copy, made once");
        let other = ImageData::new("x", ".version 8.0\n", text).unwrap();
        assert!(!embedded.same_as(&other));
    }
}
