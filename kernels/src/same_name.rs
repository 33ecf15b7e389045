//! The kernels and constants of `kernels/same_name.cu` and
//! `kernels/same_name_other.cu` (SYCL-CTS's same-name and declaration-form
//! cases), which the CPU and GPU tests share.

pub const STRESS: &str = "_Z16same_name_stressPiN7ptxspec14kernel_handlerE";
pub const WAYS: &str = "_Z20defined_various_waysPiN7ptxspec14kernel_handlerE";
pub const HERE: &str = "_Z13per_unit_herePiN7ptxspec14kernel_handlerE";
pub const THERE: &str = "_Z14per_unit_therePiN7ptxspec14kernel_handlerE";
/// `same<int>` in ten scopes, in the order the stress kernel writes
/// them; each defaults to its index.
pub const SCOPES: [&str; 10] = [
    "same<int>",
    "outer::same<int>",
    "outer::inner::same<int>",
    "outer::(anonymous namespace)::same<int>",
    "outer::(anonymous namespace)::u_inner::same<int>",
    "outer::(anonymous namespace)::u_inner::(anonymous namespace)::same<int>",
    "(anonymous namespace)::same<int>",
    "(anonymous namespace)::u_outer::same<int>",
    "(anonymous namespace)::u_outer::(anonymous namespace)::same<int>",
    "(anonymous namespace)::u_outer::(anonymous namespace)::u_inner::same<int>",
];
/// Every declaration form, in the order the other kernel writes them;
/// defaults 10 to 16.
pub const FORMS: [&str; 7] = [
    "plain_form",
    "static_form",
    "inline_form",
    "member_holder::member_form",
    "template_holder<int>::member_form",
    "macro_form",
    "same_name.named",
];
/// The constants of internal linkage with one name in two units.
pub const HERE_ID: &str = "(anonymous namespace)::per_unit@same_name";
pub const THERE_ID: &str = "(anonymous namespace)::per_unit@same_name_other";
