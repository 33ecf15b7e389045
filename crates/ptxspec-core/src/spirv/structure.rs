//! The shape of a SPIR-V binary, checked before rspirv decodes it (rspirv
//! trusts word counts and operand counts, and panics on some malformed
//! modules): the header, each instruction's word count against what is
//! left, and each instruction's words against the fewest its operands need.
//! Every failure names the byte offset.

use rspirv::grammar::{INSTRUCTION_TABLE, OperandKind, OperandQuantifier};

use super::SpirvError;

const MAGIC: u32 = 0x0723_0203;
const HEADER_WORDS: usize = 5;

fn at(word: usize, what: String) -> SpirvError {
    SpirvError::Load(format!("byte {}: {what}", word * 4))
}

/// The fewest words an operand of `kind` takes.
fn min_words(kind: OperandKind) -> usize {
    match kind {
        OperandKind::PairLiteralIntegerIdRef
        | OperandKind::PairIdRefLiteralInteger
        | OperandKind::PairIdRefIdRef => 2,
        _ => 1,
    }
}

/// Checks the header and the instruction stream of `bytes`.
pub fn check(bytes: &[u8]) -> Result<(), SpirvError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(SpirvError::Load(format!(
            "{} bytes is not a whole number of 32-bit words",
            bytes.len()
        )));
    }
    if bytes.len() < HEADER_WORDS * 4 {
        return Err(SpirvError::Load(format!(
            "{} bytes is shorter than the 20-byte header",
            bytes.len()
        )));
    }
    let little = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let swap = match little {
        MAGIC => false,
        m if m.swap_bytes() == MAGIC => true,
        m => {
            return Err(at(
                0,
                format!("magic number {m:#010x}, not SPIR-V's {MAGIC:#010x}"),
            ));
        }
    };
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| {
            let w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if swap { w.swap_bytes() } else { w }
        })
        .collect();
    let bound = words[3];
    if bound == 0 || bound > 1 << 22 {
        return Err(at(
            3,
            format!("id bound {bound} is not between 1 and 4194304"),
        ));
    }
    let mut i = HEADER_WORDS;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let opcode = words[i] & 0xffff;
        if count == 0 {
            return Err(at(i, "an instruction of 0 words".into()));
        }
        if i + count > words.len() {
            return Err(at(
                i,
                format!(
                    "instruction (opcode {opcode}) of {count} words, but {} are left",
                    words.len() - i
                ),
            ));
        }
        let Some(inst) = INSTRUCTION_TABLE.lookup_opcode(opcode) else {
            return Err(at(i, format!("unknown opcode {opcode}")));
        };
        let need: usize = 1 + inst
            .operands
            .iter()
            .filter(|o| o.quantifier == OperandQuantifier::One)
            .map(|o| min_words(o.kind))
            .sum::<usize>();
        if count < need {
            return Err(at(
                i,
                format!(
                    "Op{} has {count} words, fewer than the {need} its operands need",
                    inst.opname
                ),
            ));
        }
        // Ids beyond the bound would index rspirv's tables out of range.
        for (k, o) in inst.operands.iter().enumerate() {
            let w = i + 1 + k;
            if w >= i + count || o.quantifier != OperandQuantifier::One {
                break;
            }
            if matches!(
                o.kind,
                OperandKind::IdResult | OperandKind::IdResultType | OperandKind::IdRef
            ) && words[w] >= bound
            {
                return Err(at(
                    w,
                    format!(
                        "id {} of Op{} is not below the bound {bound}",
                        words[w], inst.opname
                    ),
                ));
            }
        }
        i += count;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_and_oversized_instructions_name_their_offset() {
        // The 52 bytes the issue quotes: a header and a cut instruction.
        let mut m: Vec<u32> = vec![MAGIC, 0x0001_0000, 0, 10, 0];
        m.push((4 << 16) | 17); // OpCapability needs 2 words; says 4
        m.push(1);
        let bytes: Vec<u8> = m.iter().flat_map(|w| w.to_le_bytes()).collect();
        let e = check(&bytes).unwrap_err().to_string();
        assert!(e.contains("byte 20") && e.contains("2 are left"), "{e}");
        assert!(
            check(&bytes[..19])
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
        let mut bad = bytes.clone();
        bad[0] = 0;
        assert!(check(&bad).unwrap_err().to_string().contains("magic"));
    }
}
