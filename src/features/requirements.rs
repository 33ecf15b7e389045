//! What a device image needs of a device: the `SYCL/device requirements`
//! property set.

use std::collections::BTreeSet;

use super::Aspect;
use crate::props::{
    DEVICE_REQUIREMENTS_SET, PropertySets, PropertyValue, decode_u32s, encode_u32s,
};

/// Requirements of a kernel or an image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirements {
    /// Aspects the device must have (declared ∪ used).
    pub aspects: BTreeSet<Aspect>,
    /// `.reqntid`: the work-group size launches must use.
    pub reqd_work_group_size: Option<Vec<u32>>,
    /// The sub-group size the code relies on (32 on NVIDIA).
    pub reqd_sub_group_size: Option<u32>,
    /// Targets the code is restricted to, as aspects; `None` when unrestricted.
    pub fixed_target: Option<Vec<u32>>,
}

impl Requirements {
    pub fn is_empty(&self) -> bool {
        self == &Requirements::default()
    }

    /// Writes the set (nothing when there are no requirements). Every
    /// property is a byte array of little-endian u32s, as seed 003 says;
    /// `reqd_work_group_size` is `<dim count> <dim0> ...`.
    pub fn write(&self, sets: &mut PropertySets) {
        if self.is_empty() {
            return;
        }
        let set = sets.set_mut(DEVICE_REQUIREMENTS_SET);
        if !self.aspects.is_empty() {
            let a: Vec<u32> = self.aspects.iter().map(|a| a.0).collect();
            set.insert("aspects", PropertyValue::bytes(encode_u32s(&a)));
        }
        if let Some(s) = self.reqd_sub_group_size {
            set.insert(
                "reqd_sub_group_size",
                PropertyValue::bytes(encode_u32s(&[s])),
            );
        }
        if let Some(w) = &self.reqd_work_group_size {
            let mut v = vec![w.len() as u32];
            v.extend(w);
            set.insert(
                "reqd_work_group_size",
                PropertyValue::bytes(encode_u32s(&v)),
            );
        }
        if let Some(t) = &self.fixed_target {
            set.insert("fixed_target", PropertyValue::bytes(encode_u32s(t)));
        }
    }

    /// Reads the set; `Ok(default)` when absent. Accepts u32 properties too.
    pub fn read(sets: &PropertySets) -> Result<Requirements, String> {
        let mut r = Requirements::default();
        let Some(set) = sets.get(DEVICE_REQUIREMENTS_SET) else {
            return Ok(r);
        };
        for (name, v) in set.iter() {
            let vals = match v {
                PropertyValue::U32(x) => vec![*x],
                PropertyValue::Bytes { data, .. } => decode_u32s(data).ok_or_else(|| {
                    format!("[{DEVICE_REQUIREMENTS_SET}] {name}: not an array of u32")
                })?,
            };
            match name {
                "aspects" | "aspect" => r.aspects = vals.into_iter().map(Aspect).collect(),
                "reqd_sub_group_size" => r.reqd_sub_group_size = vals.first().copied(),
                "reqd_work_group_size" => {
                    let n = vals.first().copied().unwrap_or(0) as usize;
                    if n == 0 || vals.len() != n + 1 {
                        return Err(format!(
                            "[{DEVICE_REQUIREMENTS_SET}] reqd_work_group_size: expected <count> <dims>, got {vals:?}"
                        ));
                    }
                    r.reqd_work_group_size = Some(vals[1..].to_vec());
                }
                "fixed_target" => r.fixed_target = Some(vals),
                _ => {}
            }
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
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
            set.get("reqd_work_group_size").unwrap().as_bytes().unwrap(),
            encode_u32s(&[3, 64, 2, 1])
        );
    }
}
