//! Bundles of the registered images, and what runs where: SYCL 2020's
//! `get_kernel_bundle`, `has_kernel_bundle`, `is_compatible` and
//! `get_kernel_id(s)`, by kernel, by device and by selector.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{
    BundleState, Device, DeviceImage, Executable, Input, KernelBundle, KernelId, SpecMode,
};
use crate::error::Error;
use crate::image::ImageData;
use crate::registry::all_images;

/// The IDs of every registered kernel.
pub fn get_kernel_ids() -> Result<Vec<KernelId>, Error> {
    let mut ids: Vec<KernelId> = Vec::new();
    for img in all_images()? {
        for k in img.kernels() {
            let id = KernelId(k.name.clone());
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(ids)
}

/// The ID of the registered kernel `name` (SYCL 2020's
/// `get_kernel_id<KernelName>()`, by the kernel's name): the name its image
/// has, or — for a kernel declared without `extern "C"` — the one mangled
/// kernel whose C++ function is `name` (`damp`, `ns::damp`). None, or
/// several (overloads), is `kernel_not_found` listing the near names.
pub fn get_kernel_id(name: &str) -> Result<KernelId, Error> {
    match crate::registry::resolve_kernel(name)? {
        Some(found) => Ok(KernelId(found)),
        None => Err(not_registered(name)),
    }
}

/// An input bundle of every registered image.
pub fn get_kernel_bundle() -> Result<KernelBundle<Input>, Error> {
    Ok(KernelBundle::from_image_data(all_images()?))
}

/// An input bundle of the registered images that define `kernels`, holding
/// just those kernels; an unknown kernel is `kernel_not_found`, with the
/// names near it. A kernel declared without `extern "C"` is found by its
/// C++ name too (`damp` for `_Z4dampPfi`) where one kernel has it; the
/// bundle holds it by the name its image has.
pub fn get_kernel_bundle_for(kernels: &[KernelId]) -> Result<KernelBundle<Input>, Error> {
    let mut images: Vec<Arc<ImageData>> = Vec::new();
    let mut ids = Vec::with_capacity(kernels.len());
    for k in kernels {
        let mut img = crate::registry::image_defining(&k.0)?;
        let mut id = k.clone();
        if img.is_none()
            && let Some(name) = crate::registry::resolve_kernel(&k.0)?
        {
            img = crate::registry::image_defining(&name)?;
            id = KernelId(name);
        }
        let Some(img) = img else {
            return Err(not_registered(&k.0));
        };
        if !images.iter().any(|i| Arc::ptr_eq(i, &img)) {
            images.push(img);
        }
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let mut b = KernelBundle::from_image_data(images);
    Arc::make_mut(&mut b.inner).kernels = Arc::new(ids);
    Ok(b)
}

/// Whether an image of `images` defines kernel `name` and some device of
/// `devices` can run that image.
pub(super) fn runs_somewhere(images: &[Arc<ImageData>], name: &str, devices: &[Device]) -> bool {
    images.iter().any(|i| {
        i.kernel(name).is_some() && devices.iter().any(|d| d.check(i.requirements()).is_ok())
    })
}

/// `kernel_not_found` for `name`, listing the registered kernels near it.
fn not_registered(name: &str) -> Error {
    let images = match all_images() {
        Ok(images) => images,
        Err(e) => return e,
    };
    let names = images
        .iter()
        .flat_map(|i| i.kernels())
        .map(|s| s.name.as_str());
    Error::kernel_not_found(
        name,
        format!(
            "no registered image defines kernel {name}{}",
            crate::near::near_suffix(name, names)
        ),
    )
}

/// Whether every device can run the image (its requirements are met).
fn runs_on_all(image: &ImageData, devices: &[Device]) -> bool {
    devices
        .iter()
        .all(|d| d.check(image.requirements()).is_ok())
}

/// An input bundle of the registered images that `selector` keeps and
/// that every device of `devices` can run — empty when it keeps none, as
/// SYCL 2020's `get_kernel_bundle(context, devices, selector)`
/// ([`KernelBundle::is_empty`]). An empty device list is `invalid_object`,
/// as SYCL 2020 says; [`get_kernel_bundle_selected`] asks for no device.
pub fn get_kernel_bundle_selected_on(
    devices: &[Device],
    selector: impl Fn(&DeviceImage<Input>) -> bool,
) -> Result<KernelBundle<Input>, Error> {
    no_devices("get_kernel_bundle_selected_on", devices)?;
    selected(Some(devices), selector)
}

/// An input bundle of the registered images that `selector` keeps, for any
/// device (SYCL 2020's `get_kernel_bundle(context, selector)`, the
/// context's devices being every device) — empty when it keeps none.
pub fn get_kernel_bundle_selected(
    selector: impl Fn(&DeviceImage<Input>) -> bool,
) -> Result<KernelBundle<Input>, Error> {
    selected(None, selector)
}

/// SYCL 2020's `errc::invalid` for an empty list of devices, where a call
/// takes devices.
pub(super) fn no_devices(what: &str, devices: &[Device]) -> Result<(), Error> {
    match devices {
        [] => Err(Error::invalid(
            crate::error::Misuse::EmptyList,
            format!("{what} of an empty list of devices (SYCL 2020: errc::invalid)"),
        )),
        _ => Ok(()),
    }
}

/// The registered images `selector` keeps and every device of `devices`
/// (where given) can run.
fn selected(
    devices: Option<&[Device]>,
    selector: impl Fn(&DeviceImage<Input>) -> bool,
) -> Result<KernelBundle<Input>, Error> {
    let all = all_images()?;
    let mut kept = Vec::new();
    for img in &all {
        let di = DeviceImage {
            image: Arc::clone(img),
            built: None,
            mode: SpecMode::default(),
            _state: PhantomData,
        };
        if !selector(&di) {
            continue;
        }
        if runs_on_all(img, devices.unwrap_or_default()) {
            kept.push(Arc::clone(img));
        }
    }
    let mut b = KernelBundle::from_image_data(kept);
    if let Some(devices) = devices {
        Arc::make_mut(&mut b.inner).devices = Some(devices.iter().map(|d| d.ordinal).collect());
    }
    Ok(b)
}

/// Whether the registered images hold an executable bundle that can run on
/// every device of `devices` ([`has_kernel_bundle_in`] asks of any state).
/// An empty device list is `invalid_object` (SYCL 2020).
pub fn has_kernel_bundle(devices: &[Device]) -> Result<bool, Error> {
    has_kernel_bundle_in::<Executable>(devices)
}

/// SYCL 2020's `has_kernel_bundle<State>(context, devices)`: whether a
/// registered image runs on every device of `devices`, and, for a bundle
/// in the input state, every device has `online_compiler`; in the object
/// state, `online_linker` ([`Device::has`]: NVRTC and nvJitLink load).
/// An empty device list is `invalid_object` (SYCL-CTS
/// `has_kernel_bundle_core_all_states_dev.cpp`,
/// `has_kernel_bundle_zero_device.h`).
pub fn has_kernel_bundle_in<S: BundleState>(devices: &[Device]) -> Result<bool, Error> {
    no_devices("has_kernel_bundle", devices)?;
    Ok(devices_can_hold::<S>(devices) && all_images()?.iter().any(|i| runs_on_all(i, devices)))
}

/// SYCL 2020's `has_kernel_bundle<State>(context, devices, kernel_ids)`:
/// as [`has_kernel_bundle_in`], for bundles that hold every kernel of
/// `kernels`, each defined by a registered image that some device of
/// `devices` can run (SYCL-CTS `has_kernel_bundle_core_*_k_id`). An empty
/// device list is `invalid_object`.
pub fn has_kernel_bundle_of<S: BundleState>(
    devices: &[Device],
    kernels: &[KernelId],
) -> Result<bool, Error> {
    no_devices("has_kernel_bundle", devices)?;
    if !devices_can_hold::<S>(devices) {
        return Ok(false);
    }
    let all = all_images()?;
    let names = || {
        all.iter()
            .flat_map(|i| i.kernels())
            .map(|k| k.name.as_str())
    };
    Ok(kernels.iter().all(|k| {
        crate::near::resolve_kernel(&k.0, names())
            .is_some_and(|name| runs_somewhere(&all, name, devices))
    }))
}

/// Whether every device has what a bundle in state `S` needs.
fn devices_can_hold<S: BundleState>(devices: &[Device]) -> bool {
    S::NEEDS.is_none_or(|aspect| devices.iter().all(|d| d.has(aspect)))
}

/// SYCL 2020's `get_kernel_bundle<input>(context, devices, kernel_ids)`:
/// an input bundle for `devices` of the registered images that define
/// `kernels`, holding just those kernels. A kernel that no device of
/// `devices` can run, or that no image defines, is an error
/// (`invalid_object`; SYCL-CTS
/// `get_kernel_bundle_with_incompatible_kernels.cpp`); so is an empty
/// device list.
pub fn get_kernel_bundle_on(
    devices: &[Device],
    kernels: &[KernelId],
) -> Result<KernelBundle<Input>, Error> {
    no_devices("get_kernel_bundle_on", devices)?;
    let mut b = get_kernel_bundle_for(kernels)?;
    for k in b.kernel_ids() {
        if !runs_somewhere(b.image_data(), &k.0, devices) {
            let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
            return Err(Error::invalid(
                crate::error::Misuse::OtherDevice,
                format!(
                    "kernel {} is compatible with none of the devices {names:?} (SYCL 2020: errc::invalid)",
                    k.0
                ),
            ));
        }
    }
    Arc::make_mut(&mut b.inner).devices = Some(devices.iter().map(|d| d.ordinal).collect());
    Ok(b)
}

/// Whether `device` can run every kernel of `kernels`: each is defined by
/// a registered image whose requirements the device meets (aspects,
/// sub-group size, work-group size).
pub fn is_compatible(kernels: &[KernelId], device: &Device) -> Result<bool, Error> {
    let all = all_images()?;
    let device = std::slice::from_ref(device);
    Ok(kernels.iter().all(|k| runs_somewhere(&all, &k.0, device)))
}
