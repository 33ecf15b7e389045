//! The `.ltoir` file of a device image: the LTO-IR of each translation unit
//! the image's functions come from (nvJitLink links several inputs but
//! writes no LTO-IR back, so an image keeps its units side by side).
//!
//! Layout, little-endian: the magic `PTXSPEC-LTOIR\0\0\0` (16 bytes), `u32`
//! format version (1), `u32` unit count, then per unit a `u32` name length,
//! the name (UTF-8), a `u64` length and the unit's LTO-IR.

use std::borrow::Cow;

/// The LTO-IR units of one image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LtoIr {
    /// `(translation unit name, LTO-IR)`: the LTO-IR borrowed from a
    /// container embedded in the program ([`from_static`](Self::from_static)),
    /// else owned.
    pub units: Vec<(String, Cow<'static, [u8]>)>,
}

const MAGIC: &[u8; 16] = b"PTXSPEC-LTOIR\0\0\0";
const VERSION: u32 = 1;

/// A `.ltoir` file that cannot be read, at this byte offset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("LTO-IR container, byte {offset}: {what}")]
pub struct ContainerError {
    /// Where in the file.
    pub offset: usize,
    /// What is wrong there.
    pub what: String,
}

impl LtoIr {
    /// The container's bytes, as a `.ltoir` file holds them.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.units.len() as u32).to_le_bytes());
        for (name, ir) in &self.units {
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(ir.len() as u64).to_le_bytes());
            out.extend_from_slice(ir);
        }
        out
    }

    /// Units of these names and LTO-IR.
    pub fn owned(units: Vec<(String, Vec<u8>)>) -> LtoIr {
        LtoIr {
            units: units
                .into_iter()
                .map(|(n, ir)| (n, Cow::Owned(ir)))
                .collect(),
        }
    }

    /// Reads a container; anything that is not one, or is damaged, is an error.
    pub fn from_bytes(bytes: &[u8]) -> Result<LtoIr, ContainerError> {
        LtoIr::parse(bytes, |unit| Cow::Owned(unit.to_vec()))
    }

    /// [`from_bytes`](Self::from_bytes) of a container embedded in the
    /// program: the units' LTO-IR is borrowed, not copied (a process that
    /// finds its cubins in a cache never reads it: only the units' headers
    /// are read here).
    pub fn from_static(bytes: &'static [u8]) -> Result<LtoIr, ContainerError> {
        LtoIr::parse(bytes, Cow::Borrowed)
    }

    fn parse<'b>(
        bytes: &'b [u8],
        keep: impl Fn(&'b [u8]) -> Cow<'static, [u8]>,
    ) -> Result<LtoIr, ContainerError> {
        let mut at = 0usize;
        let mut take = |n: usize, what: &str| -> Result<&[u8], ContainerError> {
            let end = at
                .checked_add(n)
                .filter(|&e| e <= bytes.len())
                .ok_or_else(|| ContainerError {
                    offset: at,
                    what: format!("{what}: {n} bytes wanted, {} left", bytes.len() - at),
                })?;
            let s = &bytes[at..end];
            at = end;
            Ok(s)
        };
        if take(16, "magic")? != MAGIC {
            return Err(ContainerError {
                offset: 0,
                what: "not a ptxspec .ltoir file (wrong magic)".into(),
            });
        }
        let u32_at = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let version = u32_at(take(4, "version")?);
        if version != VERSION {
            return Err(ContainerError {
                offset: 16,
                what: format!("format version {version}, this ptxspec reads {VERSION}"),
            });
        }
        let count = u32_at(take(4, "unit count")?) as usize;
        let mut units = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let n = u32_at(take(4, "name length")?) as usize;
            let name =
                String::from_utf8(take(n, "name")?.to_vec()).map_err(|_| ContainerError {
                    offset: 0,
                    what: "a unit name is not UTF-8".into(),
                })?;
            let b = take(8, "unit length")?;
            let len = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            let len = usize::try_from(len).map_err(|_| ContainerError {
                offset: 0,
                what: "unit length overflows".into(),
            })?;
            units.push((name, keep(take(len, "unit")?)));
        }
        if at != bytes.len() {
            return Err(ContainerError {
                offset: at,
                what: format!("{} bytes after the last unit", bytes.len() - at),
            });
        }
        Ok(LtoIr { units })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_truncation_is_an_error() {
        let c = LtoIr::owned(vec![
            ("a.cu".into(), vec![1, 2, 3]),
            ("b.cu".into(), vec![9; 40]),
        ]);
        let bytes = c.to_bytes();
        assert_eq!(LtoIr::from_bytes(&bytes).unwrap(), c);
        // Read in place: the same units, borrowing the container's bytes.
        let embedded: &'static [u8] = Box::leak(bytes.clone().into_boxed_slice());
        let borrowed = LtoIr::from_static(embedded).unwrap();
        assert_eq!(borrowed, c);
        assert!(
            borrowed
                .units
                .iter()
                .all(|(_, ir)| matches!(ir, Cow::Borrowed(_)))
        );
        let range = embedded.as_ptr_range();
        assert!(range.contains(&borrowed.units[1].1.as_ptr()));
        for cut in 0..bytes.len() {
            let cut: &'static [u8] = Box::leak(bytes[..cut].to_vec().into_boxed_slice());
            assert!(LtoIr::from_static(cut).is_err());
        }
        for cut in 0..bytes.len() {
            assert!(LtoIr::from_bytes(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(
            LtoIr::from_bytes(&long)
                .unwrap_err()
                .what
                .contains("after the last unit")
        );
        let mut huge = bytes;
        huge[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(LtoIr::from_bytes(&huge).is_err());
    }
}
