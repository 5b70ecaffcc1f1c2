//! Errors of the typed launchers.

use rocm_runtime::CodeObjectKind;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(transparent)]
    Runtime(#[from] rocm_runtime::Error),
    /// No code object of the kind the device loads was built for this module when this crate
    /// was compiled.
    #[error(
        "kernel module `{module}` has no {kind} code object: run `cargo xtask kernels --platform {kind}` and rebuild"
    )]
    NotBuilt { module: &'static str, kind: CodeObjectKind },
    /// Arguments that do not fit together (lengths, shapes).
    #[error("{kernel}: {message}")]
    Shape { kernel: &'static str, message: String },
}

pub type Result<T, E = KernelError> = std::result::Result<T, E>;

/// Fails with [`KernelError::Shape`] unless `condition` holds.
pub(crate) fn ensure(condition: bool, kernel: &'static str, message: impl FnOnce() -> String) -> Result<()> {
    if condition { Ok(()) } else { Err(KernelError::Shape { kernel, message: message() }) }
}

/// The message of `result`'s [`KernelError::Shape`] from `kernel`; panics on anything else
/// (tests of the launchers' refusals).
#[cfg(test)]
pub(crate) fn shape_message<T: std::fmt::Debug>(result: Result<T>, kernel: &str) -> String {
    match result {
        Err(KernelError::Shape { kernel: k, message }) if k == kernel => message,
        other => panic!("expected a shape error from {kernel}, got {other:?}"),
    }
}
