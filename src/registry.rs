//! The device images compiled into a program, registered with `inventory`
//! by the code that `ptxspec-build` generates — the counterpart of DPC++'s
//! offload wrapper. Each image's kernel signatures are in its property sets
//! (the one copy; see [`Image`](crate::image::Image)).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::error::Error;
use crate::image::ImageData;

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
    /// The names of the kernels the image defines (its kernel signatures'),
    /// so that a process's first bundle reads only the images that define
    /// its kernels. Empty: not given (the property text is searched).
    pub kernels: &'static [&'static str],
    /// Whether the PTX declares an external function (`.extern .func`),
    /// found when the registration was generated, so that a process's
    /// first build need not search the PTX for one. `None`: not given (the
    /// PTX is searched).
    pub declares_extern_function: Option<bool>,
    /// The SHA-256 of `ltoir`, its identity in the cubin caches, found when
    /// the registration was generated: a process whose cubins are in a
    /// cache then reads no LTO-IR. `None`: not given (it is found at run
    /// time).
    pub ltoir_sha256: Option<[u8; 32]>,
}

impl EmbeddedImage {
    /// The registration `ptxspec-build` 0.1 generates (version 1 of the
    /// generated code's contract): every field, in this order. Generated
    /// code calls this function, never a struct literal, so that a field
    /// added here breaks no program whose `ptxspec-build` is of another
    /// release: a later form is `v2`, and `v1` stays (as does the struct
    /// literal of the code generated before it, whose fields stay public).
    #[allow(clippy::too_many_arguments)]
    pub const fn v1(
        id: &'static str,
        ptx: &'static str,
        props: &'static str,
        ltoir: &'static [u8],
        kernels: &'static [&'static str],
        declares_extern_function: Option<bool>,
        ltoir_sha256: Option<[u8; 32]>,
    ) -> EmbeddedImage {
        EmbeddedImage {
            id,
            ptx,
            props,
            ltoir,
            kernels,
            declares_extern_function,
            ltoir_sha256,
        }
    }
}

inventory::collect!(EmbeddedImage);

/// Every registered image, sorted by id so that the order is stable.
pub fn images() -> Vec<&'static EmbeddedImage> {
    let mut v: Vec<&'static EmbeddedImage> = inventory::iter::<EmbeddedImage>.into_iter().collect();
    // Unstable: images of one ID are the same (or an error, whichever comes
    // first). For a few entries it is a short insertion sort, where the
    // stable sort's larger code was a visible share of a process's first
    // bundle (its pages mapped in one by one).
    v.sort_unstable_by_key(|i| i.id);
    v
}

/// Images registered while the program runs (kernel bundles compiled from
/// source), newest last.
static RUNTIME: RwLock<Vec<Arc<ImageData>>> = RwLock::new(Vec::new());
/// Bumped by every registration: caches of images chosen by kernel name
/// (a queue's implicit images) are stale when it changed.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Registers images made while the program runs, so that launches by
/// kernel name (handler values, `get_kernel_bundle`) find them as they find
/// embedded ones. An image already registered (by ID) is not added again.
pub(crate) fn register_runtime(images: &[Arc<ImageData>]) {
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

/// The registered images: those embedded in the program (each read once),
/// then those registered while it runs, newest first — so that a kernel
/// name is found in an embedded image before a source's, and in the newest
/// source that defines it.
pub fn registered_images() -> Result<Vec<crate::image::Image>, Error> {
    Ok(all_images()?
        .into_iter()
        .map(crate::image::Image::from_data)
        .collect())
}

/// [`registered_images`], as the runtime reads them.
pub(crate) fn all_images() -> Result<Vec<Arc<ImageData>>, Error> {
    let mut all = embedded()?
        .iter()
        .map(Embedded::image)
        .collect::<Result<Vec<_>, _>>()?;
    let runtime = RUNTIME.read().unwrap_or_else(|p| p.into_inner());
    all.extend(runtime.iter().rev().cloned());
    Ok(all)
}

/// The registered image that defines `kernel`, in [`all_images`]'
/// order — reading only the embedded images whose property text names it
/// (a process's first bundle need not read every image of the program).
pub(crate) fn image_defining(kernel: &str) -> Result<Option<Arc<ImageData>>, Error> {
    for e in embedded()? {
        if e.may_define(kernel) {
            let image = e.image()?;
            if image.kernel(kernel).is_some() {
                return Ok(Some(image));
            }
        }
    }
    let runtime = RUNTIME.read().unwrap_or_else(|p| p.into_inner());
    Ok(runtime
        .iter()
        .rev()
        .find(|i| i.kernel(kernel).is_some())
        .cloned())
}

/// The registered kernel that a caller's `name` names: `name` itself where
/// an image defines it, else the one mangled C++ kernel whose function is
/// `name` ([`crate::near::resolve_kernel`]); `None` where none or several
/// are. Asked only after an exact look-up failed: it reads every image.
pub(crate) fn resolve_kernel(name: &str) -> Result<Option<String>, Error> {
    let images = all_images()?;
    let known = images
        .iter()
        .flat_map(|i| i.kernels())
        .map(|k| k.name.as_str());
    Ok(crate::near::resolve_kernel(name, known).map(str::to_string))
}

/// [`resolve_kernel`], remembered per name until an image is registered:
/// launches by a C++ name ask it on every launch that misses the fast path.
pub(crate) fn resolve_kernel_cached(name: &str) -> Result<Option<String>, Error> {
    /// Names remembered at most (a program's kernels; past it, forgotten).
    const REMEMBERED: usize = 1024;
    type Resolved = (u64, BTreeMap<String, Option<String>>);
    static RESOLVED: Mutex<Resolved> = Mutex::new((0, BTreeMap::new()));
    let generation = generation();
    {
        let memo = RESOLVED.lock().unwrap_or_else(|p| p.into_inner());
        if memo.0 == generation
            && let Some(found) = memo.1.get(name)
        {
            return Ok(found.clone());
        }
    }
    let found = resolve_kernel(name)?;
    let mut memo = RESOLVED.lock().unwrap_or_else(|p| p.into_inner());
    if memo.0 != generation || memo.1.len() >= REMEMBERED {
        *memo = (generation, BTreeMap::new());
    }
    memo.1.insert(name.to_string(), found.clone());
    Ok(found)
}

/// One embedded image, read into an [`Image`] when first asked for.
struct Embedded {
    source: &'static EmbeddedImage,
    image: OnceLock<Result<Arc<ImageData>, String>>,
}

impl Embedded {
    fn image(&self) -> Result<Arc<ImageData>, Error> {
        self.image
            .get_or_init(|| {
                image_of(self.source)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|what| Error::BadImage {
                image: self.source.id.to_string(),
                what,
            })
    }

    /// Whether the image may define `kernel`: its list of kernels names it
    /// (read when the image is: see [`image_of`]), or, without one, its
    /// property text (where the kernel signatures are) does. Never false
    /// for an image that does.
    fn may_define(&self, kernel: &str) -> bool {
        match self.source.kernels {
            [] => self.source.props.contains(kernel),
            names => names.contains(&kernel),
        }
    }
}

/// The embedded images sorted by ID, each once: the same image registered
/// twice (byte for byte) is one; two different images of one ID would
/// shadow each other in every bundle, and are an error.
fn embedded() -> Result<&'static [Embedded], Error> {
    static EMBEDDED: OnceLock<Result<Vec<Embedded>, String>> = OnceLock::new();
    let all = EMBEDDED.get_or_init(|| {
        let mut kept: Vec<Embedded> = Vec::new();
        for source in images() {
            match kept.last() {
                Some(last) if last.source.id == source.id && same_bytes(last.source, source) => {}
                Some(last) if last.source.id == source.id => {
                    return Err(format!(
                        "two different images are embedded as {} (two crates with a kernel file of that \
                         stem?): rename one source file",
                        source.id
                    ));
                }
                _ => kept.push(Embedded {
                    source,
                    image: OnceLock::new(),
                }),
            }
        }
        Ok(kept)
    });
    match all {
        Ok(v) => Ok(v),
        Err(what) => Err(Error::BadImage {
            image: "registry".into(),
            what: what.clone(),
        }),
    }
}

fn same_bytes(a: &EmbeddedImage, b: &EmbeddedImage) -> bool {
    a.ptx == b.ptx
        && a.props == b.props
        && a.ltoir == b.ltoir
        && a.kernels == b.kernels
        && a.declares_extern_function == b.declares_extern_function
        && a.ltoir_sha256 == b.ltoir_sha256
}

/// `e` read into an [`Image`]; its list of kernels, where it has one, must
/// name the kernels its signatures do (else the registry could miss one).
fn image_of(e: &EmbeddedImage) -> Result<ImageData, Error> {
    let mut img = ImageData::embedded(e.id, e.ptx, e.props)?;
    if let Some(declares) = e.declares_extern_function {
        img = img.with_extern_function_known(declares);
    }
    if !e.kernels.is_empty() {
        let mut listed: Vec<&str> = e.kernels.to_vec();
        let mut signed: Vec<&str> = img.kernels().iter().map(|k| k.name.as_str()).collect();
        listed.sort_unstable();
        signed.sort_unstable();
        if listed != signed {
            return Err(Error::BadImage {
                image: e.id.to_string(),
                what: format!(
                    "its list of kernels {listed:?} is not the kernels its signatures name {signed:?} \
                     (regenerate the registration with ptxspec-build)"
                ),
            });
        }
    }
    Ok(if e.ltoir.is_empty() {
        img
    } else {
        img.with_embedded_ltoir(e.ltoir, e.ltoir_sha256)?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The post-linked conv3x3 image, with `kernels` as its list.
    fn conv(kernels: &'static [&'static str]) -> EmbeddedImage {
        let ptx = include_str!("../kernels/ptx/conv3x3.ptx");
        let mut images = ptxspec_core::postlink::post_link(
            vec![("conv3x3.ptx".to_string(), ptx.to_string())],
            &Default::default(),
        )
        .unwrap();
        let image = images.remove(0);
        EmbeddedImage {
            id: "conv3x3",
            ptx: Box::leak(image.ptx.into_boxed_str()),
            props: Box::leak(image.props.to_text().into_boxed_str()),
            ltoir: &[],
            kernels,
            declares_extern_function: None,
            ltoir_sha256: None,
        }
    }

    #[test]
    fn a_list_of_kernels_decides_which_images_are_read_and_must_be_true() {
        let listed = Embedded {
            source: Box::leak(Box::new(conv(&["conv3x3"]))),
            image: OnceLock::new(),
        };
        assert!(listed.may_define("conv3x3"));
        // Named in the property text (a parameter's type), not a kernel:
        // the list says no without reading it.
        assert!(!listed.may_define("conv"));
        assert!(listed.image().unwrap().kernel("conv3x3").is_some());
        // Without a list, the property text is searched.
        let unlisted = Embedded {
            source: Box::leak(Box::new(conv(&[]))),
            image: OnceLock::new(),
        };
        assert!(unlisted.may_define("conv3x3"));
        assert!(unlisted.image().is_ok());
        // A list that is not the signatures' kernels: an error naming both.
        let e = image_of(&conv(&["conv3x3", "blur"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("blur") && e.contains("conv3x3"), "{e}");
    }

    #[test]
    fn a_registration_that_tells_of_external_functions_is_taken_at_its_word() {
        // conv3x3's PTX declares none: searched, it is found to declare none.
        assert!(!image_of(&conv(&[])).unwrap().declares_extern_function());
        // Told, the PTX is not searched (the word of the build script that
        // generated the registration, which searched it).
        let told = |declares| EmbeddedImage {
            declares_extern_function: Some(declares),
            ..conv(&["conv3x3"])
        };
        assert!(image_of(&told(true)).unwrap().declares_extern_function());
        assert!(!image_of(&told(false)).unwrap().declares_extern_function());
    }
}
