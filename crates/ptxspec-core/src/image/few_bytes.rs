//! Copies of a few bytes — a value into its slot, a parameter-space blob
//! into a launch's parameter — without a call: `copy_from_slice` of a
//! length known only at run time calls the C library's `memcpy`, which a
//! launch then runs twice (the launch path counts its instructions:
//! `benches/launch_instructions.rs`).

/// Copies `src` into `dst`, of the same length (as `copy_from_slice`,
/// which it calls for other lengths, and past 16 bytes): 4 to 16 bytes as
/// two loads and two stores that overlap where the length is not a power
/// of two, fewer byte by byte.
#[inline(always)]
pub(crate) fn copy_few(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if dst.len() != n || n > 16 {
        dst.copy_from_slice(src);
    } else if let (Some(&head), Some(&tail)) = (src.first_chunk::<8>(), src.last_chunk::<8>()) {
        if let Some(d) = dst.first_chunk_mut::<8>() {
            *d = head;
        }
        if let Some(d) = dst.last_chunk_mut::<8>() {
            *d = tail;
        }
    } else if let (Some(&head), Some(&tail)) = (src.first_chunk::<4>(), src.last_chunk::<4>()) {
        if let Some(d) = dst.first_chunk_mut::<4>() {
            *d = head;
        }
        if let Some(d) = dst.last_chunk_mut::<4>() {
            *d = tail;
        }
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::copy_few;

    /// The same bytes as `copy_from_slice` writes, for every length around
    /// each way it copies, into buffers that held other bytes.
    #[test]
    fn copies_as_copy_from_slice() {
        for len in 0..=40usize {
            let src: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(29) ^ 0x5a).collect();
            let mut want = vec![0xeeu8; len];
            want.copy_from_slice(&src);
            let mut got = vec![0xeeu8; len];
            copy_few(&mut got, &src);
            assert_eq!(got, want, "length {len}");
        }
    }
}
