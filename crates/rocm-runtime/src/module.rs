//! Loaded code: modules (one compiled `.hip` file) and the kernels in them.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::backend::Backend;
use crate::code_object;
use crate::device::CodeObjectKind;
use crate::driver::{RawFunction, RawModule};
use crate::error::{Error, Result};

struct ModuleInner {
    backend: Arc<Backend>,
    raw: RawModule,
    /// Kernels looked up so far; entries are only ever added. (Holding `Function`s here would
    /// make a reference cycle with the module.)
    functions: RwLock<HashMap<String, Arc<FunctionInfo>>>,
}

/// What the driver told us about one kernel.
#[derive(Debug)]
struct FunctionInfo {
    raw: RawFunction,
    name: String,
    max_threads: u32,
    static_shared: u32,
    param_sizes: Option<Vec<usize>>,
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        // SAFETY: the module was loaded on this backend; the last `Module` and `Function` (each
        // holds this inner value) are gone, so nothing can look up or launch from it any more.
        if let Err(e) = unsafe { self.backend.driver().module_unload(self.raw) } {
            tracing::error!(error = %e, "unloading a module failed");
        }
    }
}

/// A loaded module. Cheap to clone; unloaded when the last clone and function are gone.
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module").field("device", &self.inner.backend.info().ordinal).finish()
    }
}

impl Module {
    /// Loads `image` on the backend's device. An AMD code object is checked first against the
    /// device's full target ID ([`code_object::preflight`]): one without an entry the device can
    /// run is [`Error::CodeObject`], naming the targets it holds and the command that builds one.
    pub(crate) fn load(backend: Arc<Backend>, image: &[u8]) -> Result<Self> {
        let _span = tracing::debug_span!("module_load", bytes = image.len()).entered();
        let info = backend.info();
        if info.code_objects == CodeObjectKind::Amd {
            // The running HIP release decides which code object versions load; unknown: all.
            let release = match backend.runtime_version().and_then(rocm_sys::hip_facts::HipRuntime::decode) {
                Some(rocm_sys::hip_facts::HipRuntime::Amd(version)) => Some(version),
                _ => None,
            };
            let chosen = code_object::preflight(image, &info.arch, release).map_err(|source| {
                Error::CodeObject { ordinal: info.ordinal, device: info.name.clone(), source }
            })?;
            tracing::debug!(device = %info.arch, code_object = %chosen, "code object preflight passed");
        }
        let raw = backend.driver().module_load(image)?;
        Ok(Module { inner: Arc::new(ModuleInner { backend, raw, functions: RwLock::default() }) })
    }

    /// The kernel named `name` (its unmangled `extern "C"` name), looked up once per module.
    pub fn function(&self, name: &str) -> Result<Function> {
        let cached = self.inner.functions.read().get(name).cloned();
        let info = match cached {
            Some(info) => info,
            None => {
                let driver = self.inner.backend.driver();
                let raw = driver.module_function(self.inner.raw, name)?;
                let info = Arc::new(FunctionInfo {
                    raw,
                    name: name.to_string(),
                    max_threads: driver.function_max_threads(raw)?,
                    static_shared: driver.function_static_shared(raw)?,
                    param_sizes: driver.function_param_sizes(raw),
                });
                self.inner.functions.write().entry(name.to_string()).or_insert(info).clone()
            }
        };
        Ok(Function { module: self.inner.clone(), info })
    }
}

/// A kernel, ready to launch with [`crate::Stream::launch`].
#[derive(Clone)]
pub struct Function {
    module: Arc<ModuleInner>,
    info: Arc<FunctionInfo>,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.info.name)
            .field("params", &self.info.param_sizes)
            .finish()
    }
}

impl Function {
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The most threads a block of this kernel may have (its registers can lower the device's limit).
    pub fn max_threads_per_block(&self) -> u32 {
        self.info.max_threads
    }

    /// Bytes of shared memory the kernel declares statically; a launch's dynamic shared memory
    /// comes on top.
    pub fn static_shared_bytes(&self) -> u32 {
        self.info.static_shared
    }

    /// The byte size of each parameter, where the driver reports it (NVIDIA, CUDA 12.4+).
    pub fn param_sizes(&self) -> Option<&[usize]> {
        self.info.param_sizes.as_deref()
    }

    pub(crate) fn raw(&self) -> RawFunction {
        self.info.raw
    }

    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.module.backend
    }
}
