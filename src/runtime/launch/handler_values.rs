//! What a handler's values cost a launch: their check against the plan's
//! image, the values that travel with it, and their drop — the last
//! nothing for a handler without values (most launches').

use super::plan::{CHECKED_VALUES, CheckedValue, Running};
use super::{HANDLER_VALUES, Handler};
use crate::error::Error;
use crate::runtime::memory::ValueBytes;

/// A handler that owns no memory (most launches' handlers: no selector,
/// values few and small, if any) drops nothing: its values, their types
/// and its selector are `ManuallyDrop`, dropped here only where it holds
/// memory (inline lists of inline values, and no selector, own nothing).
/// Dropping them at every launch was a tenth of a launch's instructions.
impl Drop for Handler<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.holds {
            self.drop_held();
        }
    }
}

impl Handler<'_> {
    /// The values', their types' and the selector's drop, out of the line
    /// of handlers that own no memory (`holds` says which do).
    #[inline(never)]
    fn drop_held(&mut self) {
        drop(std::mem::take(&mut *self.values));
        drop(std::mem::take(&mut *self.value_types));
        drop(self.selector.take());
    }
}

impl Handler<'_> {
    /// Checks the handler's values against `image` (their types, where it
    /// has the constant), each (ID, type) pair once per plan; remembers the
    /// ID's slot. A pair the plan checked before costs two comparisons of
    /// addresses; a new one is checked out of the launch's line.
    #[inline(always)]
    pub(super) fn check_values(
        &self,
        image: &crate::image::ImageData,
        checked_values: &mut smallvec::SmallVec<[CheckedValue; HANDLER_VALUES]>,
    ) -> Result<(), Error> {
        for ((id, _), (ty, name)) in self.values.iter().zip(self.value_types.iter()) {
            // By address: the same `SpecId` and type name each launch (a
            // copy elsewhere is checked again, which is only slower).
            if !checked_values
                .iter()
                .any(|(i, n, _)| std::ptr::eq(*i, *id) && std::ptr::eq(*n, *name))
            {
                check_new_value(image, checked_values, id, *ty, name)?;
            }
        }
        Ok(())
    }

    /// The handler's values that travel with a launch that runs `running`:
    /// none where a tiered image of handler values has them in its blob
    /// and, once switched, in its code.
    #[inline]
    pub(super) fn travelling_values(&self, running: Running) -> &[(&'static str, ValueBytes)] {
        match running.values_travel {
            true => &self.values,
            false => &[],
        }
    }
}

/// Checks handler value `id` (of Rust type `name`, whose layout `ty`
/// makes) against `image` where it has the constant, and remembers the
/// pair and the ID's slot in `checked` (up to [`CHECKED_VALUES`] pairs).
#[cold]
fn check_new_value(
    image: &crate::image::ImageData,
    checked: &mut smallvec::SmallVec<[CheckedValue; HANDLER_VALUES]>,
    id: &'static str,
    ty: fn() -> ptxspec_core::layout::SpecType,
    name: &'static str,
) -> Result<(), Error> {
    let slot = image.slot(id);
    if slot.is_some() {
        image.check_value_type(id, &ty(), name)?;
    }
    if checked.len() < CHECKED_VALUES {
        checked.push((id, name, slot));
    }
    Ok(())
}
