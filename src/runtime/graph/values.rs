//! A graph's values: its nodes listed, constants set and read per node or
//! everywhere, the builds and loads one update shares between nodes, and
//! the code no node runs any more let go.

use super::*;

impl Graph<'_> {
    /// Unloads code no node runs any more, past [`SPARE_MODULES`], once
    /// the replays that may run it have run ([`retire`](super::retire):
    /// nothing waits for them here).
    pub(super) fn retire_spare_modules(&mut self) -> Result<(), Error> {
        let spare: Vec<ModuleKey> = self
            .modules
            .iter()
            .filter(|(_, m)| Arc::strong_count(&m.module) == 1)
            .map(|(k, _)| *k)
            .collect();
        if spare.len() <= SPARE_MODULES {
            return Ok(());
        }
        let mut retired: Vec<Box<dyn Send>> = std::mem::take(&mut self.deferred);
        retired.extend(
            spare
                .into_iter()
                .filter_map(|k| self.modules.remove(&k))
                .map(|m| Box::new(m) as Box<dyn Send>),
        );
        // Never recorded into a capture: kept, and handed over at the next
        // update outside one (or dropped with the graph, after `last_use`).
        if let Err(kept) = super::super::retire::after_stream(&self.stream, retired) {
            self.deferred = kept;
        }
        Ok(())
    }

    /// The kernel nodes ptxspec launched, in capture order (the indices
    /// [`set_specialization_constant`](Self::set_specialization_constant)
    /// takes). Other nodes of the graph (the program's own work) are not
    /// listed.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = GraphNode<'_>> {
        self.nodes.iter().map(|node| GraphNode { node })
    }

    /// Sets the value of `id` for kernel node `node` (an index of
    /// [`nodes`](Self::nodes)), from the next replay on. A constant the
    /// node's image does not have, or of another type, is
    /// `spec_const_error`.
    pub fn set_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        node: usize,
        id: &SpecId<T>,
        value: T,
    ) -> Result<(), Error> {
        let count = self.nodes.len();
        let n = self.nodes.get(node).ok_or_else(|| {
            Error::invalid(
                crate::error::Misuse::OutOfRange,
                format!("the graph has {count} ptxspec kernel nodes; there is no node {node}"),
            )
        })?;
        let slot = n.built.image_data().constant_slot(id.symbolic_id())?;
        self.write_value(node, id, value, slot)
    }

    /// Writes `value` of `id` at `slot` (`id`'s in the image of node `i`)
    /// in the node's values, checked: the image must take values, and the
    /// type suit the constant (each pair checked once per node).
    fn write_value<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        i: usize,
        id: &SpecId<T>,
        value: T,
        slot: crate::image::Slot,
    ) -> Result<(), Error> {
        let n = &mut self.nodes[i];
        let image = n.built.image_data();
        let symbolic = id.symbolic_id();
        let ty = std::any::TypeId::of::<T>();
        if !n
            .checked
            .is_some_and(|(s, t)| std::ptr::eq(s, symbolic) && t == ty)
        {
            image.check_settable(symbolic)?;
            image.check_value_type(symbolic, &T::spec_type(), std::any::type_name::<T>())?;
            n.checked = Some((symbolic, ty));
        }
        slot.write(&mut n.blob, symbolic, bytemuck::bytes_of(&value))?;
        if !n.changed {
            n.changed = true;
            self.changed += 1;
        }
        Ok(())
    }

    /// Sets the value of `id` on every kernel node whose image has the
    /// constant; returns how many nodes that is.
    pub fn set_specialization_constant_everywhere<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        id: &SpecId<T>,
        value: T,
    ) -> Result<usize, Error> {
        let mut count = 0;
        // The constant's slot looked up once per image (by address): a
        // graph's nodes mostly share few images.
        let mut last: Option<(usize, Option<crate::image::Slot>)> = None;
        for i in 0..self.nodes.len() {
            let image = self.nodes[i].built.image_data();
            let slot = match last {
                Some((at, slot)) if at == Arc::as_ptr(image) as usize => slot,
                _ => {
                    let slot = image.slot(id.symbolic_id());
                    last = Some((Arc::as_ptr(image) as usize, slot));
                    slot
                }
            };
            if let Some(slot) = slot {
                self.write_value(i, id, value, slot)?;
                count += 1;
            }
        }
        Ok(count)
    }

    /// The value of `id` for kernel node `node`: the one set last, else the
    /// captured one.
    pub fn get_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &self,
        node: usize,
        id: &SpecId<T>,
    ) -> Result<T, Error> {
        let n = self.nodes.get(node).ok_or_else(|| {
            Error::invalid(
                crate::error::Misuse::OutOfRange,
                format!(
                    "the graph has {} ptxspec kernel nodes; there is no node {node}",
                    self.nodes.len()
                ),
            )
        })?;
        let image = n.built.image_data();
        let slot = image.constant_slot(id.symbolic_id())?;
        // The type as the bundle's get checks it: another type of the
        // same size would read the bytes reinterpreted.
        image.check_value_type(
            id.symbolic_id(),
            &T::spec_type(),
            std::any::type_name::<T>(),
        )?;
        let at = slot.offset as usize..(slot.offset + slot.size) as usize;
        Ok(bytemuck::pod_read_unaligned(&n.blob[at]))
    }
}

/// The images one [`Graph::update`] built for new values, by the image
/// they rebuilt (held, so that its address is not reused meanwhile) and
/// the values.
#[derive(Default)]
pub(super) struct Rebuilt(Vec<(Arc<BuiltImage>, Vec<u8>, Arc<BuiltImage>)>);

impl Rebuilt {
    pub(super) fn get_or_build(
        &mut self,
        from: &Arc<BuiltImage>,
        blob: &[u8],
    ) -> Result<Arc<BuiltImage>, Error> {
        if let Some((_, _, b)) = self
            .0
            .iter()
            .find(|(f, v, _)| Arc::ptr_eq(f, from) && v == blob)
        {
            return Ok(Arc::clone(b));
        }
        let built = from.with_blob(blob.to_vec())?;
        self.0
            .push((Arc::clone(from), blob.to_vec(), Arc::clone(&built)));
        Ok(built)
    }
}

/// The functions one [`Graph::update`] found for nodes, by the image whose
/// code they are (held) and the kernel: nodes that swap to the same code
/// look it up once.
#[derive(Default)]
pub(super) struct Loaded(Vec<LoadedFunction>);

pub(super) struct LoadedFunction {
    running: Arc<BuiltImage>,
    kernel: Box<str>,
    function: Function,
}

impl Loaded {
    /// Notes `function`, loaded for `kernel` of `running`, for the other
    /// nodes of this update.
    pub(super) fn add(&mut self, running: &Arc<BuiltImage>, kernel: &str, function: &Function) {
        self.0.push(LoadedFunction {
            running: Arc::clone(running),
            kernel: kernel.into(),
            function: function.clone(),
        });
    }

    pub(super) fn find(&self, running: &Arc<BuiltImage>, kernel: &str) -> Option<Function> {
        self.0
            .iter()
            .find(|l| Arc::ptr_eq(&l.running, running) && *l.kernel == *kernel)
            .map(|l| l.function.clone())
    }
}
