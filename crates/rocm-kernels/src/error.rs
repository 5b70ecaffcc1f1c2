//! Errors of the typed launchers.

use rocm_runtime::Platform;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(transparent)]
    Runtime(#[from] rocm_runtime::Error),
    /// The kernel's code object was not built for this platform when this crate was compiled.
    #[error(
        "kernel module `{module}` is not built for {platform}: run `cargo xtask kernels --platform {platform}` and rebuild"
    )]
    NotBuilt { module: &'static str, platform: Platform },
    /// Arguments that do not fit together (lengths, shapes).
    #[error("{kernel}: {message}")]
    Shape { kernel: &'static str, message: String },
}

pub type Result<T, E = KernelError> = std::result::Result<T, E>;

/// Fails with [`KernelError::Shape`] unless `condition` holds.
pub(crate) fn ensure(condition: bool, kernel: &'static str, message: impl FnOnce() -> String) -> Result<()> {
    if condition { Ok(()) } else { Err(KernelError::Shape { kernel, message: message() }) }
}
