//! The parameters of one launch ([`launch_params`]): the caller's arguments
//! in the kernel's order,
//! with what the specialization-constant parameter receives where the
//! signature marks it.
//!
//! A launch is on the hot path of programs that change values often, so
//! [`LaunchParams`] keeps everything inline: a launch allocates nothing
//! unless the values pass [`INLINE_VALUES`] bytes.

use std::ffi::c_void;

use super::{Delivery, Image, ImageError, KernelSignature};

/// One of the caller's arguments, as the kernel's parameter receives it.
#[derive(Clone, Copy, Debug)]
pub enum KernelArg<'a> {
    /// A value passed by value: its bytes.
    Value(&'a [u8]),
    /// A device buffer: its address.
    Address(u64),
}

impl KernelArg<'_> {
    fn size(&self) -> usize {
        match self {
            KernelArg::Value(v) => v.len(),
            KernelArg::Address(_) => 8,
        }
    }
}

/// The most parameters a kernel launched through ptxspec may have.
pub(crate) const MAX_PARAMS: usize = 32;
/// Bytes of values a launch passes without allocating.
pub(crate) const INLINE_VALUES: usize = 512;

/// The parameters of one launch: for each kernel parameter, a value of its
/// size ([`pointers`](Self::pointers) gives them as `cuLaunchKernel` takes
/// them).
pub struct LaunchParams<'a> {
    /// What the specialization-constant parameter receives.
    spec_inline: [u8; INLINE_VALUES],
    spec_heap: Vec<u8>,
    spec_len: usize,
    /// The caller's arguments in parameter order; `None` marks the
    /// specialization-constant parameter.
    args: [Option<KernelArg<'a>>; MAX_PARAMS],
    count: usize,
    pointers: [*mut c_void; MAX_PARAMS],
}

impl LaunchParams<'_> {
    /// One pointer per kernel parameter, each to a value of the parameter's
    /// size; they stay valid while `self` is borrowed (the caller's values
    /// are borrowed for `'a`, everything else lives in `self`).
    pub fn pointers(&mut self) -> &mut [*mut c_void] {
        let spec: *mut c_void = if self.spec_heap.is_empty() {
            self.spec_inline.as_mut_ptr().cast()
        } else {
            self.spec_heap.as_mut_ptr().cast()
        };
        for i in 0..self.count {
            self.pointers[i] = match &mut self.args[i] {
                None => spec,
                Some(KernelArg::Value(v)) => v.as_ptr().cast_mut().cast(),
                Some(KernelArg::Address(a)) => (a as *mut u64).cast(),
            };
        }
        &mut self.pointers[..self.count]
    }

    /// What the specialization-constant parameter receives.
    #[cfg(test)]
    pub(crate) fn spec_argument(&self) -> &[u8] {
        if self.spec_heap.is_empty() {
            &self.spec_inline[..self.spec_len]
        } else {
            &self.spec_heap
        }
    }
}

/// The launch parameters of `signature`'s kernel of `image`: the caller's
/// `args` (checked against the signature, which the runtime's own parameter
/// is not counted in) and, where the signature marks it, what `delivery`
/// gives the specialization-constant parameter — zeros when the values are
/// in the code, the values (`blob` with the launch's `values` written over
/// it) in the parameter space, or the address `global_buffer` returns for a
/// device buffer holding them.
///
/// This is the one place that decides what a kernel's parameters receive.
pub fn launch_params<'a, E: From<ImageError>, V: AsRef<[u8]>>(
    image: &Image,
    signature: &KernelSignature,
    delivery: Delivery,
    blob: &[u8],
    values: &[(&str, V)],
    args: impl ExactSizeIterator<Item = KernelArg<'a>>,
    global_buffer: impl FnOnce(&[u8]) -> Result<u64, E>,
) -> Result<LaunchParams<'a>, E> {
    let name = &signature.name;
    let count = signature.params.len();
    if count > MAX_PARAMS {
        return Err(ImageError::KernelArgument(format!(
            "kernel {name} has {count} parameters; ptxspec launches kernels with up to {MAX_PARAMS}"
        ))
        .into());
    }
    // A handler the kernel does not read may also be given by the caller
    // (extern "C" kernels were launched so before their handler was
    // marked): then it is passed as given.
    let unmarked;
    let signature = if signature.handler.is_some_and(|h| !h.reads_constants) && args.len() == count
    {
        unmarked = KernelSignature {
            handler: None,
            ..signature.clone()
        };
        &unmarked
    } else {
        signature
    };
    let expected = signature.user_params().count();
    if expected != args.len() {
        return Err(ImageError::KernelArgument(format!(
            "kernel {name} takes {expected} arguments (the specialization constants are added by the runtime), {} given",
            args.len()
        ))
        .into());
    }
    // A kernel that reads no constant takes none, whatever the image's
    // other kernels do: its kernel_handler (if it takes one) is null.
    let reads = signature.reads_constants();
    let delivery = if reads { delivery } else { Delivery::InCode };
    // Values for constants the image does not have are for other kernels
    // of the command group: ignored, as SYCL 2020 sets a handler's value
    // for the kernels that use it.
    let mine = || {
        values
            .iter()
            .filter(move |(id, _)| reads && image.slot(id).is_some())
    };
    if mine().next().is_some() && !delivery.takes_values_at_launch() {
        return Err(ImageError::SpecConst(format!(
            "values set on the handler cannot reach kernel {name}: its image {} has its values in the code",
            image.id()
        ))
        .into());
    }

    let mut params = LaunchParams {
        spec_inline: [0; INLINE_VALUES],
        spec_heap: Vec::new(),
        spec_len: 0,
        args: [None; MAX_PARAMS],
        count,
        pointers: [std::ptr::null_mut(); MAX_PARAMS],
    };
    let mut args = args;
    for (n, (i, p)) in signature.user_params().enumerate() {
        // Counted above: one argument for each such parameter.
        let Some(arg) = args.next() else {
            break;
        };
        if arg.size() != p.size as usize {
            return Err(ImageError::KernelArgument(format!(
                "kernel {name} argument {n}: {} bytes given, the parameter has {}",
                arg.size(),
                p.size
            ))
            .into());
        }
        params.args[i] = Some(arg);
    }

    // The specialization constants' parameter: at least the 8 bytes of a
    // pointer.
    let size = signature
        .buffer_param()
        .map_or(8, |b| signature.params[b].size as usize)
        .max(8);
    params.spec_len = size;
    if size > INLINE_VALUES {
        params.spec_heap = vec![0; size];
    }
    let spec: &mut [u8] = if params.spec_heap.is_empty() {
        &mut params.spec_inline[..size]
    } else {
        &mut params.spec_heap
    };
    match delivery {
        Delivery::InCode => {}
        Delivery::ParamSpace => {
            let contents = spec
                .get_mut(..blob.len())
                .ok_or_else(|| ImageError::BadImage {
                    image: image.id().to_string(),
                    what: format!("the values do not fit kernel {name}'s parameter"),
                })?;
            contents.copy_from_slice(blob);
            for (id, v) in mine() {
                image.write_value(contents, id, v.as_ref())?;
            }
        }
        Delivery::GlobalBuffer => {
            let address = if mine().next().is_none() {
                global_buffer(blob)?
            } else {
                let mut patched = blob.to_vec();
                for (id, v) in mine() {
                    image.write_value(&mut patched, id, v.as_ref())?;
                }
                global_buffer(&patched)?
            };
            spec[..8].copy_from_slice(&address.to_le_bytes());
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image of one kernel `k(int *out, <buffer>, int n)` whose buffer
    /// parameter is marked `marker` (1 a pointer, 2 the contents, 3 not
    /// read) and is `size` bytes, with one `int`
    /// constant `c` (default 7) and one `short` constant `s` (default -1).
    fn image(marker: u32, size: u32) -> Image {
        let words = [8u32, 8, 0, size, 8, marker, 4, 4, 0];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let sig = crate::props::PropertyValue::bytes(bytes);
        let mut sets = crate::props::PropertySets::default();
        let layout = crate::layout::Layout::build(
            crate::layout::Numbering::Emulated,
            [
                crate::layout::SpecConstant::typed(
                    "c",
                    crate::layout::SpecType::Scalar(crate::layout::ScalarKind::I32),
                    7i32.to_le_bytes().to_vec(),
                )
                .unwrap(),
                crate::layout::SpecConstant::typed(
                    "s",
                    crate::layout::SpecType::Scalar(crate::layout::ScalarKind::I16),
                    (-1i16).to_le_bytes().to_vec(),
                )
                .unwrap(),
            ],
        )
        .unwrap();
        crate::props::SpecConstProps::write(&layout, &mut sets);
        sets.set_mut(super::super::KERNEL_SIGNATURES_SET)
            .insert("k", sig);
        Image::new("img", "", &sets.to_text()).unwrap()
    }

    fn as_u32(p: *mut c_void) -> u32 {
        // SAFETY: the test points it at 4 readable bytes.
        unsafe { std::ptr::read_unaligned(p.cast::<u32>()) }
    }

    #[test]
    fn param_space_values_are_the_blob_patched_with_the_launch_values() {
        let img = image(2, 8);
        let sig = &img.kernels()[0];
        let n = 100i32.to_le_bytes();
        let values = [("s", 5i16.to_le_bytes().to_vec())];
        let mut p = launch_params::<ImageError, Vec<u8>>(
            &img,
            sig,
            Delivery::ParamSpace,
            img.default_blob(),
            &values,
            [KernelArg::Address(0xdead_beef), KernelArg::Value(&n)].into_iter(),
            |_| panic!("no device buffer for values in the parameter space"),
        )
        .unwrap();
        assert_eq!(p.spec_argument(), [7, 0, 0, 0, 5, 0, 0, 0]);
        let ptrs = p.pointers().to_vec();
        assert_eq!(ptrs.len(), 3);
        assert_eq!(as_u32(ptrs[0]), 0xdead_beef);
        assert_eq!(as_u32(ptrs[1]), 7);
        assert_eq!(as_u32(ptrs[2]), 100);
    }

    #[test]
    fn an_unread_handler_is_passed_null_or_as_the_caller_gives_it() {
        let img = image(3, 8);
        let sig = &img.kernels()[0];
        let n = 5i32.to_le_bytes();
        let handler = 0x1234u64.to_le_bytes();
        let launch = |args: Vec<KernelArg<'_>>| {
            launch_params::<ImageError, Vec<u8>>(
                &img,
                sig,
                Delivery::InCode,
                img.default_blob(),
                &[],
                args.into_iter(),
                |_| panic!("no buffer for a handler that is not read"),
            )
            .map(|mut p| p.pointers().iter().map(|&q| as_u32(q)).collect::<Vec<_>>())
        };
        // The caller's arguments alone: the handler is null.
        let alone = launch(vec![KernelArg::Address(7), KernelArg::Value(&n)]).unwrap();
        assert_eq!(alone, [7, 0, 5]);
        // With one for the handler too (how extern "C" kernels were
        // launched before it was marked): passed as given.
        let given = launch(vec![
            KernelArg::Address(7),
            KernelArg::Value(&handler),
            KernelArg::Value(&n),
        ])
        .unwrap();
        assert_eq!(given, [7, 0x1234, 5]);
        assert!(launch(vec![KernelArg::Address(7)]).is_err());
    }

    #[test]
    fn global_buffer_passes_the_address_of_the_patched_values() {
        let img = image(1, 8);
        let values = [("c", 9i32.to_le_bytes().to_vec())];
        let mut seen = Vec::new();
        let n = 1i32.to_le_bytes();
        let p = launch_params::<ImageError, Vec<u8>>(
            &img,
            &img.kernels()[0],
            Delivery::GlobalBuffer,
            img.default_blob(),
            &values,
            [KernelArg::Address(1), KernelArg::Value(&n)].into_iter(),
            |contents| {
                seen = contents.to_vec();
                Ok(0x1234_5678_9abc)
            },
        )
        .unwrap();
        assert_eq!(seen, [9, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(p.spec_argument(), 0x1234_5678_9abcu64.to_le_bytes());
    }

    #[test]
    fn values_in_code_pass_zeros_and_refuse_launch_values() {
        let img = image(1, 8);
        let n = 1i32.to_le_bytes();
        let args = || [KernelArg::Address(1), KernelArg::Value(&n)].into_iter();
        let p = launch_params::<ImageError, Vec<u8>>(
            &img,
            &img.kernels()[0],
            Delivery::InCode,
            img.default_blob(),
            &[],
            args(),
            |_| panic!("no buffer"),
        )
        .unwrap();
        assert_eq!(p.spec_argument(), [0; 8]);
        let e = launch_params::<ImageError, Vec<u8>>(
            &img,
            &img.kernels()[0],
            Delivery::InCode,
            img.default_blob(),
            &[("c", vec![0; 4])],
            args(),
            |_| panic!("no buffer"),
        )
        .err()
        .unwrap();
        assert!(matches!(e, ImageError::SpecConst(_)), "{e}");
        // A value for a constant the image does not have is for another
        // kernel: ignored.
        let p = launch_params::<ImageError, Vec<u8>>(
            &img,
            &img.kernels()[0],
            Delivery::InCode,
            img.default_blob(),
            &[("not_mine", vec![0; 4])],
            args(),
            |_| panic!("no buffer"),
        )
        .unwrap();
        assert_eq!(p.spec_argument(), [0; 8]);
    }

    #[test]
    fn arguments_are_checked_against_the_signature() {
        let img = image(1, 8);
        let sig = &img.kernels()[0];
        let launch = |args: &[KernelArg<'_>]| {
            launch_params::<ImageError, Vec<u8>>(
                &img,
                sig,
                Delivery::GlobalBuffer,
                img.default_blob(),
                &[],
                args.iter().copied(),
                |_| Ok(0),
            )
            .err()
            .map(|e| e.to_string())
        };
        let e = launch(&[KernelArg::Address(1)]).unwrap();
        assert!(e.contains("takes 2 arguments"), "{e}");
        let short = [0u8; 2];
        let e = launch(&[KernelArg::Address(1), KernelArg::Value(&short)]).unwrap();
        assert!(
            e.contains("argument 1: 2 bytes given, the parameter has 4"),
            "{e}"
        );
        assert_eq!(
            launch(&[KernelArg::Address(1), KernelArg::Value(&[0; 4])]),
            None
        );
    }

    #[test]
    fn an_image_records_one_placement_and_delivery_follows_the_code() {
        use crate::image::{CodeForm, delivery};
        let contents = image(2, 8);
        let pointer = image(1, 8);
        let unread = image(3, 8);
        assert_eq!(contents.placement(), Delivery::ParamSpace);
        assert_eq!(pointer.placement(), Delivery::GlobalBuffer);
        assert_eq!(unread.placement(), Delivery::InCode);
        for p in [contents.placement(), pointer.placement()] {
            assert_eq!(delivery(p, CodeForm::Emulated), p);
            assert_eq!(delivery(p, CodeForm::Specialized), Delivery::InCode);
        }
    }

    #[test]
    fn kernels_that_disagree_on_the_placement_are_refused() {
        let triples = |marker: u32| {
            let words = [8u32, 8, 0, 8, 8, marker];
            crate::props::PropertyValue::bytes(words.iter().flat_map(|w| w.to_le_bytes()).collect())
        };
        let mut sets = crate::props::PropertySets::default();
        let set = sets.set_mut(super::super::KERNEL_SIGNATURES_SET);
        set.insert("a", triples(1));
        set.insert("b", triples(2));
        let e = crate::image::KernelSignature::read_all(&sets).unwrap_err();
        assert!(e.to_string().contains("an image has one placement"), "{e}");
    }
}
