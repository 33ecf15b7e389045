//! Kernel bundles (SYCL 2020, seed 004): device images in the `Input`,
//! `Object` or `Executable` state, with specialization-constant values.
//!
//! Everything here is CPU-side: building an executable bundle computes each
//! image's buffer contents (emulated) or specializes its PTX with the values
//! (native); a [`Queue`](crate::runtime::Queue) loads the result onto a
//! device when a kernel is first launched from it. Bundles are cheap to
//! clone (one `Arc`) and `Send + Sync`.
//!
//! **Default mode: native.** A bundle is built once with its values and then
//! launched many times, so paying the specialization (PTX rewrite + driver
//! JIT, cached by image and values) once buys kernels that see the values as
//! immediates. Choose [`SpecMode::Emulated`] with
//! [`KernelBundle::with_mode`] where values change often.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::Error;
use crate::features::Requirements;
use crate::postlink::{self, KernelParam, KernelSignature};
use crate::props::{PropertySets, SpecConstProps};
use crate::registry::{self, EmbeddedImage};
use crate::spec_id::{SpecConstType, SpecId};

/// Bundle states; only their types matter.
pub mod state {
    /// Device code as the post-link wrote it; values can be set.
    #[derive(Clone, Copy, Debug)]
    pub struct Input;
    /// Compiled: values are fixed.
    #[derive(Clone, Copy, Debug)]
    pub struct Object;
    /// Linked and ready to launch.
    #[derive(Clone, Copy, Debug)]
    pub struct Executable;
}
pub use state::{Executable, Input, Object};

/// How a bundle delivers specialization-constant values to kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SpecMode {
    /// The PTX is specialized with the values (immediates) before the
    /// driver's JIT compiles it.
    #[default]
    Native,
    /// Kernels load the values from a device buffer.
    Emulated,
}

/// A kernel's identity: its name in the PTX.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId(pub String);

impl KernelId {
    pub fn new(name: impl Into<String>) -> Self {
        KernelId(name.into())
    }
    pub fn name(&self) -> &str {
        &self.0
    }
}

/// Where a constant lives in an image's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub offset: u32,
    pub size: u32,
}

/// A device image: emulated PTX, its buffer layout and default values, and
/// its kernels.
#[derive(Debug)]
pub struct Image {
    pub id: String,
    pub ptx: Arc<String>,
    slots: HashMap<String, Slot>,
    defaults: Vec<u8>,
    pub kernels: Vec<KernelSignature>,
    /// What the image needs of a device (`SYCL/device requirements`).
    pub requirements: Requirements,
}

impl Image {
    /// An image from post-linked PTX and its `.prop` text (kernel
    /// signatures come from the property file).
    pub fn new(id: impl Into<String>, ptx: impl Into<String>, props: &str) -> Result<Image, Error> {
        let id = id.into();
        let bad = |what: String| Error::BadImage {
            image: id.clone(),
            what,
        };
        let sets = PropertySets::parse(props).map_err(|e| bad(e.to_string()))?;
        let sc = SpecConstProps::read(&sets).map_err(bad)?;
        let kernels = KernelSignature::read_all(&sets).map_err(&bad)?;
        let requirements = Requirements::read(&sets).map_err(&bad)?;
        Self::assemble(id, ptx.into(), &sc, kernels, requirements)
    }

    fn assemble(
        id: String,
        ptx: String,
        sc: &SpecConstProps,
        kernels: Vec<KernelSignature>,
        requirements: Requirements,
    ) -> Result<Image, Error> {
        let bad = |what: &str| Error::BadImage {
            image: id.clone(),
            what: what.to_string(),
        };
        let defaults = sc.default_values.clone().unwrap_or_default();
        let offsets = sc.buffer_offsets().ok_or_else(|| {
            bad("specialization constants are not in the emulated (one descriptor each) form")
        })?;
        let mut slots = HashMap::new();
        for ((name, descs), offset) in sc.constants.iter().zip(offsets) {
            let size = descs.first().map_or(0, |d| d.size);
            if (offset + size) as usize > defaults.len() {
                return Err(bad("default values are shorter than the layout"));
            }
            slots.insert(name.clone(), Slot { offset, size });
        }
        Ok(Image {
            id,
            ptx: Arc::new(ptx),
            slots,
            defaults,
            kernels,
            requirements,
        })
    }

    fn from_embedded(e: &EmbeddedImage) -> Result<Image, Error> {
        let mut img = Image::new(e.id, e.ptx, e.props)?;
        // Signatures registered with the image take precedence.
        let registered: Vec<KernelSignature> = registry::kernels()
            .into_iter()
            .filter(|k| k.image == e.id)
            .map(|k| KernelSignature {
                name: k.name.to_string(),
                params: k
                    .params
                    .iter()
                    .map(|&(size, align, kind)| KernelParam {
                        size,
                        align,
                        ptx_type: String::new(),
                        kind: crate::postlink::ParamKind::from_u32(kind)
                            .unwrap_or(crate::postlink::ParamKind::User),
                    })
                    .collect(),
            })
            .collect();
        if !registered.is_empty() {
            img.kernels = registered;
        }
        Ok(img)
    }

    pub fn slot(&self, symbolic_id: &str) -> Option<Slot> {
        self.slots.get(symbolic_id).copied()
    }

    /// The default-values blob (the buffer's initial contents).
    pub fn default_blob(&self) -> &[u8] {
        &self.defaults
    }

    pub fn kernel(&self, name: &str) -> Option<&KernelSignature> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// Writes `value` over the constant `symbolic_id` in `blob` (this
    /// image's buffer contents); a constant the image does not have, or a
    /// value of the wrong size, is `spec_const_error`.
    pub fn write_value(
        &self,
        blob: &mut [u8],
        symbolic_id: &str,
        value: &[u8],
    ) -> Result<(), Error> {
        let s = self.slot(symbolic_id).ok_or_else(|| {
            Error::SpecConst(format!(
                "kernel image {} has no specialization constant '{symbolic_id}'",
                self.id
            ))
        })?;
        if s.size as usize != value.len() {
            return Err(Error::SpecConst(format!(
                "specialization constant '{symbolic_id}' has {} bytes, {} given",
                s.size,
                value.len()
            )));
        }
        blob[s.offset as usize..(s.offset + s.size) as usize].copy_from_slice(value);
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
}

/// The images registered with `inventory` (see [`registry`]), read once.
pub fn registered_images() -> Result<Vec<Arc<Image>>, Error> {
    static IMAGES: OnceLock<Result<Vec<Arc<Image>>, String>> = OnceLock::new();
    IMAGES
        .get_or_init(|| {
            registry::images()
                .into_iter()
                .map(|e| {
                    Image::from_embedded(e)
                        .map(Arc::new)
                        .map_err(|e| e.to_string())
                })
                .collect()
        })
        .clone()
        .map_err(|what| Error::BadImage {
            image: "registry".into(),
            what,
        })
}

/// An image of an executable bundle: the PTX to load and the buffer
/// contents, both fixed.
#[derive(Debug)]
pub struct BuiltImage {
    pub image: Arc<Image>,
    /// Emulated: the image's PTX; native: specialized with `blob`.
    pub ptx: Arc<String>,
    /// The buffer contents (defaults patched with the values).
    pub blob: Arc<Vec<u8>>,
    pub mode: SpecMode,
}

#[derive(Clone, Debug)]
struct Inner {
    images: Vec<Arc<Image>>,
    /// Kernels of the bundle (all kernels of its images unless chosen).
    kernels: Vec<KernelId>,
    mode: SpecMode,
    values: BTreeMap<String, Vec<u8>>,
    built: Vec<Arc<BuiltImage>>,
}

/// A kernel bundle in state `S` ([`Input`], [`Object`] or [`Executable`]).
pub struct KernelBundle<S> {
    inner: Arc<Inner>,
    _state: PhantomData<fn() -> S>,
}

impl<S> Clone for KernelBundle<S> {
    fn clone(&self) -> Self {
        KernelBundle {
            inner: Arc::clone(&self.inner),
            _state: PhantomData,
        }
    }
}

impl<S> std::fmt::Debug for KernelBundle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(std::any::type_name::<S>())
            .field(
                "images",
                &self.inner.images.iter().map(|i| &i.id).collect::<Vec<_>>(),
            )
            .field("kernels", &self.inner.kernels)
            .field("mode", &self.inner.mode)
            .finish()
    }
}

impl<S> KernelBundle<S> {
    fn wrap(inner: Inner) -> Self {
        KernelBundle {
            inner: Arc::new(inner),
            _state: PhantomData,
        }
    }

    pub fn kernel_ids(&self) -> &[KernelId] {
        &self.inner.kernels
    }

    pub fn has_kernel(&self, id: &KernelId) -> bool {
        self.inner.kernels.contains(id)
    }

    pub fn images(&self) -> &[Arc<Image>] {
        &self.inner.images
    }

    pub fn is_empty(&self) -> bool {
        self.inner.kernels.is_empty()
    }

    /// Whether any image of the bundle has specialization constants.
    pub fn contains_specialization_constants(&self) -> bool {
        self.inner.images.iter().any(|i| !i.slots.is_empty())
    }

    /// Whether values reach kernels natively (specialized PTX) rather than
    /// through the emulation buffer.
    pub fn native_specialization_constant(&self) -> bool {
        self.inner.mode == SpecMode::Native
    }

    pub fn has_specialization_constant<T>(&self, id: &SpecId<T>) -> bool {
        self.slot(id.symbolic_id()).is_some()
    }

    fn slot(&self, symbolic_id: &str) -> Option<(Slot, &Arc<Image>)> {
        self.inner
            .images
            .iter()
            .find_map(|i| i.slot(symbolic_id).map(|s| (s, i)))
    }

    /// The value set for `id`, or its default. Unknown IDs and sizes that
    /// differ from `T`'s are `spec_const_error`.
    pub fn get_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &self,
        id: &SpecId<T>,
    ) -> Result<T, Error> {
        let (slot, image) = self.checked_slot(id)?;
        let bytes = match self.inner.values.get(id.symbolic_id()) {
            Some(v) => v.as_slice(),
            None => &image.defaults[slot.offset as usize..(slot.offset + slot.size) as usize],
        };
        Ok(bytemuck::pod_read_unaligned(bytes))
    }

    fn checked_slot<T>(&self, id: &SpecId<T>) -> Result<(Slot, &Arc<Image>), Error> {
        let (slot, image) = self.slot(id.symbolic_id()).ok_or_else(|| {
            Error::SpecConst(format!(
                "no image of this bundle has specialization constant '{}'",
                id.symbolic_id()
            ))
        })?;
        let size = std::mem::size_of::<T>();
        if slot.size as usize != size {
            return Err(Error::SpecConst(format!(
                "specialization constant '{}' has {} bytes, but {} has {size}",
                id.symbolic_id(),
                slot.size,
                std::any::type_name::<T>()
            )));
        }
        Ok((slot, image))
    }

    fn values(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.inner.values
    }
}

impl KernelBundle<Input> {
    /// An input bundle of these images with all their kernels.
    pub fn from_images(images: Vec<Arc<Image>>) -> Self {
        let kernels = images
            .iter()
            .flat_map(|i| i.kernels.iter().map(|k| KernelId(k.name.clone())))
            .collect();
        Self::wrap(Inner {
            images,
            kernels,
            mode: SpecMode::default(),
            values: BTreeMap::new(),
            built: Vec::new(),
        })
    }

    /// Sets the value of a specialization constant (input bundles only, as
    /// SYCL 2020).
    pub fn set_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        id: &SpecId<T>,
        value: T,
    ) -> Result<(), Error> {
        self.checked_slot(id)?;
        Arc::make_mut(&mut self.inner).values.insert(
            id.symbolic_id().to_string(),
            bytemuck::bytes_of(&value).to_vec(),
        );
        Ok(())
    }

    /// The same bundle delivering values in `mode`.
    pub fn with_mode(mut self, mode: SpecMode) -> Self {
        Arc::make_mut(&mut self.inner).mode = mode;
        self
    }
}

impl KernelBundle<Executable> {
    /// The built image that defines `id`.
    pub fn built_image(&self, id: &KernelId) -> Result<&Arc<BuiltImage>, Error> {
        if !self.has_kernel(id) {
            return Err(Error::KernelNotFound(format!(
                "kernel {} is not in this bundle",
                id.0
            )));
        }
        self.inner
            .built
            .iter()
            .find(|b| b.image.kernel(&id.0).is_some())
            .ok_or_else(|| {
                Error::KernelNotFound(format!("no image of this bundle defines kernel {}", id.0))
            })
    }

    /// A kernel of the bundle.
    pub fn get_kernel(&self, id: &KernelId) -> Result<Kernel, Error> {
        let built = Arc::clone(self.built_image(id)?);
        let signature = built
            .image
            .kernel(&id.0)
            .cloned()
            .ok_or_else(|| Error::KernelNotFound(id.0.clone()))?;
        Ok(Kernel {
            id: id.clone(),
            built,
            signature,
        })
    }
}

/// A kernel of an executable bundle, ready to launch.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub id: KernelId,
    pub built: Arc<BuiltImage>,
    pub signature: KernelSignature,
}

/// An input bundle of every registered image.
pub fn get_kernel_bundle() -> Result<KernelBundle<Input>, Error> {
    Ok(KernelBundle::from_images(registered_images()?))
}

/// An input bundle of the registered images that define `kernels`, holding
/// just those kernels; an unknown kernel is `kernel_not_found`.
pub fn get_kernel_bundle_for(kernels: &[KernelId]) -> Result<KernelBundle<Input>, Error> {
    let all = registered_images()?;
    let mut images: Vec<Arc<Image>> = Vec::new();
    for k in kernels {
        let img = all
            .iter()
            .find(|i| i.kernel(&k.0).is_some())
            .ok_or_else(|| {
                Error::KernelNotFound(format!("no registered image defines kernel {}", k.0))
            })?;
        if !images.iter().any(|i| Arc::ptr_eq(i, img)) {
            images.push(Arc::clone(img));
        }
    }
    let mut b = KernelBundle::from_images(images);
    Arc::make_mut(&mut b.inner).kernels = kernels.to_vec();
    Ok(b)
}

/// Compiles an input bundle: its values are fixed from here on.
pub fn compile(input: &KernelBundle<Input>) -> Result<KernelBundle<Object>, Error> {
    Ok(KernelBundle::wrap((*input.inner).clone()))
}

/// Links object bundles into an executable one (an empty list is
/// `invalid_object`; two values for one constant too).
pub fn link(objects: &[KernelBundle<Object>]) -> Result<KernelBundle<Executable>, Error> {
    let mut inner = merge(objects, "link")?;
    inner.built = inner
        .images
        .iter()
        .map(|img| build_image(img, &inner.values, inner.mode))
        .collect::<Result<_, _>>()?;
    Ok(KernelBundle::wrap(inner))
}

/// Compiles and links an input bundle.
pub fn build(input: &KernelBundle<Input>) -> Result<KernelBundle<Executable>, Error> {
    link(&[compile(input)?])
}

/// Joins bundles of one state (an empty list is `invalid_object`).
pub fn join<S>(bundles: &[KernelBundle<S>]) -> Result<KernelBundle<S>, Error> {
    let mut inner = merge(bundles, "join")?;
    let mut built: Vec<Arc<BuiltImage>> = Vec::new();
    for b in bundles {
        for bi in &b.inner.built {
            if !built.iter().any(|x| x.image.id == bi.image.id) {
                built.push(Arc::clone(bi));
            }
        }
    }
    inner.built = built;
    Ok(KernelBundle::wrap(inner))
}

/// Images, kernels and values of several bundles (first mode wins).
fn merge<S>(bundles: &[KernelBundle<S>], what: &str) -> Result<Inner, Error> {
    let first = bundles.first().ok_or_else(|| {
        Error::InvalidObject(format!("{what} of an empty list of kernel bundles"))
    })?;
    let mut inner = Inner {
        images: Vec::new(),
        kernels: Vec::new(),
        mode: first.inner.mode,
        values: BTreeMap::new(),
        built: Vec::new(),
    };
    for b in bundles {
        for img in &b.inner.images {
            if !inner.images.iter().any(|i| i.id == img.id) {
                inner.images.push(Arc::clone(img));
            }
        }
        for k in &b.inner.kernels {
            if !inner.kernels.contains(k) {
                inner.kernels.push(k.clone());
            }
        }
        for (id, v) in b.values() {
            match inner.values.get(id) {
                Some(old) if old != v => {
                    return Err(Error::InvalidObject(format!(
                        "{what}: specialization constant '{id}' has different values in the bundles"
                    )));
                }
                _ => {
                    inner.values.insert(id.clone(), v.clone());
                }
            }
        }
    }
    Ok(inner)
}

type SpecializedKey = (String, Vec<u8>);

/// Specialized PTX by image and values: a repeat build is a lookup.
fn specialized(image: &Image, blob: &[u8]) -> Result<Arc<String>, Error> {
    static CACHE: OnceLock<Mutex<HashMap<SpecializedKey, Arc<String>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (image.id.clone(), blob.to_vec());
    if let Some(hit) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(Arc::clone(hit));
    }
    let ptx = Arc::new(postlink::specialize(
        &format!("{}.ptx", image.id),
        &image.ptx,
        blob,
    )?);
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    // Bounded: the oldest entries go when many value sets were seen.
    if map.len() >= 256 {
        map.clear();
    }
    map.insert(key, Arc::clone(&ptx));
    Ok(ptx)
}

fn build_image(
    image: &Arc<Image>,
    values: &BTreeMap<String, Vec<u8>>,
    mode: SpecMode,
) -> Result<Arc<BuiltImage>, Error> {
    let blob = image.blob_with(values)?;
    let ptx = match mode {
        SpecMode::Native if !image.slots.is_empty() => specialized(image, &blob)?,
        _ => Arc::clone(&image.ptx),
    };
    Ok(Arc::new(BuiltImage {
        image: Arc::clone(image),
        ptx,
        blob: Arc::new(blob),
        mode,
    }))
}

#[cfg(test)]
mod tests;
