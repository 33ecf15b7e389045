//! A small interpreter of integer PTX for the optimizer's tests: it runs
//! a kernel before and after a pass, so that a test compares what both
//! compute, not the text.

use std::collections::HashMap;

use super::StmtKind;
use super::instr::{Operand, integer_immediate};
use super::known::Fold;
use super::loops::compare;

/// Runs the one kernel of `ptx` (integer code and branches only, the
/// model's folds, `setp` — with a boolean operation too — `bra`,
/// `ld.param`, barriers as one thread meets them), its special registers and
/// parameters from `inputs`, for at most `steps` statements; returns every
/// value written to a register named in `watch`, in order.
pub(crate) fn run(
    ptx: &str,
    inputs: &HashMap<&str, u64>,
    watch: &[&str],
    steps: usize,
) -> Vec<(String, u64)> {
    let (m, body) = crate::ptx::first_body(ptx);
    let labels: HashMap<&str, usize> = body
        .stmts
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == StmtKind::Label)
        .map(|(j, s)| (super::loops::label_name(&m, s), j))
        .collect();
    let mut regs: HashMap<String, u64> = HashMap::new();
    let mut trace = Vec::new();
    let mut pc = 0;
    for _ in 0..steps {
        let Some(s) = body.stmts.get(pc) else { break };
        pc += 1;
        let Ok(Some(i)) = m.instr(s) else { continue };
        let read = |o: &Operand<'_>, regs: &HashMap<String, u64>| -> u64 {
            match o {
                Operand::Imm(t) => integer_immediate(t).expect("an integer"),
                Operand::Reg(r) => regs
                    .get(*r)
                    .or_else(|| inputs.get(*r))
                    .copied()
                    .unwrap_or_else(|| panic!("{r} read before written")),
                other => panic!("operand {other:?}"),
            }
        };
        if let Some((p, negated)) = i.guard
            && (regs[p] != 0) == negated
        {
            continue;
        }
        let (dst, value) = match i.opcode {
            "ret" => break,
            "bra" => {
                let Some(Operand::Symbol(l)) = i.operands.first() else {
                    panic!("a branch without a label")
                };
                pc = labels[l];
                continue;
            }
            // A parameter's value from `inputs`; other loads read 0.
            "ld" => {
                let (Some(Operand::Reg(d)), Some(Operand::Address { base: Some(p), .. })) =
                    (i.operands.first(), i.operands.get(1))
                else {
                    panic!("a load")
                };
                (*d, if i.has("param") { inputs[p] } else { 0 })
            }
            "st" => continue,
            // One thread: a barrier waits for nobody, and a reduction over
            // the block is its own value.
            "bar" | "barrier" if i.modifiers.first() == Some(&"sync") => continue,
            "bar" | "barrier" if i.modifiers.first() == Some(&"red") => {
                let (Some(Operand::Reg(d)), Some(c)) = (i.operands.first(), i.operands.last())
                else {
                    panic!("bar.red")
                };
                (*d, read(c, &regs))
            }
            "setp" => {
                let Some(Operand::Reg(d)) = i.operands.first() else {
                    panic!("setp")
                };
                let (a, b) = (read(&i.operands[1], &regs), read(&i.operands[2], &regs));
                let holds =
                    compare(i.modifiers[0], i.types[0], a, b).expect("an integer comparison");
                // `setp.cmp.bool p, a, b, c`: the comparison combined with c.
                let holds = match (i.modifiers.get(1), i.operands.get(3)) {
                    (None, None) => holds,
                    (Some(op), Some(c)) => {
                        let c = read(c, &regs) != 0;
                        match *op {
                            "and" => holds && c,
                            "or" => holds || c,
                            "xor" => holds != c,
                            other => panic!("setp's {other}"),
                        }
                    }
                    _ => panic!("setp"),
                };
                (*d, u64::from(holds))
            }
            _ => {
                let fold = Fold::of(&i).unwrap_or_else(|| panic!("{}", m.text(s.span)));
                let Some(Operand::Reg(d)) = i.operands.first() else {
                    panic!("no destination")
                };
                let sources: Vec<u64> = i.operands[1..].iter().map(|o| read(o, &regs)).collect();
                (*d, fold.apply(&sources).expect("defined"))
            }
        };
        if watch.contains(&dst) {
            trace.push((dst.to_string(), value));
        }
        regs.insert(dst.to_string(), value);
    }
    trace
}
