//! Reading an image as `ptxspec post-link` or `ptxspec compile` wrote it:
//! `<stem>.prop`, the `<stem>.ptx` beside it and, where asked, its
//! `<stem>.ltoir`. The `.prop` records the SHA-256 of the others; a file
//! whose hash differs — damaged, or another image's — is an error naming
//! it, before any of it is used. LTO-IR goes to nvJitLink, which is not
//! hardened against bad input: it is only read with a recorded hash.

use std::path::{Path, PathBuf};

use super::ImageData;
use crate::props::{ImageFile, PropertySets, recorded_file_hash, sha256};
use crate::ptx::ItemKind;

/// Whether to read the image's LTO-IR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LtoIrFile {
    /// Not read.
    Ignore,
    /// Read where the `.prop` records one (or the file exists).
    IfPresent,
    /// Read; its absence is an error.
    Required,
}

/// Why a written image could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WrittenImageError {
    #[error("{}: {source}", path.display())]
    /// A file of the image that could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    #[error("{}: {what}", path.display())]
    /// A file that is not what an image's file must be.
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
}

/// The image and the text of its `.prop`.
pub struct WrittenImage {
    /// The image.
    pub image: ImageData,
    /// Its `.prop` file's text.
    pub props: String,
}

/// Reads the image whose property file is `prop`.
pub fn read_written(prop: &Path, ltoir: LtoIrFile) -> Result<WrittenImage, WrittenImageError> {
    let read = |path: &Path| {
        crate::files::read_input(path).map_err(|source| WrittenImageError::Io {
            path: path.to_path_buf(),
            source,
        })
    };
    let bad = |path: &Path, what: String| WrittenImageError::Bad {
        path: path.to_path_buf(),
        what,
    };
    let text = |path: &Path, bytes: Vec<u8>| {
        String::from_utf8(bytes).map_err(|_| bad(path, "not UTF-8 text".into()))
    };
    let props = text(prop, read(prop)?)?;
    let sets = PropertySets::parse(&props).map_err(|e| bad(prop, e.to_string()))?;
    let recorded = |file| recorded_file_hash(&sets, file).map_err(|e| bad(prop, e.to_string()));
    let check = |path: &Path, bytes: &[u8], want: Option<[u8; 32]>| match want {
        Some(h) if h != sha256(bytes) => Err(bad(
            path,
            format!(
                "its SHA-256 is not the one {} records: the file is damaged, or belongs to another image",
                prop.display()
            ),
        )),
        _ => Ok(()),
    };
    let ptx_path = prop.with_extension("ptx");
    let ptx = read(&ptx_path)?;
    check(&ptx_path, &ptx, recorded(ImageFile::Ptx)?)?;
    let ptx = text(&ptx_path, ptx)?;
    let stem = prop
        .file_stem()
        .map_or_else(|| "image".into(), |s| s.to_string_lossy().into_owned());
    let mut image = ImageData::new(stem, ptx, &props).map_err(|e| bad(prop, e.to_string()))?;
    signatures_match_code(&image).map_err(|what| bad(prop, what))?;
    let ltoir_path = prop.with_extension("ltoir");
    let want = recorded(ImageFile::LtoIr)?;
    let wanted = match ltoir {
        LtoIrFile::Ignore => false,
        LtoIrFile::IfPresent => want.is_some() || ltoir_path.exists(),
        LtoIrFile::Required => true,
    };
    if wanted {
        let bytes = read(&ltoir_path)?;
        if want.is_none() {
            return Err(bad(
                &ltoir_path,
                format!(
                    "{} records no SHA-256 of it (written by an older ptxspec?): LTO-IR is only linked when \
                     its hash is checked; compile or post-link again",
                    prop.display()
                ),
            ));
        }
        check(&ltoir_path, &bytes, want)?;
        image = image
            .with_ltoir(&bytes)
            .map_err(|e| bad(&ltoir_path, e.to_string()))?;
    }
    Ok(WrittenImage { image, props })
}

/// Every kernel signature of a written image (its `.prop` is not hashed: a
/// file of someone else's) names a kernel its PTX defines, with the
/// parameters the PTX declares: else a link would find no such kernel, or a
/// launch would pass other parameters than the code takes.
fn signatures_match_code(image: &ImageData) -> Result<(), String> {
    let module = crate::ptx::parse(format!("{}.ptx", image.id()), image.ptx().to_string())
        .map_err(|e| e.to_string())?;
    for sig in image.kernels() {
        let kernel = module.items.iter().find_map(|i| match &i.kind {
            ItemKind::Function(f)
                if f.is_kernel && f.body.is_some() && module.text(f.name) == sig.name =>
            {
                Some(f)
            }
            _ => None,
        });
        let Some(kernel) = kernel else {
            return Err(format!(
                "its kernel signatures name kernel {}, which the image's PTX does not define",
                sig.name
            ));
        };
        let declared: Vec<u32> = kernel.params.iter().map(|p| p.size()).collect();
        let signed: Vec<u32> = sig.params.iter().map(|p| p.size).collect();
        if declared != signed {
            return Err(format!(
                "its signature of kernel {} has parameters of {signed:?} bytes, the PTX declares {declared:?}",
                sig.name
            ));
        }
    }
    Ok(())
}
