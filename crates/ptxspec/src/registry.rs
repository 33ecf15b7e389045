//! The device images compiled into a program, registered with `inventory`
//! by the code that [`build_support`](crate::build_support) generates — the
//! counterpart of DPC++'s offload wrapper and integration header.

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

/// One kernel's parameters as the post-link found them: `(size, alignment,
/// kind)`, kind 1 marking the specialization-constant buffer.
#[derive(Debug)]
pub struct EmbeddedKernel {
    pub image: &'static str,
    pub name: &'static str,
    pub params: &'static [(u32, u32, u32)],
}

inventory::collect!(EmbeddedImage);
inventory::collect!(EmbeddedKernel);

/// Every registered image, sorted by id so that the order is stable.
pub fn images() -> Vec<&'static EmbeddedImage> {
    let mut v: Vec<&'static EmbeddedImage> = inventory::iter::<EmbeddedImage>.into_iter().collect();
    v.sort_by_key(|i| i.id);
    v
}

/// Every registered kernel signature.
pub fn kernels() -> Vec<&'static EmbeddedKernel> {
    inventory::iter::<EmbeddedKernel>.into_iter().collect()
}
