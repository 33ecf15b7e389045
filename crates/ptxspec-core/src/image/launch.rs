//! The parameters of one launch, in two steps: [`launch_layout`] decides,
//! for one kernel and one value set, what the specialization-constant
//! parameter receives and where the caller's arguments go; the layout's
//! [`params`](LaunchLayout::params) then places one launch's arguments. A
//! launch plan keeps its layout, so that a launch with the values of the
//! last one only places its arguments (and allocates nothing).

use std::ffi::c_void;

use super::{Delivery, ImageData, ImageError, KernelSignature, Slot};

/// One of the caller's arguments, as the kernel's parameter receives it.
#[derive(Clone, Copy, Debug)]
pub enum KernelArg<'a> {
    /// A value passed by value: its bytes.
    Value(&'a [u8]),
    /// A device buffer: its address, where it lives until the launch
    /// (the parameter points at it: nothing is copied per launch).
    Address(&'a u64),
    /// Bytes the caller vouches for, addresses among them (an aggregate
    /// that holds pointers): taken by any parameter of its size, one that
    /// may hold an address included.
    Vouched(&'a [u8]),
}

impl KernelArg<'_> {
    fn size(&self) -> usize {
        match self {
            KernelArg::Value(v) | KernelArg::Vouched(v) => v.len(),
            KernelArg::Address(_) => 8,
        }
    }
}

/// The most parameters a kernel launched through ptxspec may have.
pub(crate) const MAX_PARAMS: usize = 32;

/// Which of a kernel's parameters may hold an address (bit `i`: parameter
/// `i`), as the kernel's code shows (`arguments::KernelParams::may_hold_address`).
/// A layout refuses a plain value there: a pointer parameter takes device
/// memory ([`KernelArg::Address`]), never a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressParams(u32);

impl AddressParams {
    /// The parameters `holds(i)` names, of the first `count`.
    pub fn from_fn(count: usize, holds: impl Fn(usize) -> bool) -> Self {
        AddressParams(
            (0..count.min(MAX_PARAMS))
                .filter(|&i| holds(i))
                .fold(0, |m, i| m | (1 << i)),
        )
    }

    /// Where the kernel's code was not read: every parameter of 8 bytes or
    /// more may hold an address.
    pub fn every_wide(signature: &KernelSignature) -> Self {
        Self::from_fn(signature.params.len(), |i| signature.params[i].size >= 8)
    }

    #[inline]
    fn has(self, index: u16) -> bool {
        u32::from(index) < MAX_PARAMS as u32 && self.0 & (1 << index) != 0
    }
}

/// What launches of one kernel share: the parameters' count, where each of
/// the caller's arguments goes and its size, and — once
/// [`fill`](Self::fill)ed for a value set — what the specialization-constant
/// parameter receives. [`launch_layout`] and `fill` are the one place that
/// decides what a kernel's parameters receive.
///
/// Laid out in declaration order, what a launch reads first, and inline
/// where a launch reads it (a launch plan keeps the layout; see the
/// runtime's `Plan`: a launch follows the driver's work, which pushes it
/// out of the nearest caches, so each other cache line read costs time).
#[derive(Clone, Debug)]
#[repr(C)]
pub struct LaunchLayout {
    count: usize,
    /// The index of the specialization-constant parameter (`None`: the
    /// kernel takes none, or the caller passes its handler).
    spec_at: Option<usize>,
    /// How the values reach this kernel (`InCode` for one that reads none).
    delivery: Delivery,
    /// Whether the kernel reads constants.
    reads: bool,
    /// The parameters that take device memory, never a value.
    addresses: AddressParams,
    /// What the specialization-constant parameter receives (zeros until
    /// filled): at least a pointer's 8 bytes.
    spec: smallvec::SmallVec<[u8; INLINE_SPEC_BYTES]>,
    /// The caller's arguments in order: (parameter index, size).
    user: smallvec::SmallVec<[(u16, u32); INLINE_USER_ARGS]>,
    // Past what a placement reads: the first 128 bytes (two cache lines
    // where the layout starts at one, as a plan's does) hold the rest.
    kernel: String,
}

/// The caller's arguments a layout keeps inline.
const INLINE_USER_ARGS: usize = 6;

/// Bytes of the specialization-constant parameter a layout keeps inline.
const INLINE_SPEC_BYTES: usize = 16;

/// The parameters of one launch: for each kernel parameter, a pointer to a
/// value of its size ([`pointers`](Self::pointers) gives them as
/// `cuLaunchKernel` takes them).
///
/// A plain array on the caller's stack and a count: placing a launch's
/// pointers is a few stores, with nothing to grow, to free or to call
/// (an array for the most parameters a launch takes made the compiler
/// clear it with a call to `memset` at every launch). A kernel of more than
/// twelve parameters has them on the heap.
pub struct LaunchParams<'a> {
    inline: [*mut c_void; INLINE_PARAMS],
    spilled: Vec<*mut c_void>,
    /// How many pointers the last placement made.
    len: usize,
    /// The layout's values and the caller's arguments pointed to.
    _points_to: std::marker::PhantomData<&'a [u8]>,
}

/// Parameters a [`LaunchParams`] keeps inline.
const INLINE_PARAMS: usize = 12;

impl Default for LaunchParams<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl LaunchParams<'_> {
    /// No parameters yet (see [`LaunchLayout::place`]).
    #[inline]
    pub fn new() -> Self {
        LaunchParams {
            inline: [std::ptr::null_mut(); INLINE_PARAMS],
            spilled: Vec::new(),
            len: 0,
            _points_to: std::marker::PhantomData,
        }
    }

    /// One pointer per kernel parameter, each to a value of the parameter's
    /// size; they stay valid for `'a` (the layout and the caller's values
    /// and addresses are borrowed that long). The values are only read
    /// through them.
    #[inline]
    pub fn pointers(&mut self) -> &mut [*mut c_void] {
        match self.inline.get_mut(..self.len) {
            Some(inline) => inline,
            None => &mut self.spilled,
        }
    }
}

/// Kernel `kernel` has `count` parameters, more than a launch passes.
#[cold]
fn too_many_parameters(kernel: &str, count: usize) -> ImageError {
    ImageError::KernelArgument {
        kernel: kernel.to_string(),
        argument: None,
        what: format!(
            "kernel {kernel} has {count} parameters; ptxspec launches kernels with up to {MAX_PARAMS}"
        ),
    }
}

/// The launch layout of `signature`'s kernel for launches of `arg_count`
/// caller's arguments (the runtime's own parameter is not counted), its
/// values delivered as `delivery`, its parameters that may hold an address
/// `addresses`; [`LaunchLayout::fill`] then gives it a value set.
pub fn launch_layout(
    signature: &KernelSignature,
    delivery: Delivery,
    arg_count: usize,
    addresses: AddressParams,
) -> Result<LaunchLayout, ImageError> {
    let name = &signature.name;
    let count = signature.params.len();
    if count > MAX_PARAMS {
        return Err(too_many_parameters(name, count));
    }
    // A handler the kernel does not read may also be given by the caller
    // (extern "C" kernels were launched so before their handler was
    // marked): then it is passed as given.
    let handler = match signature.handler {
        Some(h) if !h.reads_constants && arg_count == count => None,
        h => h,
    };
    // Indices below MAX_PARAMS (checked above) fit in a u16.
    let user: smallvec::SmallVec<[(u16, u32); INLINE_USER_ARGS]> = signature
        .params
        .iter()
        .enumerate()
        .filter(|&(i, _)| Some(i) != handler.map(|h| h.index))
        .map(|(i, p)| (i as u16, p.size))
        .collect();
    if user.len() != arg_count {
        return Err(ImageError::KernelArgument {
            kernel: name.clone(),
            argument: None,
            what: format!(
                "kernel {name} takes {} arguments (the specialization constants are added by the runtime), {arg_count} given",
                user.len()
            ),
        });
    }
    // A kernel that reads no constant takes none, whatever the image's
    // other kernels do: its kernel_handler (if it takes one) is null.
    let reads = handler.is_some_and(|h| h.reads_constants);
    let size = handler
        .map_or(8, |h| signature.params[h.index].size as usize)
        .max(8);
    Ok(LaunchLayout {
        kernel: name.clone(),
        count,
        user,
        addresses,
        delivery: if reads { delivery } else { Delivery::InCode },
        reads,
        spec: smallvec::smallvec![0; size],
        spec_at: handler.map(|h| h.index),
    })
}

impl LaunchLayout {
    /// Gives the specialization-constant parameter a value set: zeros when
    /// the values are in the code, the values (`blob` with the launch's
    /// `values` written over it) in the parameter space, or the address
    /// `global_buffer` returns for a device buffer holding them. Values for
    /// constants the image does not have are for other kernels of the
    /// command group: ignored, as SYCL 2020 sets a handler's value for the
    /// kernels that use it; values for a kernel whose values are in the
    /// code are an error.
    pub fn fill<E: From<ImageError>, V: AsRef<[u8]>>(
        &mut self,
        image: &ImageData,
        blob: &[u8],
        values: &[(&str, V)],
        global_buffer: impl FnOnce(&[u8]) -> Result<u64, E>,
    ) -> Result<(), E> {
        self.fill_with_slots(image, blob, values, |id| image.slot(id), global_buffer)
    }

    /// [`fill`](Self::fill), each value's slot in `image` given by
    /// `slot_of` (which must answer as [`ImageData::slot`] does): a launch
    /// that remembers the slots of the values it saw reads nothing of the
    /// image for them.
    pub fn fill_with_slots<E: From<ImageError>, V: AsRef<[u8]>>(
        &mut self,
        image: &ImageData,
        blob: &[u8],
        values: &[(&str, V)],
        slot_of: impl Fn(&str) -> Option<Slot>,
        global_buffer: impl FnOnce(&[u8]) -> Result<u64, E>,
    ) -> Result<(), E> {
        // Values for constants the image lacks are for other kernels.
        let reads = self.reads;
        let slot_of = |id: &str| if reads { slot_of(id) } else { None };
        match self.delivery {
            Delivery::InCode => {
                if let Some((id, _)) = values.iter().find(|(id, _)| slot_of(id).is_some()) {
                    return Err(ImageError::SpecConst {
                        id: id.to_string(),
                        what: format!(
                            "values set on the handler cannot reach kernel {}: its image {} has its values in the code",
                            self.kernel,
                            image.id()
                        ),
                    }
                    .into());
                }
            }
            Delivery::ParamSpace => {
                let contents =
                    self.spec
                        .get_mut(..blob.len())
                        .ok_or_else(|| ImageError::BadImage {
                            image: image.id().to_string(),
                            what: format!(
                                "the values do not fit kernel {}'s parameter",
                                self.kernel
                            ),
                        })?;
                super::few_bytes::copy_few(contents, blob);
                for (id, v) in values {
                    if let Some(slot) = slot_of(id) {
                        slot.write(contents, id, v.as_ref())?;
                    }
                }
            }
            Delivery::GlobalBuffer => {
                let mut patched: Option<Vec<u8>> = None;
                for (id, v) in values {
                    if let Some(slot) = slot_of(id) {
                        let p = patched.get_or_insert_with(|| blob.to_vec());
                        slot.write(p, id, v.as_ref())?;
                    }
                }
                let address = global_buffer(patched.as_deref().unwrap_or(blob))?;
                self.spec[..8].copy_from_slice(&address.to_le_bytes());
            }
        }
        Ok(())
    }

    /// What the specialization-constant parameter receives.
    #[cfg(test)]
    pub(crate) fn spec_argument(&self) -> &[u8] {
        &self.spec
    }

    /// The parameters that take device memory, never a value (as the
    /// layout was made with them).
    pub fn addresses(&self) -> AddressParams {
        self.addresses
    }

    /// How many arguments the caller passes.
    #[inline]
    pub fn arguments(&self) -> usize {
        self.user.len()
    }

    /// How the values reach the kernel (`InCode` for one that reads none).
    #[inline]
    pub fn delivery(&self) -> Delivery {
        self.delivery
    }

    /// The parameters of a launch with the caller's `args`, checked against
    /// the layout (their count and sizes, and device memory where a
    /// parameter may hold an address).
    pub fn params<'a>(
        &'a self,
        args: impl ExactSizeIterator<Item = KernelArg<'a>>,
    ) -> Result<LaunchParams<'a>, ImageError> {
        let mut params = LaunchParams::new();
        self.place(args, &mut params)?;
        Ok(params)
    }

    /// [`params`](Self::params) into `params` (the caller's, made once;
    /// a launch then copies no parameter array), returning its pointers.
    /// Inlined where it is called: a launch's instructions are its cost
    /// (BENCHMARKS.md, "launch overhead").
    #[inline(always)]
    pub fn place<'a, 'p>(
        &'a self,
        args: impl ExactSizeIterator<Item = KernelArg<'a>>,
        params: &'p mut LaunchParams<'a>,
    ) -> Result<&'p mut [*mut c_void], ImageError> {
        if args.len() != self.user.len() {
            return Err(self.wrong_argument_count(args.len()));
        }
        // Every index below is below `count`: `spec_at` and the caller's
        // places are the signature's parameters' own indices — each of them
        // once (`launch_layout` gives the caller every parameter but the
        // handler's, at `spec_at`), so that every pointer is written below
        // and none is cleared first.
        params.len = self.count;
        let pointers = match params.inline.get_mut(..self.count) {
            Some(inline) => inline,
            None => {
                params.spilled.clear();
                params.spilled.resize(self.count, std::ptr::null_mut());
                &mut params.spilled
            }
        };
        if let Some(at) = self.spec_at {
            pointers[at] = self.spec.as_ptr().cast_mut().cast();
        }
        for (n, (arg, &(at, size))) in args.zip(&self.user).enumerate() {
            if arg.size() != size as usize {
                return Err(self.wrong_argument_size(n, arg.size(), size));
            }
            if let KernelArg::Value(_) = arg
                && self.addresses.has(at)
            {
                return Err(self.value_for_an_address(n, at));
            }
            // Pointers to values the caller keeps alive for `'a`; the
            // driver only reads through them.
            pointers[usize::from(at)] = match arg {
                KernelArg::Value(v) | KernelArg::Vouched(v) => v.as_ptr().cast_mut().cast(),
                KernelArg::Address(a) => std::ptr::from_ref(a).cast_mut().cast(),
            };
        }
        Ok(pointers)
    }

    // A launch's errors, out of its line: the code every launch runs then
    // spans fewer instruction-cache lines.

    #[cold]
    fn wrong_argument_count(&self, given: usize) -> ImageError {
        ImageError::KernelArgument {
            kernel: self.kernel.to_string(),
            argument: None,
            what: format!(
                "kernel {} takes {} arguments (the specialization constants are added by the runtime), {given} given",
                self.kernel,
                self.user.len(),
            ),
        }
    }

    #[cold]
    fn value_for_an_address(&self, n: usize, param: u16) -> ImageError {
        ImageError::KernelArgument {
            kernel: self.kernel.to_string(),
            argument: Some(n),
            what: format!(
                "kernel {} argument {n}: parameter {param} may hold an address (the kernel uses it as one, or \
                 passes it where that cannot be seen), so it takes device memory (Arg::buffer, Arg::slice, \
                 Arg::slice_mut), not a value: a number made into an address could reach memory the program \
                 freed; a raw address goes in only through the unsafe Arg::address",
                self.kernel,
            ),
        }
    }

    #[cold]
    fn wrong_argument_size(&self, n: usize, given: usize, size: u32) -> ImageError {
        ImageError::KernelArgument {
            kernel: self.kernel.to_string(),
            argument: Some(n),
            what: format!(
                "kernel {} argument {n}: {given} bytes given, the parameter has {size}",
                self.kernel,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a placement reads (all but the kernel's name) lies in the
    /// layout's first 128 bytes: two cache lines where it starts at one.
    #[test]
    fn a_placement_reads_two_cache_lines() {
        use std::mem::{offset_of, size_of};
        let read_end = offset_of!(LaunchLayout, user)
            + size_of::<smallvec::SmallVec<[(u16, u32); INLINE_USER_ARGS]>>();
        assert!(read_end <= 128, "a placement reads {read_end} bytes");
        // The name (read only for an error) lies past them, the rest before.
        assert!(offset_of!(LaunchLayout, kernel) >= read_end);
    }

    /// An image of one kernel `k(int *out, <buffer>, int n)` whose buffer
    /// parameter is marked `marker` (1 a pointer, 2 the contents, 3 not
    /// read) and is `size` bytes, with one `int`
    /// constant `c` (default 7) and one `short` constant `s` (default -1).
    fn image(marker: u32, size: u32) -> ImageData {
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
        ImageData::new("img", "", &sets.to_text()).unwrap()
    }

    /// `layout` filled with `img`'s defaults and no launch values (values
    /// in the parameter space: no device buffer is asked for).
    fn fill_with_defaults(layout: &mut LaunchLayout, img: &ImageData) {
        let no_buffer = |_: &[u8]| -> Result<u64, ImageError> { panic!("no device buffer") };
        layout
            .fill(
                img,
                img.default_blob(),
                &[] as &[(&str, Vec<u8>)],
                no_buffer,
            )
            .unwrap();
    }

    fn as_u32(p: *mut c_void) -> u32 {
        // SAFETY: the test points it at 4 readable bytes.
        unsafe { std::ptr::read_unaligned(p.cast::<u32>()) }
    }

    /// Both steps of a launch: the layout filled with `values`, and the
    /// caller's `args` — [`Prepared::params`] places them.
    struct Prepared<'a> {
        layout: LaunchLayout,
        args: Vec<KernelArg<'a>>,
    }

    impl Prepared<'_> {
        fn spec_argument(&self) -> &[u8] {
            &self.layout.spec
        }

        /// Each parameter's first 4 bytes, read through the launch's
        /// pointers.
        fn pointer_values(&self) -> Vec<u32> {
            let mut p = self.layout.params(self.args.iter().copied()).unwrap();
            p.pointers().iter().map(|&q| as_u32(q)).collect()
        }
    }

    fn launch_params<'a>(
        image: &ImageData,
        signature: &KernelSignature,
        delivery: Delivery,
        blob: &[u8],
        values: &[(&str, Vec<u8>)],
        args: impl ExactSizeIterator<Item = KernelArg<'a>>,
        global_buffer: impl FnOnce(&[u8]) -> Result<u64, ImageError>,
    ) -> Result<Prepared<'a>, ImageError> {
        let args: Vec<KernelArg<'a>> = args.collect();
        let mut layout = launch_layout(signature, delivery, args.len(), AddressParams(0))?;
        layout.fill(image, blob, values, global_buffer)?;
        layout.params(args.iter().copied())?;
        Ok(Prepared { layout, args })
    }

    #[test]
    fn param_space_values_are_the_blob_patched_with_the_launch_values() {
        let img = image(2, 8);
        let sig = &img.kernels()[0];
        let n = 100i32.to_le_bytes();
        let values = [("s", 5i16.to_le_bytes().to_vec())];
        let p = launch_params(
            &img,
            sig,
            Delivery::ParamSpace,
            img.default_blob(),
            &values,
            [KernelArg::Address(&0xdead_beef), KernelArg::Value(&n)].into_iter(),
            |_| panic!("no device buffer for values in the parameter space"),
        )
        .unwrap();
        assert_eq!(p.spec_argument(), [7, 0, 0, 0, 5, 0, 0, 0]);
        assert_eq!(p.pointer_values(), [0xdead_beef, 7, 100]);
    }

    /// A layout made once serves launch after launch: each fill replaces
    /// the values of the one before (a plan fills its layout with handler
    /// values, then again with none).
    #[test]
    fn a_layout_is_filled_again_for_each_value_set() {
        let img = image(2, 8);
        let mut layout =
            launch_layout(&img.kernels()[0], Delivery::ParamSpace, 2, AddressParams(0)).unwrap();
        assert_eq!(layout.arguments(), 2);
        let no_buffer = |_: &[u8]| -> Result<u64, ImageError> { panic!("no device buffer") };
        let n = 3i32.to_le_bytes();
        let args = || [KernelArg::Address(&1), KernelArg::Value(&n)].into_iter();
        layout
            .fill(
                &img,
                img.default_blob(),
                &[("c", 9i32.to_le_bytes())],
                no_buffer,
            )
            .unwrap();
        assert!(layout.params(args()).is_ok());
        assert_eq!(layout.spec_argument(), [9, 0, 0, 0, 0xff, 0xff, 0, 0]);
        fill_with_defaults(&mut layout, &img);
        assert!(layout.params(args()).is_ok());
        assert_eq!(layout.spec_argument(), [7, 0, 0, 0, 0xff, 0xff, 0, 0]);
        // A launch with another argument count needs a layout of its own.
        assert!(layout.params([KernelArg::Address(&1)].into_iter()).is_err());
    }

    #[test]
    fn an_unread_handler_is_passed_null_or_as_the_caller_gives_it() {
        let img = image(3, 8);
        let sig = &img.kernels()[0];
        let n = 5i32.to_le_bytes();
        let handler = 0x1234u64.to_le_bytes();
        let launch = |args: Vec<KernelArg<'_>>| {
            launch_params(
                &img,
                sig,
                Delivery::InCode,
                img.default_blob(),
                &[],
                args.into_iter(),
                |_| panic!("no buffer for a handler that is not read"),
            )
            .map(|p| p.pointer_values())
        };
        // The caller's arguments alone: the handler is null.
        let alone = launch(vec![KernelArg::Address(&7), KernelArg::Value(&n)]).unwrap();
        assert_eq!(alone, [7, 0, 5]);
        // With one for the handler too (how extern "C" kernels were
        // launched before it was marked): passed as given.
        let given = launch(vec![
            KernelArg::Address(&7),
            KernelArg::Value(&handler),
            KernelArg::Value(&n),
        ])
        .unwrap();
        assert_eq!(given, [7, 0x1234, 5]);
        assert!(launch(vec![KernelArg::Address(&7)]).is_err());
    }

    #[test]
    fn global_buffer_passes_the_address_of_the_patched_values() {
        let img = image(1, 8);
        let values = [("c", 9i32.to_le_bytes().to_vec())];
        let mut seen = Vec::new();
        let n = 1i32.to_le_bytes();
        let p = launch_params(
            &img,
            &img.kernels()[0],
            Delivery::GlobalBuffer,
            img.default_blob(),
            &values,
            [KernelArg::Address(&1), KernelArg::Value(&n)].into_iter(),
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
        let args = || [KernelArg::Address(&1), KernelArg::Value(&n)].into_iter();
        let p = launch_params(
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
        let e = launch_params(
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
        assert!(matches!(e, ImageError::SpecConst { .. }), "{e}");
        // A value for a constant the image does not have is for another
        // kernel: ignored.
        let p = launch_params(
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
            launch_params(
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
        let e = launch(&[KernelArg::Address(&1)]).unwrap();
        assert!(e.contains("takes 2 arguments"), "{e}");
        let short = [0u8; 2];
        let e = launch(&[KernelArg::Address(&1), KernelArg::Value(&short)]).unwrap();
        assert!(
            e.contains("argument 1: 2 bytes given, the parameter has 4"),
            "{e}"
        );
        assert_eq!(
            launch(&[KernelArg::Address(&1), KernelArg::Value(&[0; 4])]),
            None
        );
    }

    /// A parameter that may hold an address takes an address, never a
    /// value of its size, wherever it is among the arguments — and a
    /// parameter that holds none takes either.
    #[test]
    fn a_value_for_a_parameter_that_may_hold_an_address_is_refused() {
        let img = image(2, 8);
        let sig = &img.kernels()[0];
        let n = 5i32.to_le_bytes();
        let raw = 0x7000_0000_u64.to_le_bytes();
        for addresses in [AddressParams(0b001), AddressParams::every_wide(sig)] {
            let mut layout = launch_layout(sig, Delivery::ParamSpace, 2, addresses).unwrap();
            fill_with_defaults(&mut layout, &img);
            let e = layout
                .params([KernelArg::Value(&raw), KernelArg::Value(&n)].into_iter())
                .err()
                .expect("a value for parameter 0");
            let ImageError::KernelArgument {
                kernel,
                argument,
                what,
            } = &e
            else {
                panic!("{e}")
            };
            assert_eq!((kernel.as_str(), *argument), ("k", Some(0)), "{e}");
            assert!(what.contains("may hold an address"), "{e}");
            assert!(
                layout
                    .params([KernelArg::Address(&1), KernelArg::Value(&n)].into_iter())
                    .is_ok()
            );
        }
        // Parameter 2 (the `int n`) held an address: its value is refused.
        let mut layout = launch_layout(sig, Delivery::ParamSpace, 2, AddressParams(0b100)).unwrap();
        fill_with_defaults(&mut layout, &img);
        let e = layout
            .params([KernelArg::Address(&1), KernelArg::Value(&n)].into_iter())
            .err()
            .expect("a value for parameter 2");
        assert!(
            e.to_string().contains("argument 1: parameter 2 may hold"),
            "{e}"
        );
        // No address anywhere: a value of the size goes.
        let mut layout = launch_layout(sig, Delivery::ParamSpace, 2, AddressParams(0)).unwrap();
        fill_with_defaults(&mut layout, &img);
        assert!(
            layout
                .params([KernelArg::Value(&raw), KernelArg::Value(&n)].into_iter())
                .is_ok()
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

    /// Every argument error names the kernel, and the argument where one
    /// is wrong: a count that differs when the layout is made or when it
    /// is placed, and each argument of a size that differs.
    #[test]
    fn argument_errors_name_the_kernel_and_the_argument() {
        let img = image(2, 8);
        let sig = &img.kernels()[0];
        let named = |e: ImageError, want: Option<usize>| match e {
            ImageError::KernelArgument {
                kernel,
                argument,
                what,
            } => {
                assert_eq!(kernel, "k", "{what}");
                assert_eq!(argument, want, "{what}");
            }
            other => panic!("{other:?}"),
        };
        for count in [0, 1, 3] {
            named(
                launch_layout(sig, Delivery::ParamSpace, count, AddressParams(0)).unwrap_err(),
                None,
            );
        }
        let mut layout = launch_layout(sig, Delivery::ParamSpace, 2, AddressParams(0)).unwrap();
        fill_with_defaults(&mut layout, &img);
        let (n, short, long) = (3i32.to_le_bytes(), [1u8; 2], [1u8; 16]);
        named(
            layout
                .params([KernelArg::Address(&1)].into_iter())
                .err()
                .expect("refused"),
            None,
        );
        for wrong in [&short[..], &long[..]] {
            named(
                layout
                    .params([KernelArg::Address(&1), KernelArg::Value(wrong)].into_iter())
                    .err()
                    .expect("refused"),
                Some(1),
            );
            named(
                layout
                    .params([KernelArg::Value(wrong), KernelArg::Value(&n)].into_iter())
                    .err()
                    .expect("refused"),
                Some(0),
            );
        }
    }

    /// A kernel of `count` 4-byte parameters and no handler.
    fn scalars(count: usize) -> KernelSignature {
        KernelSignature {
            name: format!("k{count}"),
            params: (0..count)
                .map(|_| super::super::signature::KernelParam {
                    size: 4,
                    align: 4,
                    ptx_type: "u32".into(),
                })
                .collect(),
            handler: None,
        }
    }

    /// The placement holds one pointer per parameter, for every count a
    /// launch takes (none, some, the most), a second placement into the
    /// same parameters replacing the first — while a kernel of more
    /// parameters than that has no layout.
    #[test]
    fn every_parameter_count_up_to_the_most_places_one_pointer_each() {
        for count in [MAX_PARAMS, 0, 1, 7, 8, 9, MAX_PARAMS - 1, 3] {
            let layout =
                launch_layout(&scalars(count), Delivery::InCode, count, AddressParams(0)).unwrap();
            let before: Vec<[u8; 4]> = (0..count as u32).map(|i| (i + 100).to_le_bytes()).collect();
            let values: Vec<[u8; 4]> = (0..count as u32)
                .map(|i| (i * 3 + 1).to_le_bytes())
                .collect();
            let mut params = LaunchParams::new();
            layout
                .place(before.iter().map(|v| KernelArg::Value(v)), &mut params)
                .unwrap();
            let placed = layout
                .place(values.iter().map(|v| KernelArg::Value(v)), &mut params)
                .unwrap();
            let read: Vec<u32> = placed.iter().map(|&p| as_u32(p)).collect();
            let want: Vec<u32> = (0..count as u32).map(|i| i * 3 + 1).collect();
            assert_eq!(read, want, "{count} parameters");
        }
        let e = launch_layout(
            &scalars(MAX_PARAMS + 1),
            Delivery::InCode,
            MAX_PARAMS + 1,
            AddressParams(0),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(&format!("up to {MAX_PARAMS}")), "{e}");
    }
}
