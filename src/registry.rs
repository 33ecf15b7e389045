//! The device images compiled into a program, registered with `inventory`
//! by the code that `ptxspec-build` generates — the counterpart of DPC++'s
//! offload wrapper. Each image's kernel signatures are in its property sets
//! (the one copy; see [`Image`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::error::Error;
use crate::image::Image;

/// One embedded device image: its post-linked PTX and `.prop` text.
#[derive(Debug)]
pub struct EmbeddedImage {
    /// Unique name of the image (the post-link's file stem).
    pub id: &'static str,
    pub ptx: &'static str,
    /// The `.prop` text: specialization constants, default values, kernel
    /// signatures.
    pub props: &'static str,
    /// The `.ltoir` container of the image's units (empty when the image
    /// was built without LTO-IR).
    pub ltoir: &'static [u8],
}

inventory::collect!(EmbeddedImage);

/// Every registered image, sorted by id so that the order is stable.
pub fn images() -> Vec<&'static EmbeddedImage> {
    let mut v: Vec<&'static EmbeddedImage> = inventory::iter::<EmbeddedImage>.into_iter().collect();
    v.sort_by_key(|i| i.id);
    v
}

/// Images registered while the program runs (kernel bundles compiled from
/// source), newest last.
static RUNTIME: RwLock<Vec<Arc<Image>>> = RwLock::new(Vec::new());
/// Bumped by every registration: caches of images chosen by kernel name
/// (a queue's implicit images) are stale when it changed.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Registers images made while the program runs, so that launches by
/// kernel name (handler values, `get_kernel_bundle`) find them as they find
/// embedded ones. An image already registered (by ID) is not added again.
pub(crate) fn register_runtime(images: &[Arc<Image>]) {
    let mut runtime = RUNTIME.write().unwrap_or_else(|p| p.into_inner());
    let mut added = false;
    for img in images {
        if !runtime.iter().any(|r| r.id() == img.id()) {
            runtime.push(Arc::clone(img));
            added = true;
        }
    }
    if added {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
}

/// Which registrations were made (see [`GENERATION`]).
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

/// The registered images: those embedded in the program (read once),
/// then those registered while it runs, newest first — so that a kernel
/// name is found in an embedded image before a source's, and in the newest
/// source that defines it.
pub fn registered_images() -> Result<Vec<Arc<Image>>, Error> {
    let mut all = embedded_images()?;
    let runtime = RUNTIME.read().unwrap_or_else(|p| p.into_inner());
    all.extend(runtime.iter().rev().cloned());
    Ok(all)
}

/// The embedded images as [`Image`]s, read once.
fn embedded_images() -> Result<Vec<Arc<Image>>, Error> {
    static IMAGES: OnceLock<Result<Vec<Arc<Image>>, String>> = OnceLock::new();
    IMAGES
        .get_or_init(|| {
            let all: Vec<Arc<Image>> = images()
                .into_iter()
                .map(|e| image_of(e).map(Arc::new).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?;
            // Sorted by ID: images of one ID are neighbours. The same image
            // registered twice is one; different ones would shadow each
            // other in every bundle.
            let mut kept: Vec<Arc<Image>> = Vec::with_capacity(all.len());
            for img in all {
                match kept.last() {
                    Some(last) if last.id() == img.id() && last.same_as(&img) => {}
                    Some(last) if last.id() == img.id() => {
                        return Err(format!(
                            "two different images are embedded as {} (two crates with a kernel file of that \
                             stem?): rename one source file",
                            img.id()
                        ));
                    }
                    _ => kept.push(img),
                }
            }
            Ok(kept)
        })
        .clone()
        .map_err(|what| Error::BadImage {
            image: "registry".into(),
            what,
        })
}

fn image_of(e: &EmbeddedImage) -> Result<Image, Error> {
    let img = Image::new(e.id, e.ptx, e.props)?;
    Ok(if e.ltoir.is_empty() {
        img
    } else {
        img.with_ltoir(e.ltoir)?
    })
}
