//! Debug builds (`-G`) keep the `kernel_handler` on the stack and read its
//! pointer through memory, which tracing cannot follow: such a kernel has the
//! buffer where the ABI puts it, in its last parameter.

use super::*;

/// Marks the last parameter as the buffer of every kernel that reaches a
/// getter reading the buffer through memory and has no traced buffer
/// parameter; an error where that parameter is not an 8-byte handler.
pub(super) fn buffer_in_last_parameter(
    ctx: &Ctx<'_>,
    callees: &[Vec<usize>],
    buffer_params: &mut HashMap<usize, usize>,
) -> Result<(), PostLinkError> {
    let m = ctx.m;
    for (k, item) in m.items.iter().enumerate() {
        let ItemKind::Function(f) = &item.kind else {
            continue;
        };
        if !f.is_kernel || f.body.is_none() || buffer_params.contains_key(&k) {
            continue;
        }
        let reaches_opaque = reachable(callees, k).any(|g| ctx.opaque_buffer.borrow().contains(&g));
        if !reaches_opaque {
            continue;
        }
        match f.params.last() {
            Some(p) if p.size() == 8 => {
                buffer_params.insert(k, f.params.len() - 1);
            }
            _ => {
                return Err(ctx.err(
                    k,
                    item.span.start,
                    format!(
                        "kernel {} reaches a getter but its last parameter is not an 8-byte kernel_handler",
                        m.text(f.name)
                    ),
                ));
            }
        }
    }
    Ok(())
}
