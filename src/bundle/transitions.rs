//! From one state to the next: `compile`, `link`, `build` (and their
//! forms for devices), `join`, and the merging of bundles they share.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use super::options::Log;
use super::registered::no_devices;
use super::{
    BuildOptions, BuiltImage, Code, Device, Executable, Inner, Input, KernelBundle, Object, built,
};
use crate::error::Error;
use crate::image::ImageData;

/// SYCL 2020's `errc::invalid` where a call names a device that `bundle`
/// was not made for (a bundle of device 0 built for devices 0 and 1;
/// SYCL-CTS `sycl_build_different_device_for_sycl_build.cpp`,
/// `sycl_compile_exception_if_dev_not_in_set.cpp`).
fn devices_within<S>(
    what: &str,
    bundle: &KernelBundle<S>,
    devices: &[Device],
) -> Result<(), Error> {
    let Some(made_for) = bundle.devices() else {
        return Ok(());
    };
    match devices.iter().find(|d| !made_for.contains(&d.ordinal)) {
        None => Ok(()),
        Some(d) => Err(Error::invalid(
            crate::error::Misuse::OtherDevice,
            format!(
                "{what} for device {} ({}), which the bundle was not made for (its devices: {made_for:?}; \
             SYCL 2020: errc::invalid)",
                d.ordinal, d.name
            ),
        )),
    }
}

/// Images of `images` that some device of `devices` cannot run are
/// `kernel_not_supported`, naming the image and the device.
fn check_images_run_on(images: &[Arc<ImageData>], devices: &[Device]) -> Result<(), Error> {
    for img in images {
        for d in devices {
            d.check(img.requirements()).map_err(|e| match e {
                Error::KernelNotSupported { kernel, detail } => Error::KernelNotSupported {
                    kernel,
                    detail: format!("image {} on {}: {detail}", img.id(), d.name),
                },
                e => e,
            })?;
        }
    }
    Ok(())
}

/// Compiles an input bundle for `devices` with `options` (SYCL 2020's
/// `compile(input, devices, properties)`): the object bundle is for those
/// devices only, and its link for them. A device the input was not made
/// for, or an empty list, is `invalid_object` (SYCL-CTS
/// `sycl_compile_exception_for_zero_devices.cpp`,
/// `sycl_compile_exception_if_dev_not_in_set.cpp`); an image a device
/// cannot run is `kernel_not_supported`.
pub fn compile_with(
    input: &KernelBundle<Input>,
    devices: &[Device],
    options: &BuildOptions,
) -> Result<KernelBundle<Object>, Error> {
    no_devices("compile_with", devices)?;
    devices_within("compile_with", input, devices)?;
    check_images_run_on(input.image_data(), devices)?;
    let mut object = compile(input)?;
    let inner = Arc::make_mut(&mut object.inner);
    inner.devices = Some(devices.iter().map(|d| d.ordinal).collect());
    inner.debug = options.debug;
    Ok(object)
}

/// Compiles an input bundle: its values are fixed from here on.
pub fn compile(input: &KernelBundle<Input>) -> Result<KernelBundle<Object>, Error> {
    // Shared, not copied: a bundle's state is copied on write (a value set
    // on the input afterwards copies the input's).
    Ok(KernelBundle {
        inner: Arc::clone(&input.inner),
        _state: PhantomData,
    })
}

/// Links object bundles into an executable one. An empty list is
/// `invalid_object`, two values for one constant too; a function that an
/// image calls and that no image of the link defines is
/// `link_program_error`, naming it.
pub fn link(objects: &[KernelBundle<Object>]) -> Result<KernelBundle<Executable>, Error> {
    link_for(objects, &[], &BuildOptions::default())
}

/// Links object bundles for `devices` with `options` (SYCL 2020's
/// `link(objects, devices, properties)`): as [`build_with`] builds. A
/// device that one of the bundles was not made for, or an empty list, is
/// `invalid_object` (SYCL-CTS `sycl_link_zero_device.cpp`); an image a
/// device cannot run is `kernel_not_supported`.
pub fn link_with(
    objects: &[KernelBundle<Object>],
    devices: &[Device],
    options: &BuildOptions,
) -> Result<KernelBundle<Executable>, Error> {
    no_devices("link_with", devices)?;
    for o in objects {
        devices_within("link_with", o, devices)?;
        check_images_run_on(o.image_data(), devices)?;
    }
    link_for(objects, devices, options)
}

/// The link of [`link`], [`link_with`] and the builds: for `devices` where
/// any are given (checked by the caller), for any device otherwise.
fn link_for(
    objects: &[KernelBundle<Object>],
    devices: &[Device],
    options: &BuildOptions,
) -> Result<KernelBundle<Executable>, Error> {
    let mut inner = merge(objects, "link")?;
    check_links(&inner.images)?;
    inner.debug = options.debug;
    // The executable's own log, which starts with what the input bundle
    // noted (a constant set that no image has).
    let earlier = inner
        .log
        .text
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    inner.log = Arc::new(Log {
        text: Mutex::new(String::new()),
        sink: options.log.clone(),
    });
    inner.log.push(&earlier);
    let debug = options.debug;
    let toolkit = match &options.toolkit_worker {
        Some(exe) => ptxspec_core::toolkit::worker::Toolkit::Worker(exe.clone()),
        None => ptxspec_core::toolkit::worker::Toolkit::InProcess,
    };
    inner.built = inner
        .images
        .iter()
        .map(|img| built::build_image(img, &inner.values, inner.mode, debug, &toolkit))
        .collect::<Result<_, _>>()?;
    // Adapting bundles link variants on threads of their own: NVIDIA's
    // libraries start here, on the building thread (see `lto::warm_up`),
    // so that a launch does not wait for their start either.
    if inner.adaptive.is_some() {
        ptxspec_core::lto::warm_up();
    }
    // Why Auto did not choose LTO, once per reason.
    let mut said = std::collections::HashSet::new();
    for why in inner.built.iter().filter_map(|b| b.fallback()) {
        if said.insert(why) {
            inner.log.push(why);
        }
    }
    if !devices.is_empty() {
        inner.devices = Some(devices.iter().map(|d| d.ordinal).collect());
        // LTO: link for each device's architecture now, not at the first
        // launch.
        for b in inner
            .built
            .iter()
            .filter(|b| matches!(b.code(), Code::Lto(_)))
        {
            for d in devices {
                b.cubin(d.arch())?;
            }
        }
        for b in &inner.built {
            if let Code::Lto(l) = &b.code() {
                let text = std::mem::take(&mut *l.log.lock().unwrap_or_else(|p| p.into_inner()));
                inner.log.push(&text);
            }
        }
    }
    Ok(KernelBundle::wrap(inner))
}

/// Fails with `link_program_error` when an image calls a function that no
/// image of the link defines.
fn check_links(images: &[Arc<ImageData>]) -> Result<(), Error> {
    // A function called but not defined is declared `.extern .func`: PTX
    // without such a declaration calls nothing outside itself, and need not
    // be parsed (the parse is most of a process's first build).
    if !images.iter().any(|i| i.declares_extern_function()) {
        return Ok(());
    }
    let defined: Vec<&String> = images.iter().flat_map(|i| &i.link_symbols().1).collect();
    let mut missing: Vec<String> = Vec::new();
    for img in images {
        for u in &img.link_symbols().0 {
            if !defined.contains(&u) {
                missing.push(format!("{u} (called by image {})", img.id()));
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::LinkProgram(missing))
    }
}

/// Compiles and links an input bundle into an executable one, each image in
/// the bundle's mode ([`KernelBundle::with_mode`], [`SpecMode::Auto`](super::SpecMode::Auto) by
/// default): emulated images keep their PTX and compute their buffer
/// contents; native ones get PTX with the values as immediates; LTO ones
/// are linked with the values by nvJitLink (when a queue first loads them,
/// per architecture, or at once for bundles built for devices); tiered ones
/// start emulated and are linked in the background. The values are the
/// bundle's (defaults for those not set). The module guide's table says
/// what each mode costs.
pub fn build(input: &KernelBundle<Input>) -> Result<KernelBundle<Executable>, Error> {
    link(&[compile(input)?])
}

/// Builds an input bundle for `devices` with `options`: the result runs on
/// those devices only (a launch on another is `invalid_object`), an LTO
/// build links for their architectures now, and the build log goes to
/// `options.log`. Images a device cannot run are `kernel_not_supported`;
/// an empty device list, or a device the input was not made for (a bundle
/// of [`get_kernel_bundle_selected_on`](super::get_kernel_bundle_selected_on) for device 0 built for devices 0 and 1),
/// is `invalid_object`, as SYCL 2020 says ([`build_with_options`] builds
/// for any device).
pub fn build_with(
    input: &KernelBundle<Input>,
    devices: &[Device],
    options: &BuildOptions,
) -> Result<KernelBundle<Executable>, Error> {
    no_devices("build_with", devices)?;
    devices_within("build_with", input, devices)?;
    check_images_run_on(input.image_data(), devices)?;
    link_for(&[compile(input)?], devices, options)
}

/// Builds an input bundle for any device, with `options` (a debug build,
/// a log sink, NVIDIA's libraries in a worker process).
pub fn build_with_options(
    input: &KernelBundle<Input>,
    options: &BuildOptions,
) -> Result<KernelBundle<Executable>, Error> {
    link_for(&[compile(input)?], &[], options)
}

/// Joins bundles of one state. Built images are all kept, also when two
/// hold the same kernel (built in different modes, say): a selector at
/// dispatch chooses between them. Joining none is an empty bundle of that
/// state, for any device (SYCL 2020; SYCL-CTS
/// `sycl_join_zero_kernel_bundles.cpp`).
pub fn join<S>(bundles: &[KernelBundle<S>]) -> Result<KernelBundle<S>, Error> {
    if bundles.is_empty() {
        return Ok(KernelBundle::wrap(Inner::empty()));
    }
    let mut inner = merge(bundles, "join")?;
    let mut built: Vec<Arc<BuiltImage>> = Vec::new();
    for b in bundles {
        for bi in &b.inner.built {
            if !built.iter().any(|x| Arc::ptr_eq(x, bi)) {
                built.push(Arc::clone(bi));
            }
        }
    }
    inner.built = built;
    Ok(KernelBundle::wrap(inner))
}

/// Two different images of one ID (two crates embedding images of one file
/// stem): one would be lost.
fn two_images_of_one_id(id: &str, what: &str) -> Error {
    Error::invalid(
        crate::error::Misuse::Conflict,
        format!(
            "{what}: two different device images are named {id} (two crates or folders with an image of that \
         file stem?): one would be lost. Rename one source file"
        ),
    )
}

/// Images, kernels and values of several bundles (first mode, options and
/// log win; devices: those all bundles allow).
fn merge<S>(bundles: &[KernelBundle<S>], what: &str) -> Result<Inner, Error> {
    let first = bundles.first().ok_or_else(|| {
        Error::invalid(
            crate::error::Misuse::EmptyList,
            format!("{what} of an empty list of kernel bundles"),
        )
    })?;
    // One bundle (what `build` links): its state, as it is.
    if let [only] = bundles {
        let mut inner = (*only.inner).clone();
        inner.built.clear();
        return Ok(inner);
    }
    let (mut images, mut kernels, mut values) = (Vec::new(), Vec::new(), BTreeMap::new());
    let mut inner = Inner {
        images: Arc::default(),
        kernels: Arc::default(),
        mode: first.inner.mode,
        values: Arc::default(),
        built: Vec::new(),
        devices: first.inner.devices.clone(),
        debug: first.inner.debug,
        log: Arc::clone(&first.inner.log),
        adaptive: first.inner.adaptive.clone(),
        rejects_unknown_constants: bundles.iter().any(|b| b.inner.rejects_unknown_constants),
    };
    for b in bundles {
        for img in b.inner.images.iter() {
            match images.iter().find(|i: &&Arc<ImageData>| i.id() == img.id()) {
                None => images.push(Arc::clone(img)),
                Some(i) if Arc::ptr_eq(i, img) || i.same_as(img) => {}
                Some(_) => return Err(two_images_of_one_id(img.id(), what)),
            }
        }
        for k in b.inner.kernels.iter() {
            if !kernels.contains(k) {
                kernels.push(k.clone());
            }
        }
        if let (Some(mine), Some(theirs)) = (&mut inner.devices, &b.inner.devices) {
            mine.retain(|d| theirs.contains(d));
        } else if inner.devices.is_none() {
            inner.devices = b.inner.devices.clone();
        }
        for (id, v) in b.inner.values.iter() {
            match values.get(id) {
                Some(old) if old != v => {
                    return Err(Error::invalid(
                        crate::error::Misuse::Conflict,
                        format!(
                            "{what}: specialization constant '{id}' has different values in the bundles"
                        ),
                    ));
                }
                _ => {
                    values.insert(id.clone(), v.clone());
                }
            }
        }
    }
    inner.images = Arc::new(images);
    inner.kernels = Arc::new(kernels);
    inner.values = Arc::new(values);
    Ok(inner)
}
