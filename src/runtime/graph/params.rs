//! A graph's nodes' launch parameters — set in the executable graph as
//! values and code change, and in the graph it was made of before that is
//! instantiated again — and that instantiation: an executable graph whose
//! nodes were given other code replays slower than one instantiated with
//! it, so a graph whose nodes settled on other code (a tier, a variant kept)
//! is instantiated again once no node waits any more.

use super::*;

/// Where a node's parameters are set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The executable graph, which the next replay runs.
    Exec,
    /// The graph it was made of, which an instantiation copies.
    Graph,
}

impl Graph<'_> {
    /// Sets node `i`'s parameters in the executable graph from its values,
    /// arguments and function (`always`: also where only a global buffer's
    /// contents changed, which needs no new parameters). The graph it was
    /// made of gets them before it is instantiated again.
    pub(super) fn set_params(&mut self, i: usize, always: bool) -> Result<(), Error> {
        self.params_into(i, always, Target::Exec)?;
        self.nodes[i].graph_stale = true;
        Ok(())
    }

    /// Instantiates the graph again where a node's code changed and no
    /// node waits any more (no tier swap, adaptive node or trial under
    /// way): one instantiation for a graph whose nodes settle over several
    /// replays. Code that follows new values is set in place only: a
    /// program that changes values on every replay would pay an
    /// instantiation each.
    pub(super) fn instantiate_once_settled(&mut self) -> Result<(), Error> {
        let settled = self.swaps == 0 && self.adapting == 0 && self.trial.is_none();
        if !self.code_changed || !settled {
            return Ok(());
        }
        self.instantiate_with_params()
    }

    /// Instantiates the graph (again, or first where its capture left it
    /// uninstantiated) with every node's parameters as they are now.
    pub(super) fn instantiate_with_params(&mut self) -> Result<(), Error> {
        for i in 0..self.nodes.len() {
            if self.nodes[i].graph_stale {
                self.params_into(i, true, Target::Graph)?;
                self.nodes[i].graph_stale = false;
            }
        }
        let stream = Arc::clone(&self.stream);
        self.exec.instantiate_again(|| Ok(stream.synchronize()?))?;
        self.code_changed = false;
        Ok(())
    }

    fn params_into(&mut self, i: usize, always: bool, into: Target) -> Result<(), Error> {
        let Graph { nodes, arena, .. } = self;
        let node = &mut nodes[i];
        let running = &node.running;
        let image = running.image_data();
        let signature = &image.kernels()[node.signature];
        let delivery = running.delivery();
        let args = node.args.iter().map(|a| match a {
            NodeArg::Value(v) => KernelArg::Value(v),
            NodeArg::Address(a) => KernelArg::Address(a),
            NodeArg::Vouched(v) => KernelArg::Vouched(v),
        });
        // The node's layout, made again only where its code's delivery
        // changed (emulated ↔ specialized).
        if node
            .layout
            .as_ref()
            .is_none_or(|(made_for, _)| *made_for != delivery)
        {
            node.layout = Some((
                delivery,
                launch_layout(signature, delivery, args.len(), node.addresses)?,
            ));
        }
        let Some((_, layout)) = node.layout.as_mut() else {
            return Err(Error::Internal(
                "a graph node's layout missing after it was made",
            ));
        };
        let buffer = &mut node.buffer;
        layout.fill(image, &node.blob, &[] as &[(&str, &[u8])], |contents| {
            let at = match *buffer {
                Some(at) if at.len == contents.len() => {
                    arena.write(at, contents);
                    at
                }
                _ => arena.place(contents)?,
            };
            *buffer = Some(at);
            Ok::<u64, Error>(arena.address(at))
        })?;
        if !always && delivery == Delivery::GlobalBuffer {
            return Ok(());
        }
        let mut params = layout.params(args)?;
        let dims = node.cfg.dims();
        match into {
            Target::Exec => cuda::set_kernel_node_params(
                &mut self.exec,
                node.handle,
                &node.function,
                dims,
                &mut params,
            ),
            Target::Graph => cuda::set_graph_kernel_node_params(
                &self.exec,
                node.handle,
                &node.function,
                dims,
                &mut params,
            ),
        }
    }
}
