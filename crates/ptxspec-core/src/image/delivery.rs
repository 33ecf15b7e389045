//! How the values reach a kernel: the one axis every part of ptxspec asks.
//!
//! An image records where its own (emulated) code finds the buffer once, as
//! its placement — a [`Delivery`] — and [`delivery`] turns that placement
//! and the code a build loads into how a launch passes the values. The
//! post-link chooses the placement (from its `--buffer` option, a
//! [`BufferPlacement`](crate::postlink::BufferPlacement)); the bundle, the
//! runtime and `inspect` only ask.

/// How the values reach the kernels of an image or a built image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Delivery {
    /// In the code itself (native, LTO, AOT, or no kernel reads a
    /// constant): the kernel's handler parameter receives zeros.
    InCode,
    /// A pointer to a device buffer holding the values.
    GlobalBuffer,
    /// The values themselves, in the kernel's parameter space, with each
    /// launch.
    ParamSpace,
}

/// Which code a build loads for an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeForm {
    /// The post-link's own PTX, whose getters load the values from the
    /// buffer (emulated and tiered builds, until a tier is linked).
    Emulated,
    /// Code with the values in it: specialized PTX, an LTO-linked cubin.
    Specialized,
}

impl Delivery {
    /// Whether values set at launch (on a handler) can reach the kernels.
    pub fn takes_values_at_launch(self) -> bool {
        self != Delivery::InCode
    }

    /// One word for it, as `inspect` and `--buffer` say it: `none`,
    /// `global` or `param`.
    pub fn words(self) -> &'static str {
        match self {
            Delivery::InCode => "none",
            Delivery::GlobalBuffer => "global",
            Delivery::ParamSpace => "param",
        }
    }
}

/// How a launch of code `form` built from an image of `placement` passes
/// the values: the one decision of delivery.
pub fn delivery(placement: Delivery, form: CodeForm) -> Delivery {
    match form {
        CodeForm::Emulated => placement,
        CodeForm::Specialized => Delivery::InCode,
    }
}
