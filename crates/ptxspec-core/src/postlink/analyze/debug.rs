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
                if let Some(why) = not_a_handler(ctx, k, f, p) {
                    return Err(ctx.err(
                        k,
                        item.span.start,
                        format!(
                            "kernel {} passes its kernel_handler on by reference, so its buffer is taken \
                             to be its last parameter, but {why}: the kernel_handler must be the \
                             kernel's last parameter",
                            m.text(f.name)
                        ),
                    ));
                }
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

/// Why kernel `k`'s last parameter `last` is not its `kernel_handler`, where
/// the code says so: its C++ name gives that parameter another type, or the
/// kernel uses it as a pointer to global memory (a handler is only passed
/// on, never dereferenced by the kernel).
fn not_a_handler(ctx: &Ctx<'_>, k: usize, f: &ptx::Function, last: &ptx::Param) -> Option<String> {
    let m = ctx.m;
    let name = m.text(f.name);
    const HANDLER: &str = "N7ptxspec14kernel_handlerE";
    if name.starts_with("_Z") && name.contains(HANDLER) && !name.ends_with(HANDLER) {
        return Some(format!(
            "its name, {name}, gives its last parameter another type"
        ));
    }
    let param = m.text(last.name);
    let global = super::launchers::param_flows_into(m, k, param, "cvta.to.global");
    global.then(|| {
        format!("the kernel uses its last parameter, {param}, as a pointer to global memory")
    })
}
