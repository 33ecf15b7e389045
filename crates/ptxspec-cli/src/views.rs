//! Views of device-image properties for people (`ptxspec inspect`) and for
//! other tools (`--json`, a stable shape that tests and scripts rely on).

use std::fmt::Write as _;

use ptxspec_core::props::{
    DEVICE_REQUIREMENTS_SET, PropParseError, PropertySets, PropertyValue, SpecConstProps,
    decode_u32s,
};

/// The property set of the scalars' types (the post-link's).
const VALUE_TYPES: &str = "ptxspec/value types";

/// What `inspect` reports about a property file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PropReport {
    /// The constants' descriptors and default values, when the file has them.
    pub spec_constants: Option<SpecConstProps>,
    /// The device requirements by name, each as its numbers.
    pub device_requirements: Option<Vec<(String, Vec<u64>)>>,
    /// Per constant, the scalars of its value by offset (the post-link's
    /// value types), when the file records them.
    pub value_types: Vec<(String, Vec<(u32, ptxspec_core::layout::ScalarKind)>)>,
    /// Sets that are none of the above, by name.
    pub other_sets: Vec<String>,
}

/// Why a property file cannot be inspected.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("{0}")]
    /// The text is not a property file.
    Parse(#[from] PropParseError),
    #[error("{0}")]
    /// A property set breaks its schema.
    Shape(#[from] ptxspec_core::props::SchemaError),
}

impl PropReport {
    /// The report of a property file's text.
    pub fn from_text(text: &str) -> Result<Self, InspectError> {
        Self::from_sets(&PropertySets::parse(text)?)
    }

    /// The report of parsed property sets.
    pub fn from_sets(sets: &PropertySets) -> Result<Self, InspectError> {
        let sc = SpecConstProps::read(sets)?;
        let has_sc = !sc.constants.is_empty() || sc.default_values.is_some();
        let device_requirements = match sets.get(DEVICE_REQUIREMENTS_SET) {
            None => None,
            Some(set) => Some(
                set.iter()
                    .map(|(name, v)| {
                        let values = match v {
                            PropertyValue::U32(x) => Some(vec![*x as u64]),
                            // DPC++'s work-group size: 64-bit integers.
                            PropertyValue::Bytes { data, .. }
                                if name == ptxspec_core::features::WORK_GROUP_SIZE_U64 =>
                            {
                                (data.len() % 8 == 0).then(|| {
                                    data.chunks_exact(8)
                                        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                                        .collect()
                                })
                            }
                            PropertyValue::Bytes { data, .. } => {
                                decode_u32s(data).map(|v| v.into_iter().map(u64::from).collect())
                            }
                        };
                        values.map(|vals| (name.to_string(), vals)).ok_or_else(|| {
                            InspectError::Shape(ptxspec_core::props::SchemaError::property(
                                DEVICE_REQUIREMENTS_SET,
                                name,
                                "not an array of u32",
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        // The types are for reading the defaults: a set that does not read
        // leaves them out, and is listed with the other sets.
        let value_types = ptxspec_core::props::ImageProps::read(sets)
            .map(|p| p.value_types)
            .unwrap_or_default();
        let other_sets = sets
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                ![
                    ptxspec_core::props::SPEC_CONSTANTS_SET,
                    ptxspec_core::props::DEFAULT_VALUES_SET,
                    DEVICE_REQUIREMENTS_SET,
                ]
                .contains(n)
                    && (*n != VALUE_TYPES || value_types.is_empty())
            })
            .map(str::to_string)
            .collect();
        Ok(PropReport {
            spec_constants: has_sc.then_some(sc),
            device_requirements,
            value_types,
            other_sets,
        })
    }

    /// `{"specialization_constants": {...}, "default_values": "hex",
    /// "device_requirements": {...}}`, each key only when its set exists.
    pub fn to_json(&self) -> String {
        json_text(&self.json())
    }

    /// The report's JSON fields, in the order `to_json` writes them.
    fn json(&self) -> PropJson<'_> {
        let sc = self.spec_constants.as_ref();
        PropJson {
            specialization_constants: sc.filter(|sc| !sc.constants.is_empty()).map(|sc| {
                InOrder(
                    sc.constants
                        .iter()
                        .map(|(name, descs)| {
                            let triples = descs.iter().map(|d| [d.id, d.offset, d.size]).collect();
                            (name.as_str(), triples)
                        })
                        .collect(),
                )
            }),
            default_values: sc.and_then(|sc| sc.default_values.as_deref()).map(hex),
            device_requirements: self.device_requirements.as_ref().map(|reqs| {
                InOrder(
                    reqs.iter()
                        .map(|(name, vals)| (name.as_str(), vals.as_slice()))
                        .collect(),
                )
            }),
        }
    }

    /// A report for people.
    pub fn to_human(&self) -> String {
        let mut out = String::new();
        match &self.spec_constants {
            None => out.push_str("no specialization constants\n"),
            Some(sc) => {
                let _ = writeln!(out, "specialization constants ({}):", sc.constants.len());
                let buffer_offsets = sc.buffer_offsets();
                for (i, (name, descs)) in sc.constants.iter().enumerate() {
                    let ids: Vec<String> = descs
                        .iter()
                        .filter(|d| !d.is_padding())
                        .map(|d| d.id.to_string())
                        .collect();
                    let _ = write!(out, "  {name}\n    numeric IDs: {{{}}}", ids.join(", "));
                    if let Some(offs) = &buffer_offsets {
                        let _ = write!(out, ", buffer offset {}", offs[i]);
                    }
                    out.push('\n');
                    let size = descs.first().map_or(0, |d| d.size);
                    let at = buffer_offsets.as_ref().map(|o| o[i]);
                    if let Some(line) = typed_default(
                        &self.value_types,
                        name,
                        at,
                        size,
                        sc.default_values.as_deref(),
                    ) {
                        let _ = writeln!(out, "    {line}");
                    }
                    for d in descs {
                        if d.is_padding() {
                            let _ = writeln!(
                                out,
                                "    <padding, offset {}, size {}>",
                                d.offset, d.size
                            );
                        } else {
                            let _ = writeln!(
                                out,
                                "    <ID {}, offset {}, size {}>",
                                d.id, d.offset, d.size
                            );
                        }
                    }
                }
                match &sc.default_values {
                    Some(blob) => {
                        let _ = writeln!(
                            out,
                            "default values ({}):",
                            count(blob.len(), "byte", "bytes")
                        );
                        for (row, chunk) in blob.chunks(16).enumerate() {
                            let bytes: Vec<String> =
                                chunk.iter().map(|b| format!("{b:02x}")).collect();
                            let _ = writeln!(out, "  {:04x}: {}", row * 16, bytes.join(" "));
                        }
                    }
                    None => out.push_str("no default values\n"),
                }
            }
        }
        match &self.device_requirements {
            None => out.push_str("no device requirements\n"),
            Some(reqs) => {
                out.push_str("device requirements:\n");
                for (name, vals) in reqs {
                    let v: Vec<String> = match name.as_str() {
                        "aspects" | "aspect" | "fixed_target" => vals
                            .iter()
                            .map(|&a| {
                                format!("{} ({a})", ptxspec_core::features::Aspect(a as u32).name())
                            })
                            .collect(),
                        _ => vals.iter().map(u64::to_string).collect(),
                    };
                    let _ = writeln!(out, "  {name}: [{}]", v.join(", "));
                }
            }
        }
        for name in &self.other_sets {
            let _ = writeln!(out, "other property set: [{name}]");
        }
        out
    }
}

/// What a file holds, judged by its content (not its name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// PTX text (a `.version` directive).
    Ptx,
    /// A `.prop` property file.
    Prop,
    /// A DPC++ file table (`table.txt`).
    FileTable,
    /// A SPIR-V module (its magic number).
    Spirv,
    /// ptxspec's `.ltoir` container.
    LtoIr,
    /// None of these.
    Unknown,
}

impl Format {
    /// What the file is, in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Format::Ptx => "PTX",
            Format::Prop => "a property file (.prop)",
            Format::FileTable => "a file table (table.txt)",
            Format::Spirv => "a SPIR-V module",
            Format::LtoIr => "an LTO-IR container (.ltoir)",
            Format::Unknown => "none of PTX, .prop, SPIR-V or .ltoir",
        }
    }
}

/// The format of `bytes`.
pub fn detect(bytes: &[u8]) -> Format {
    if bytes.len() >= 4 {
        let w = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if w == 0x0723_0203 || w.swap_bytes() == 0x0723_0203 {
            return Format::Spirv;
        }
    }
    if bytes.starts_with(b"PTXSPEC-LTOIR\0") {
        return Format::LtoIr;
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Format::Unknown;
    };
    // The first thing that is not white space or a comment.
    let mut rest = text.trim_start();
    loop {
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    if rest.starts_with(".version") || rest.starts_with(".target") {
        return Format::Ptx;
    }
    if let Some(line) = rest.lines().next()
        && line.starts_with('[')
        && line.trim_end().ends_with(']')
    {
        return if line.contains('|') {
            Format::FileTable
        } else {
            Format::Prop
        };
    }
    Format::Unknown
}

/// `n` and the noun for it, singular or plural (reports and the CLI's
/// messages count with it too).
pub use ptxspec_core::layout::text::count;

/// Where an image's kernels find the buffer, in words.
pub fn placement_of(img: &ptxspec_core::postlink::PostLinkedImage) -> &'static str {
    placement_words(img.placement, img.info.spec_consts_replaced_with_default)
}

/// [`placement_of`] for an image read from its files.
fn delivery_words(image: &ptxspec_core::image::ImageData) -> &'static str {
    placement_words(
        image.placement(),
        image.info().spec_consts_replaced_with_default,
    )
}

/// An image's placement in words: its first word is what `--buffer` says.
fn placement_words(placement: ptxspec_core::image::Delivery, aot: bool) -> &'static str {
    use ptxspec_core::image::Delivery;
    match placement {
        Delivery::InCode if aot => "none (AOT: the defaults are in the code)",
        Delivery::ParamSpace => "param (the values in the kernel's parameter space)",
        Delivery::GlobalBuffer => "global (a pointer to global memory)",
        _ => "none (no kernel reads a constant)",
    }
}

/// What an image written by the post-link holds, from its files (`.ptx`
/// and the `.prop` beside it): its kernels, where they find the values,
/// then the property sets as [`PropReport`] shows them.
pub fn written_image_report(
    image: &ptxspec_core::image::ImageData,
    props: &str,
) -> Result<String, InspectError> {
    let report = PropReport::from_text(props)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "device image {} (post-linked; its .prop is beside it):",
        image.id()
    );
    let _ = writeln!(out, "  buffer: {}", delivery_words(image));
    for (k, params) in kernel_params(image) {
        let _ = writeln!(out, "  kernel {}", k.name);
        for p in params {
            let _ = writeln!(
                out,
                "    parameter {}: {} bytes, {}",
                p.index, p.size, p.kind
            );
        }
    }
    out.push_str(&report.to_human());
    Ok(out)
}

/// One kernel parameter as `inspect` shows it: what `--arg INDEX` names.
#[derive(serde::Serialize)]
pub struct ParamShown {
    /// Its index among the kernel's parameters (the handler's included).
    pub index: usize,
    /// Its size in bytes.
    pub size: u32,
    /// What it holds: `pointer`, `int32`, `uint64`, `float32`, `aggregate`,
    /// or `kernel_handler`.
    pub kind: String,
}

/// Each kernel of `image` with its parameters: the signature's sizes and
/// handler, the kinds as the kernel's PTX shows them (a 64-bit parameter
/// the kernel may use as an address is a pointer).
pub fn kernel_params(
    image: &ptxspec_core::image::ImageData,
) -> Vec<(&ptxspec_core::image::KernelSignature, Vec<ParamShown>)> {
    use ptxspec_core::arguments::{KernelParams, ParamKind};
    let read = KernelParams::all_from_ptx(image.ptx()).unwrap_or_default();
    image
        .kernels()
        .iter()
        .map(|k| {
            let kinds = read.iter().find(|p| p.kernel() == k.name);
            let params = k
                .params
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let kind = match (k.handler, kinds.and_then(|c| c.params().get(i))) {
                        (Some(h), _) if h.index == i => "kernel_handler".to_string(),
                        (_, Some(ParamKind::Pointer)) => "pointer".into(),
                        (_, Some(ParamKind::Int { bits, signed })) => {
                            format!("{}int{bits}", if *signed { "" } else { "u" })
                        }
                        (_, Some(ParamKind::Float { bits })) => format!("float{bits}"),
                        (_, Some(ParamKind::Aggregate { .. })) => "aggregate".into(),
                        _ => "unknown".into(),
                    };
                    ParamShown {
                        index: i,
                        size: p.size,
                        kind,
                    }
                })
                .collect();
            (k, params)
        })
        .collect()
}

/// [`written_image_report`] as the one JSON document `inspect --json`
/// prints for PTX: `{"images": [{"name", "kernels", "buffer", ...}]}`.
pub fn written_image_json(
    image: &ptxspec_core::image::ImageData,
    props: &str,
) -> Result<String, InspectError> {
    let report = PropReport::from_text(props)?;
    let images = ImagesJson {
        images: vec![ImageJson {
            name: image.id(),
            kernels: image.kernels().iter().map(|k| k.name.as_str()).collect(),
            parameters: Some(
                kernel_params(image)
                    .into_iter()
                    .map(|(k, p)| (k.name.as_str(), p))
                    .collect(),
            ),
            buffer: delivery_words(image).split(' ').next().unwrap_or("none"),
            props: report.json(),
        }],
    };
    Ok(json_text(&images))
}

/// One JSON document for the images a post-link writes:
/// `{"images": [{"name", "kernels", "buffer", "specialization_constants",
/// "default_values", "device_requirements"}, ...]}`, the last three as in
/// [`PropReport::to_json`].
pub fn images_json(
    images: &[ptxspec_core::postlink::PostLinkedImage],
) -> Result<String, InspectError> {
    let reports = images
        .iter()
        .map(|img| PropReport::from_sets(&img.props))
        .collect::<Result<Vec<_>, _>>()?;
    let images = ImagesJson {
        images: images
            .iter()
            .zip(&reports)
            .map(|(img, report)| ImageJson {
                name: &img.stem,
                kernels: img.kernels.iter().map(|k| k.name.as_str()).collect(),
                parameters: None,
                buffer: placement_of(img).split(' ').next().unwrap_or("none"),
                props: report.json(),
            })
            .collect(),
    };
    Ok(json_text(&images))
}

/// The property sets' part of `inspect --json`: each key only where its set
/// is there.
#[derive(serde::Serialize)]
struct PropJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    specialization_constants: Option<InOrder<'a, Vec<[u32; 3]>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    default_values: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_requirements: Option<InOrder<'a, &'a [u64]>>,
}

/// One image of `inspect --json` on PTX or a written image.
#[derive(serde::Serialize)]
struct ImageJson<'a> {
    name: &'a str,
    kernels: Vec<&'a str>,
    buffer: &'a str,
    #[serde(flatten)]
    props: PropJson<'a>,
    /// Each kernel's parameters, by its name (written images, whose PTX
    /// was read); last, so that the keys before keep their places.
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<std::collections::BTreeMap<&'a str, Vec<ParamShown>>>,
}

#[derive(serde::Serialize)]
struct ImagesJson<'a> {
    images: Vec<ImageJson<'a>>,
}

/// A JSON object whose keys keep the order given (the file's order of
/// constants and requirements), where a map type would sort them.
struct InOrder<'a, V>(Vec<(&'a str, V)>);

impl<V: serde::Serialize> serde::Serialize for InOrder<'_, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// `value` as compact JSON. Writing these types cannot fail (string keys,
/// no floats); were it to, the error is the document.
fn json_text(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value)
        .unwrap_or_else(|e| format!("{{\"error\":{}}}", json_string(&e.to_string())))
}

/// A report for people on a post-linked image: kernels with their
/// parameters, then the constants with IDs, buffer offsets and defaults.
pub fn image_report(img: &ptxspec_core::postlink::PostLinkedImage) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "device image {}:", img.stem);
    let _ = writeln!(out, "  buffer: {}", placement_of(img));
    for k in &img.kernels {
        let params: Vec<String> = k
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                use ptxspec_core::image::Delivery;
                let mark = match k.handler {
                    Some(h) if h.index == i && !h.reads_constants => {
                        " (kernel_handler through which no constant is read: null)"
                    }
                    Some(h) if h.index == i && img.placement == Delivery::ParamSpace => {
                        " (spec-constant buffer: the values, in the parameter space)"
                    }
                    Some(h) if h.index == i => " (spec-constant buffer: pointer to global memory)",
                    _ => "",
                };
                format!("{}B/{}{mark}", p.size, p.align)
            })
            .collect();
        let _ = writeln!(out, "  kernel {}({})", k.name, params.join(", "));
    }
    let _ = writeln!(
        out,
        "  {}, buffer of {}:",
        count(
            img.layout.constants().len(),
            "specialization constant",
            "specialization constants"
        ),
        count(img.layout.default_blob().len(), "byte", "bytes")
    );
    for p in img.layout.constants() {
        let ids: Vec<String> = p.ids().map(|i| i.to_string()).collect();
        let id = p.constant.symbolic_id();
        let typed = typed_default(
            &img.info.value_types,
            id,
            Some(p.offset),
            p.constant.size(),
            Some(img.layout.default_blob()),
        );
        let _ = writeln!(
            out,
            "    {id} -> ID {{{}}}, offset {}, size {}, align {}, {}",
            ids.join(", "),
            p.offset,
            p.constant.size(),
            p.constant.align(),
            typed.unwrap_or_else(|| format!("default {}", hex(p.constant.default_value())))
        );
    }
    out
}

/// `type int32_t, default 7` (a scalar) or `scalars (defaults): float 1.5
/// at 0, float -2 at 4` (a composite's, as its kernels read them) for
/// constant `name` of `size` bytes at buffer offset `at`, from the value
/// types and the defaults.
fn typed_default(
    value_types: &[(String, Vec<(u32, ptxspec_core::layout::ScalarKind)>)],
    name: &str,
    at: Option<u32>,
    size: u32,
    blob: Option<&[u8]>,
) -> Option<String> {
    use ptxspec_core::layout::text::format_scalar;
    let (_, leaves) = value_types.iter().find(|(n, _)| n == name)?;
    let value = |offset: u32, kind: ptxspec_core::layout::ScalarKind| {
        let start = at?.checked_add(offset)? as usize;
        let bytes = blob?.get(start..start + kind.size() as usize)?;
        format_scalar(kind, bytes)
    };
    match leaves.as_slice() {
        [] => None,
        [(0, kind)] if kind.size() == size => Some(match value(0, *kind) {
            Some(v) => format!("type {}, default {v}", kind.cpp_name()),
            None => format!("type {}", kind.cpp_name()),
        }),
        many => {
            let parts: Vec<String> = many
                .iter()
                .map(|&(o, k)| match value(o, k) {
                    Some(v) => format!("{} {v} at {o}", k.cpp_name()),
                    None => format!("{} at {o}", k.cpp_name()),
                })
                .collect();
            Some(format!("scalars (defaults): {}", parts.join(", ")))
        }
    }
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// `{"units": [{"name", "bytes"}, ...]}` for the units of an LTO-IR file.
pub fn ltoir_json<B: AsRef<[u8]>>(units: &[(String, B)]) -> String {
    #[derive(serde::Serialize)]
    struct Unit<'a> {
        name: &'a str,
        bytes: usize,
    }
    #[derive(serde::Serialize)]
    struct Units<'a> {
        units: Vec<Unit<'a>>,
    }
    json_text(&Units {
        units: units
            .iter()
            .map(|(name, ir)| Unit {
                name,
                bytes: ir.as_ref().len(),
            })
            .collect(),
    })
}

/// A JSON string literal.
pub fn json_string(s: &str) -> String {
    // A string serializes whatever it holds.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let text = "[SYCL/specialization constants]\n\
                    a=2|gBAAAAAAAAAAAAAAAAAAAgAAAAA\n\
                    [SYCL/specialization constants default values]\n\
                    all=2|IBAAAAAAAAAFAAAAjBAAAEA\n\
                    [SYCL/device requirements]\n\
                    reqd_sub_group_size=1|32\n";
        let r = PropReport::from_text(text).unwrap();
        assert_eq!(
            r.to_json(),
            "{\"specialization_constants\":{\"a\":[[0,0,8]]},\
             \"default_values\":\"140000006300000001\",\
             \"device_requirements\":{\"reqd_sub_group_size\":[32]}}"
        );
        let human = r.to_human();
        assert!(
            human.contains("numeric IDs: {0}, buffer offset 0"),
            "{human}"
        );
        assert!(human.contains("reqd_sub_group_size: [32]"), "{human}");
    }

    #[test]
    fn json_keys_only_for_present_sets() {
        let r = PropReport::from_text("[SYCL/misc]\nx=1|1\n").unwrap();
        assert_eq!(r.to_json(), "{}");
        assert_eq!(json_string("a\"b\\\u{1}"), "\"a\\\"b\\\\\\u0001\"");
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn formats_by_content() {
        assert_eq!(detect(b"//\n// NVVM\n\n.version 8.8\n"), Format::Ptx);
        assert_eq!(detect(b"/* x */ .target sm_90"), Format::Ptx);
        assert_eq!(
            detect(b"[SYCL/specialization constants]\na=1|2\n"),
            Format::Prop
        );
        assert_eq!(detect(b"[Code|Properties|Symbols]\n"), Format::FileTable);
        assert_eq!(detect(&[0x03, 0x02, 0x23, 0x07, 0, 0]), Format::Spirv);
        assert_eq!(detect(b"PTXSPEC-LTOIR\0\0\0"), Format::LtoIr);
        assert_eq!(detect(&[0xff, 0xfe, 0x00]), Format::Unknown);
        assert_eq!(detect(b"hello"), Format::Unknown);
    }
}
