//! What a device image needs of a device: the `SYCL/device requirements`
//! property set.

use std::collections::BTreeSet;

use super::Aspect;
use crate::props::{
    DEVICE_REQUIREMENTS_SET, PropertySets, PropertyValue, SchemaError, decode_u32s, encode_u32s,
};

/// Requirements of a kernel or an image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirements {
    /// Aspects the device must have (declared ∪ used).
    pub aspects: BTreeSet<Aspect>,
    /// `.reqntid`: the work-group size launches must use, each dimension
    /// as PTX and DPC++'s property (`reqd_work_group_size_uint64_t`) give
    /// it — 64 bits, never narrowed: a size no device has is
    /// `kernel_not_supported` when checked, not another size.
    pub reqd_work_group_size: Option<Vec<u64>>,
    /// The sub-group size the code relies on (32 on NVIDIA).
    pub reqd_sub_group_size: Option<u32>,
    /// Targets the code is restricted to, as aspects; `None` when unrestricted.
    pub fixed_target: Option<Vec<u32>>,
}

impl Requirements {
    /// Whether it requires nothing.
    pub fn is_empty(&self) -> bool {
        self == &Requirements::default()
    }

    /// Writes the set as DPC++'s sycl-post-link does
    /// (`ComputeModuleRuntimeInfo.cpp`): `aspects` always (an empty array
    /// when there are none), `reqd_work_group_size_uint64_t` as one 64-bit
    /// integer per dimension, `reqd_sub_group_size` as a 32-bit number only
    /// when the code requires one, `fixed_target` as 32-bit integers.
    pub fn write(&self, sets: &mut PropertySets) {
        let set = sets.set_mut(DEVICE_REQUIREMENTS_SET);
        let a: Vec<u32> = self.aspects.iter().map(|a| a.0).collect();
        set.insert("aspects", PropertyValue::bytes(encode_u32s(&a)));
        if let Some(t) = &self.fixed_target {
            set.insert("fixed_target", PropertyValue::bytes(encode_u32s(t)));
        }
        if let Some(w) = &self.reqd_work_group_size {
            let bytes: Vec<u8> = w.iter().flat_map(|d| d.to_le_bytes()).collect();
            set.insert(WORK_GROUP_SIZE_U64, PropertyValue::bytes(bytes));
        }
        if let Some(s) = self.reqd_sub_group_size {
            set.insert("reqd_sub_group_size", PropertyValue::U32(s));
        }
    }

    /// Reads the set; `Ok(default)` when absent. Reads DPC++'s current
    /// forms and the older ones (`reqd_work_group_size` as `<count>
    /// <dims>` 32-bit integers, `reqd_sub_group_size` as a byte array).
    pub fn read(sets: &PropertySets) -> Result<Requirements, SchemaError> {
        let mut r = Requirements::default();
        let Some(set) = sets.get(DEVICE_REQUIREMENTS_SET) else {
            return Ok(r);
        };
        let bad =
            |name: &str, what: &str| SchemaError::property(DEVICE_REQUIREMENTS_SET, name, what);
        for (name, v) in set.iter() {
            if name == WORK_GROUP_SIZE_U64 {
                let data = v
                    .as_bytes()
                    .filter(|d| !d.is_empty() && d.len() % 8 == 0)
                    .ok_or_else(|| bad(name, "not an array of 64-bit integers"))?;
                let dims = data
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect::<Vec<u64>>();
                r.reqd_work_group_size = Some(dims);
                continue;
            }
            let vals = match v {
                PropertyValue::U32(x) => vec![*x],
                PropertyValue::Bytes { data, .. } => {
                    decode_u32s(data).ok_or_else(|| bad(name, "not an array of u32"))?
                }
            };
            match name {
                // Most images require no aspect: the set's code then never
                // runs (a new process's first image read, page by page).
                "aspects" | "aspect" if vals.is_empty() => {}
                "aspects" | "aspect" => r.aspects = vals.into_iter().map(Aspect).collect(),
                "reqd_sub_group_size" => r.reqd_sub_group_size = vals.first().copied(),
                "reqd_work_group_size" => {
                    let n = vals.first().copied().unwrap_or(0) as usize;
                    if n == 0 || vals.len() != n + 1 {
                        return Err(bad(name, &format!("expected <count> <dims>, got {vals:?}")));
                    }
                    r.reqd_work_group_size =
                        Some(vals[1..].iter().map(|&d| u64::from(d)).collect());
                }
                "fixed_target" => r.fixed_target = Some(vals),
                _ => {}
            }
        }
        Ok(r)
    }
}

/// DPC++'s name for the required work-group size as 64-bit integers.
pub const WORK_GROUP_SIZE_U64: &str = "reqd_work_group_size_uint64_t";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_dpcpp_forms() {
        let r = Requirements {
            aspects: [Aspect::FP64, Aspect::FP16].into_iter().collect(),
            reqd_work_group_size: Some(vec![64, 2, 1]),
            reqd_sub_group_size: Some(32),
            fixed_target: None,
        };
        let mut sets = PropertySets::default();
        r.write(&mut sets);
        let text = sets.to_text();
        assert_eq!(
            Requirements::read(&PropertySets::parse(&text).unwrap()).unwrap(),
            r
        );
        let set = sets.get(DEVICE_REQUIREMENTS_SET).unwrap();
        // aspects sorted: fp16 (5), fp64 (6).
        assert_eq!(
            set.get("aspects").unwrap().as_bytes().unwrap(),
            encode_u32s(&[5, 6])
        );
        assert_eq!(
            set.get("reqd_sub_group_size"),
            Some(&PropertyValue::U32(32))
        );
        assert!(text.contains("reqd_sub_group_size=1|32\n"), "{text}");
    }

    /// The strings sycl-post-link writes (the issue quotes them from a DPC++
    /// build): no aspects, and `.reqntid 64` as one 64-bit dimension.
    #[test]
    fn dpcpp_strings() {
        let mut sets = PropertySets::default();
        Requirements {
            reqd_work_group_size: Some(vec![64]),
            ..Requirements::default()
        }
        .write(&mut sets);
        assert_eq!(
            sets.to_text(),
            "[SYCL/device requirements]\naspects=2|AAAAAAAAAAA\n\
             reqd_work_group_size_uint64_t=2|ABAAAAAAAAAQAAAAAAAAAA\n"
        );
    }

    #[test]
    fn older_forms_are_read() {
        let mut want = PropertySets::default();
        want.set_mut(DEVICE_REQUIREMENTS_SET).insert(
            "reqd_work_group_size",
            PropertyValue::bytes(encode_u32s(&[1, 64])),
        );
        assert_eq!(
            Requirements::read(&want).unwrap().reqd_work_group_size,
            Some(vec![64])
        );
        let mut sub = PropertySets::default();
        sub.set_mut(DEVICE_REQUIREMENTS_SET).insert(
            "reqd_sub_group_size",
            PropertyValue::bytes(encode_u32s(&[32])),
        );
        assert_eq!(
            Requirements::read(&sub).unwrap().reqd_sub_group_size,
            Some(32)
        );
    }
}
