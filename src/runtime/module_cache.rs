//! A queue's loaded modules: the cache's key (image and code by address),
//! what an entry keeps alive, and the queue's methods that fill and evict
//! it.

use std::sync::Arc;

use super::{Queue, QueueState, cuda, retire};
use crate::bundle::{BuiltImage, Code, Executable, KernelBundle};
use crate::error::Error;

/// How many modules a queue keeps loaded.
pub(super) const MODULE_CACHE: usize = 64;

/// A module in a queue's (or graph's) cache, with what keeps its key's
/// pointers alive.
#[derive(Clone)]
pub(super) struct LoadedModule {
    pub(super) _code: Arc<dyn std::any::Any + Send + Sync>,
    pub(super) _image: Arc<crate::image::ImageData>,
    pub(super) module: Arc<cuda::Module>,
}

/// (image, code) by address: the `Arc`s a [`LoadedModule`] holds.
pub(super) type ModuleKey = (usize, usize);

/// The code a launch of one kernel of a built image loads: the PTX, or the
/// cubin for the device's architecture (linked now if it is not cached),
/// and its key in a module cache.
pub(super) struct CodeRef {
    pub(super) key: ModuleKey,
    pub(super) keep: Arc<dyn std::any::Any + Send + Sync>,
    pub(super) cubin: Option<Arc<Vec<u8>>>,
}

impl CodeRef {
    pub(super) fn of(built: &BuiltImage, arch: u32, kernel: &str) -> Result<CodeRef, Error> {
        let (identity, keep, cubin): (usize, Arc<dyn std::any::Any + Send + Sync>, _) =
            match built.code() {
                Code::Ptx(p) => (Arc::as_ptr(p) as usize, Arc::clone(p) as _, None),
                Code::Lto(_) => {
                    let cubin = built.cubin_for_kernel(arch, kernel)?.bytes;
                    (
                        Arc::as_ptr(&cubin) as usize,
                        Arc::clone(&cubin) as _,
                        Some(cubin),
                    )
                }
            };
        Ok(CodeRef {
            key: (Arc::as_ptr(built.image_data()) as usize, identity),
            keep,
            cubin,
        })
    }

    /// Loads the code into the current context; `bundle` receives the
    /// JIT's log.
    pub(super) fn load(
        self,
        built: &BuiltImage,
        bundle: Option<&KernelBundle<Executable>>,
    ) -> Result<LoadedModule, Error> {
        let code = match (built.code(), &self.cubin) {
            (_, Some(c)) => cuda::Bytes::Cubin(c),
            (Code::Ptx(p), None) => cuda::Bytes::Ptx(p),
            (Code::Lto(_), None) => {
                return Err(Error::Internal(
                    "an LTO image reached loading without a cubin",
                ));
            }
        };
        let debug = built.debug || bundle.is_some_and(|b| b.debug());
        let (module, log) = cuda::load(
            built.image_data().id(),
            code,
            built.image_data().info().needs_device_runtime,
            debug,
        )
        .inspect_err(|e| {
            if let (Some(b), Error::Build { log, .. }) = (bundle, e) {
                b.log().push(log);
            }
        })?;
        if let Some(b) = bundle {
            b.log().push(&log);
        }
        Ok(LoadedModule {
            _code: self.keep,
            _image: Arc::clone(built.image_data()),
            module: Arc::new(module),
        })
    }
}

impl Queue {
    /// Loads (or finds loaded) the code of `built` in this queue's context
    /// and returns kernel `kernel` of it, with the module and its key in
    /// the cache. `bundle` receives the JIT's log.
    pub(super) fn function(
        &self,
        state: &mut QueueState,
        built: &BuiltImage,
        kernel: &str,
        bundle: Option<&KernelBundle<Executable>>,
    ) -> Result<(cuda::Function, (ModuleKey, LoadedModule)), Error> {
        let code = CodeRef::of(built, self.device.arch(), kernel)?;
        let key = code.key;
        match state.modules.contains_key(&key) {
            // Used again: the last to be let go.
            true => {
                if let Some(at) = state.module_order.iter().position(|k| *k == key) {
                    state.module_order.remove(at);
                    state.module_order.push_back(key);
                }
            }
            false => {
                let loaded = code.load(built, bundle)?;
                self.adopt(state, key, loaded);
            }
        }
        let Some(loaded) = state.modules.get(&key) else {
            return Err(Error::Internal(
                "a module missing from the cache that just held it",
            ));
        };
        Ok((loaded.module.function(kernel)?, (key, loaded.clone())))
    }

    /// Puts a loaded module in the cache, letting the one used least
    /// recently (by a plan made) go past its bound. Plans and graphs that
    /// run its kernels hold it through their functions; what the cache let
    /// go of is dropped once the stream ran its kernels
    /// ([`retire_let_go`](Self::retire_let_go)), never waited for here.
    pub(super) fn adopt(&self, state: &mut QueueState, key: ModuleKey, loaded: LoadedModule) {
        if state.module_order.len() >= MODULE_CACHE
            && let Some(old) = state.module_order.pop_front()
            && let Some(module) = state.modules.remove(&old)
        {
            state.let_go.push(Box::new(module));
        }
        state.modules.insert(key, loaded);
        state.module_order.push_back(key);
    }

    /// Hands what the queue let go of to [`retire`], which drops it once
    /// the kernels submitted to the stream so far ran, once there are
    /// [`LET_GO_BATCH`] things — except while a capture records the stream
    /// (an event recorded there would join the capture): then at the
    /// capture's end.
    pub(super) fn retire_let_go(&self, state: &mut QueueState) {
        if state.let_go.len() >= LET_GO_BATCH {
            self.retire_all_let_go(state);
        }
    }

    /// [`retire_let_go`](Self::retire_let_go) of whatever the queue let go
    /// of, however little: at a capture's end. ([`Queue::wait`] drops what
    /// is left itself, once the stream ran, without an event.)
    pub(super) fn retire_all_let_go(&self, state: &mut QueueState) {
        if !state.let_go.is_empty()
            && state.capture.is_none()
            && let Err(kept) = retire::after_stream(&self.stream, std::mem::take(&mut state.let_go))
        {
            state.let_go = kept;
        }
    }
}

/// How many things a queue lets go of before it hands them to [`retire`]
/// together. Each hand-over records an event on the stream and wakes the
/// retiring thread: paid by every launch that lets a plan go (a launch of a
/// new bundle on a queue that keeps its most plans) where it was handed
/// over at once. What waits meanwhile is bounded by this count and what one
/// launch lets go of (a plan, a module, a replaced function); it goes at
/// the queue's wait.
const LET_GO_BATCH: usize = 16;
