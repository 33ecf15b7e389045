//! Reading the specialization constants of a SPIR-V module.

use std::collections::{HashMap, HashSet};

use rspirv::dr::{self, Instruction, Operand};
use rspirv::spirv::{Decoration, Op};

use super::{SpirvError, descriptors_with_ids};
use crate::layout::{Descriptor, Member, ScalarKind, SpecType, round_up};

/// A specialization constant of a module: a scalar with a `SpecId`, or a
/// composite all of whose leaves are such scalars.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpirvConstant {
    /// From `OpName`, the given names, or `spec_constant_<first SpecId>`.
    pub name: String,
    /// Its type.
    pub ty: SpecType,
    /// Native descriptors: `<SpecId, offset, size>` per leaf.
    pub descriptors: Vec<Descriptor>,
    /// The default value in memory layout.
    pub default: Vec<u8>,
    /// Result id of the constant and of its leaves (depth-first).
    pub(crate) id: u32,
    pub(crate) leaves: Vec<u32>,
}

/// How deep composites may nest.
const MAX_NESTING: u32 = 64;
/// The largest value ptxspec lays out.
const MAX_VALUE_BYTES: u64 = crate::layout::MAX_CONSTANT_BYTES;

/// How many scalar values all constants of one module may hold together.
const MAX_MODULE_VALUES: u64 = 16 * MAX_VALUE_BYTES;

/// The module's instructions that matter here, by result id.
pub(crate) struct Index<'m> {
    pub defs: HashMap<u32, &'m Instruction>,
    pub spec_ids: HashMap<u32, u32>,
    pub names: HashMap<u32, String>,
    pub offsets: HashMap<(u32, u32), u32>,
}

/// The module in `bytes`, parsed by rspirv — the one place SPIR-V is
/// parsed. rspirv's parser panics (`panic!`, `todo!`) on some operand kinds
/// its grammar lists but it does not parse; found by fuzzing. A hostile
/// file must be an error, so a panic in the parser is one (the bytes are
/// all it touches: nothing is left half-changed), and says nothing on
/// standard error of its own.
pub(crate) fn load(bytes: &[u8]) -> Result<dr::Module, SpirvError> {
    super::structure::check(bytes)?;
    let module = match crate::quiet_panic::catch(|| dr::load_bytes(bytes)) {
        Ok(parsed) => parsed.map_err(|e| SpirvError::Load(e.to_string()))?,
        Err(why) => {
            return Err(SpirvError::Load(format!(
                "rspirv could not parse the module ({why})"
            )));
        }
    };
    types_declared_before_use(&module)?;
    Ok(module)
}

/// Every global instruction's result type is a type declared before it,
/// as SPIR-V requires. rspirv decodes a constant's literal by the width of
/// whatever its result type names at that point of the stream, and its
/// module keeps instructions in sections: a module that breaks the rule
/// (a result type that is a function's or a constant's id, or declared
/// later) can decode one way as read and another once written back, so
/// the written module would not read (found by fuzzing).
fn types_declared_before_use(module: &dr::Module) -> Result<(), SpirvError> {
    let mut types = HashSet::new();
    for inst in &module.types_global_values {
        if let Some(ty) = inst.result_type
            && !types.contains(&ty)
        {
            return Err(SpirvError::Module {
                id: inst.result_id.unwrap_or(0),
                what: format!(
                    "its result type %{ty} is not a type declared before it ({:?})",
                    inst.class.opcode
                ),
            });
        }
        if format!("{:?}", inst.class.opcode).starts_with("Type")
            && let Some(id) = inst.result_id
        {
            types.insert(id);
        }
    }
    Ok(())
}

impl<'m> Index<'m> {
    pub fn new(m: &'m dr::Module) -> Index<'m> {
        let mut ix = Index {
            defs: HashMap::new(),
            spec_ids: HashMap::new(),
            names: HashMap::new(),
            offsets: HashMap::new(),
        };
        for inst in &m.types_global_values {
            if let Some(id) = inst.result_id {
                ix.defs.insert(id, inst);
            }
        }
        for inst in &m.annotations {
            match (inst.class.opcode, inst.operands.as_slice()) {
                (
                    Op::Decorate,
                    [
                        Operand::IdRef(t),
                        Operand::Decoration(Decoration::SpecId),
                        Operand::LiteralBit32(n),
                    ],
                ) => {
                    ix.spec_ids.insert(*t, *n);
                }
                (
                    Op::MemberDecorate,
                    [
                        Operand::IdRef(t),
                        Operand::LiteralBit32(i),
                        Operand::Decoration(Decoration::Offset),
                        Operand::LiteralBit32(o),
                    ],
                ) => {
                    ix.offsets.insert((*t, *i), *o);
                }
                _ => {}
            }
        }
        for inst in &m.debug_names {
            if let (Op::Name, [Operand::IdRef(t), Operand::LiteralString(s)]) =
                (inst.class.opcode, inst.operands.as_slice())
            {
                ix.names.insert(*t, s.clone());
            }
        }
        ix
    }

    fn err(id: u32, what: impl Into<String>) -> SpirvError {
        SpirvError::Module {
            id,
            what: what.into(),
        }
    }

    fn def(&self, id: u32) -> Result<&'m Instruction, SpirvError> {
        self.defs
            .get(&id)
            .copied()
            .ok_or_else(|| Self::err(id, "not defined"))
    }

    fn literal(op: Option<&Operand>) -> Option<u64> {
        match op? {
            Operand::LiteralBit32(v) => Some(*v as u64),
            Operand::LiteralBit64(v) => Some(*v),
            _ => None,
        }
    }

    fn id_op(op: Option<&Operand>) -> Option<u32> {
        match op? {
            Operand::IdRef(v) => Some(*v),
            _ => None,
        }
    }

    /// The definition of type `id` met `depth` levels into a composite: a
    /// cycle of types (which only a damaged module has) or absurd nesting is
    /// an error.
    fn type_def(&self, id: u32, depth: u32) -> Result<&'m Instruction, SpirvError> {
        if depth > MAX_NESTING {
            return Err(Self::err(
                id,
                format!("types nest deeper than {MAX_NESTING} levels (a cycle?)"),
            ));
        }
        self.def(id)
    }

    /// The layout type of a SPIR-V type. Its size is bounded first, without
    /// expanding it: types that reuse each other (`S1 = {S0, S0}`, `S2 =
    /// {S1, S1}`, ...) describe a tree exponentially larger than the module.
    pub fn spec_type(&self, id: u32) -> Result<SpecType, SpirvError> {
        let (bytes, nodes) = self.type_extent(id, 0, &mut HashMap::new())?;
        if bytes > MAX_VALUE_BYTES || nodes > MAX_VALUE_BYTES {
            return Err(Self::err(
                id,
                format!(
                    "a type of at least {bytes} bytes in {nodes} parts is not a value ptxspec lays out \
                     (at most {MAX_VALUE_BYTES} bytes)"
                ),
            ));
        }
        self.spec_type_at(id, 0)
    }

    /// At least how many bytes a value of type `id` takes (its members'
    /// sizes, without padding) and how many types its tree holds, both
    /// saturating; each type counted once (`seen`).
    fn type_extent(
        &self,
        id: u32,
        depth: u32,
        seen: &mut HashMap<u32, (u64, u64)>,
    ) -> Result<(u64, u64), SpirvError> {
        if let Some(&e) = seen.get(&id) {
            return Ok(e);
        }
        let t = self.type_def(id, depth)?;
        let ops = &t.operands;
        let extent = match t.class.opcode {
            Op::TypeBool => (1, 1),
            Op::TypeInt | Op::TypeFloat => (Self::literal(ops.first()).unwrap_or(8).div_ceil(8), 1),
            Op::TypeVector | Op::TypeArray => {
                let elem =
                    Self::id_op(ops.first()).ok_or_else(|| Self::err(id, "malformed type"))?;
                let n = if t.class.opcode == Op::TypeVector {
                    Self::literal(ops.get(1)).unwrap_or(0)
                } else {
                    Self::id_op(ops.get(1))
                        .and_then(|l| self.defs.get(&l))
                        .and_then(|l| Self::literal(l.operands.first()))
                        .unwrap_or(0)
                };
                let (b, k) = self.type_extent(elem, depth + 1, seen)?;
                (b.saturating_mul(n), k.saturating_mul(n).saturating_add(1))
            }
            Op::TypeStruct => {
                let mut sum = (0u64, 1u64);
                for o in ops {
                    let m =
                        Self::id_op(Some(o)).ok_or_else(|| Self::err(id, "malformed struct"))?;
                    let (b, k) = self.type_extent(m, depth + 1, seen)?;
                    sum = (sum.0.saturating_add(b), sum.1.saturating_add(k));
                }
                sum
            }
            // Not a type of constants: `spec_type_at` says so.
            _ => (0, 1),
        };
        seen.insert(id, extent);
        Ok(extent)
    }

    /// The type `id`, `depth` levels into a composite: a cycle of types
    /// (which only a damaged module has) or absurd nesting is an error, as
    /// is a value too large to lay out.
    fn spec_type_at(&self, id: u32, depth: u32) -> Result<SpecType, SpirvError> {
        let t = self.type_def(id, depth)?;
        let ops = &t.operands;
        let lit =
            |i: usize| Self::literal(ops.get(i)).ok_or_else(|| Self::err(id, "malformed type"));
        Ok(match t.class.opcode {
            Op::TypeBool => SpecType::Scalar(ScalarKind::Bool),
            Op::TypeInt => SpecType::Scalar(match (lit(0)?, lit(1)?) {
                (8, 0) => ScalarKind::U8,
                (8, _) => ScalarKind::I8,
                (16, 0) => ScalarKind::U16,
                (16, _) => ScalarKind::I16,
                (32, 0) => ScalarKind::U32,
                (32, _) => ScalarKind::I32,
                (64, 0) => ScalarKind::U64,
                (64, _) => ScalarKind::I64,
                (w, _) => return Err(Self::err(id, format!("{w}-bit integers are not supported"))),
            }),
            Op::TypeFloat => SpecType::Scalar(match lit(0)? {
                16 => ScalarKind::F16,
                32 => ScalarKind::F32,
                64 => ScalarKind::F64,
                w => return Err(Self::err(id, format!("{w}-bit floats are not supported"))),
            }),
            Op::TypeVector => {
                let elem =
                    Self::id_op(ops.first()).ok_or_else(|| Self::err(id, "malformed vector"))?;
                let SpecType::Scalar(k) = self.spec_type_at(elem, depth + 1)? else {
                    return Err(Self::err(id, "vector of non-scalars"));
                };
                // OpenCL's (and SYCL's) vectors: a 3-component one takes the
                // room of 4, each is aligned to its size.
                match lit(1)? {
                    n @ (2 | 3 | 4 | 8 | 16) => SpecType::sycl_vec(k, n as u32),
                    n => return Err(Self::err(id, format!("a vector of {n} components"))),
                }
            }
            Op::TypeArray => {
                let elem =
                    Self::id_op(ops.first()).ok_or_else(|| Self::err(id, "malformed array"))?;
                let len_id =
                    Self::id_op(ops.get(1)).ok_or_else(|| Self::err(id, "malformed array"))?;
                let len = self.def(len_id)?;
                if len.class.opcode != Op::Constant {
                    return Err(Self::err(id, "array length is not a constant"));
                }
                let elem = self.spec_type_at(elem, depth + 1)?;
                let n = Self::literal(len.operands.first()).unwrap_or(0);
                if n == 0 || n.saturating_mul(elem.size() as u64) > MAX_VALUE_BYTES {
                    return Err(Self::err(
                        id,
                        format!("an array of {n} elements is not a value ptxspec lays out"),
                    ));
                }
                SpecType::array(elem, n as u32)
            }
            Op::TypeStruct => {
                let members: Vec<SpecType> = ops
                    .iter()
                    .map(|o| {
                        Self::id_op(Some(o))
                            .ok_or_else(|| Self::err(id, "malformed struct"))
                            .and_then(|m| self.spec_type_at(m, depth + 1))
                    })
                    .collect::<Result<_, _>>()?;
                let offsets: Option<Vec<u32>> = (0..members.len() as u32)
                    .map(|i| self.offsets.get(&(id, i)).copied())
                    .collect();
                // Bounded before any layout arithmetic, which is 32-bit: a
                // hostile module's offsets, or many large members, would
                // overflow it (found by fuzzing: an offset near 2^32).
                let past = |end: u64| end > MAX_VALUE_BYTES;
                let packed: u64 = members
                    .iter()
                    .map(|m| u64::from(m.size()) + u64::from(m.align()))
                    .sum();
                let placed = offsets.as_ref().and_then(|offsets| {
                    members
                        .iter()
                        .zip(offsets)
                        .map(|(m, &o)| u64::from(o) + u64::from(m.size()) + u64::from(m.align()))
                        .max()
                });
                if past(packed) || placed.is_some_and(past) {
                    return Err(Self::err(
                        id,
                        "a struct larger than the values ptxspec lays out",
                    ));
                }
                match offsets {
                    None => SpecType::c_struct(members),
                    Some(offsets) => {
                        let align = members.iter().map(SpecType::align).max().unwrap_or(1);
                        let end = members
                            .iter()
                            .zip(&offsets)
                            .map(|(m, o)| o + m.size())
                            .max()
                            .unwrap_or(0);
                        let members = members
                            .into_iter()
                            .zip(offsets)
                            .map(|(ty, offset)| Member { offset, ty })
                            .collect();
                        SpecType::struct_with_layout(members, round_up(end, align), align)
                            .map_err(|e| Self::err(id, e.to_string()))?
                    }
                }
            }
            other => {
                return Err(Self::err(
                    id,
                    format!("{other:?} is not a type of specialization constants"),
                ));
            }
        })
    }

    /// Whether `id` is a scalar specialization constant with a SpecId.
    fn is_spec_scalar(&self, id: u32) -> bool {
        self.defs.get(&id).is_some_and(|i| {
            matches!(
                i.class.opcode,
                Op::SpecConstant | Op::SpecConstantTrue | Op::SpecConstantFalse
            )
        }) && self.spec_ids.contains_key(&id)
    }

    /// The leaves of a composite (depth first), if all are SpecId'd scalars.
    /// Call [`leaf_count`](Self::leaf_count) first: composites that reuse
    /// each other expand exponentially.
    pub fn leaves(&self, id: u32) -> Option<Vec<u32>> {
        self.leaves_at(id, 0)
    }

    /// How many leaves [`leaves`](Self::leaves) would give (saturating),
    /// counting each composite once (`seen`): `None` where it gives none.
    pub fn leaf_count(
        &self,
        id: u32,
        depth: u32,
        seen: &mut HashMap<u32, Option<u64>>,
    ) -> Option<u64> {
        if self.is_spec_scalar(id) {
            return Some(1);
        }
        if let Some(&n) = seen.get(&id) {
            return n;
        }
        let inst = self.defs.get(&id)?;
        if depth > MAX_NESTING || inst.class.opcode != Op::SpecConstantComposite {
            return None;
        }
        let mut n = 0u64;
        let mut all = true;
        for o in &inst.operands {
            match Self::id_op(Some(o)).and_then(|c| self.leaf_count(c, depth + 1, seen)) {
                Some(k) => n = n.saturating_add(k),
                None => all = false,
            }
        }
        let n = all.then_some(n);
        seen.insert(id, n);
        n
    }

    fn leaves_at(&self, id: u32, depth: u32) -> Option<Vec<u32>> {
        if self.is_spec_scalar(id) {
            return Some(vec![id]);
        }
        if depth > MAX_NESTING {
            return None;
        }
        let inst = self.defs.get(&id)?;
        if inst.class.opcode != Op::SpecConstantComposite {
            return None;
        }
        let mut out = Vec::new();
        for o in &inst.operands {
            out.extend(self.leaves_at(Self::id_op(Some(o))?, depth + 1)?);
        }
        Some(out)
    }

    /// The bytes of one scalar leaf's current value.
    pub(crate) fn leaf_bytes(&self, id: u32, kind: ScalarKind) -> Result<Vec<u8>, SpirvError> {
        let inst = self.def(id)?;
        Ok(match inst.class.opcode {
            Op::SpecConstantTrue => vec![1],
            Op::SpecConstantFalse => vec![0],
            _ => {
                let bits = Self::literal(inst.operands.first())
                    .ok_or_else(|| Self::err(id, "no literal value"))?;
                bits.to_le_bytes()[..kind.size() as usize].to_vec()
            }
        })
    }
}

/// The specialization constants of a module, in ascending order of first
/// SpecId. `names` (first SpecId → name) overrides `OpName`.
pub fn read(bytes: &[u8], names: &HashMap<u32, String>) -> Result<Vec<SpirvConstant>, SpirvError> {
    let module = load(bytes)?;
    read_module(&module, names)
}

pub(crate) fn read_module(
    module: &dr::Module,
    names: &HashMap<u32, String>,
) -> Result<Vec<SpirvConstant>, SpirvError> {
    let ix = Index::new(module);
    // Candidates: SpecId'd scalars and composites of them; constituents of
    // such composites are not constants of their own.
    // Leaves are counted before any is listed, and only the constants
    // themselves (not their constituents) are expanded, within a budget.
    let mut counts = HashMap::new();
    let mut candidates: Vec<(u32, u64)> = Vec::new();
    let mut consumed: HashSet<u32> = HashSet::new();
    for inst in &module.types_global_values {
        let Some(id) = inst.result_id else { continue };
        if let Some(n) = ix.leaf_count(id, 0, &mut counts) {
            if n > MAX_VALUE_BYTES {
                return Err(Index::err(
                    id,
                    format!("a composite of {n} values is not a value ptxspec lays out"),
                ));
            }
            if inst.class.opcode == Op::SpecConstantComposite {
                for o in &inst.operands {
                    if let Operand::IdRef(c) = o {
                        consumed.insert(*c);
                    }
                }
            }
            candidates.push((id, n));
        }
    }
    candidates.retain(|(id, _)| !consumed.contains(id));
    let total: u64 = candidates.iter().map(|c| c.1).sum();
    if total > MAX_MODULE_VALUES {
        return Err(SpirvError::Load(format!(
            "the module's specialization constants hold {total} values; ptxspec reads at most {MAX_MODULE_VALUES}"
        )));
    }
    let mut out = Vec::new();
    for (id, _) in candidates {
        let leaves = ix
            .leaves(id)
            .ok_or_else(|| Index::err(id, "a composite whose leaves changed while read"))?;
        let inst = ix.def(id)?;
        let type_id = inst
            .result_type
            .ok_or_else(|| Index::err(id, "constant without a type"))?;
        let ty = ix.spec_type(type_id)?;
        let ids: Vec<u32> = leaves.iter().map(|l| ix.spec_ids[l]).collect();
        let descriptors = descriptors_with_ids(&ty, &ids);
        let mut default = vec![0u8; ty.size() as usize];
        let mut kinds = Vec::new();
        ty.for_each_leaf(0, &mut |off, k| kinds.push((off, k)));
        if kinds.len() != leaves.len() {
            return Err(Index::err(
                id,
                "constituents do not match the type's leaves",
            ));
        }
        for (&leaf, &(off, k)) in leaves.iter().zip(&kinds) {
            let b = ix.leaf_bytes(leaf, k)?;
            default[off as usize..off as usize + b.len()].copy_from_slice(&b);
        }
        let first = ids.iter().copied().min().unwrap_or(0);
        let name = names
            .get(&first)
            .cloned()
            .or_else(|| ix.names.get(&id).cloned())
            .unwrap_or_else(|| format!("spec_constant_{first}"));
        out.push(SpirvConstant {
            name,
            ty,
            descriptors,
            default,
            id,
            leaves,
        });
    }
    out.sort_by_key(SpirvConstant::first_id);
    Ok(out)
}
