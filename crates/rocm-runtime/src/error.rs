//! The runtime's error type: every failure says which call failed and why, in the driver's words.

use std::fmt;

/// Which platform a driver error came from.
pub use crate::platform::Platform;

/// A failed driver call: the call, its numeric code and the driver's own name for the code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverError {
    pub platform: Platform,
    /// The entry point that failed, e.g. `cuMemAlloc_v2` or `hipModuleLoadData`.
    pub call: &'static str,
    pub code: u32,
    /// The driver's name for the code (`CUDA_ERROR_OUT_OF_MEMORY`, `hipErrorInvalidValue`).
    pub name: String,
    /// The driver's description of the code.
    pub description: String,
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({}) [code {}]", self.call, self.name, self.description, self.code)
    }
}

impl std::error::Error for DriverError {}

impl DriverError {
    /// Whether this is the driver's answer to a query of unfinished work
    /// (`CUDA_ERROR_NOT_READY`, `hipErrorNotReady`): not a failure.
    pub fn is_not_ready(&self) -> bool {
        let not_ready = match self.platform {
            Platform::Nvidia => rocm_sys::cuda::CUresult::CUDA_ERROR_NOT_READY.0,
            Platform::Amd => rocm_sys::hip::hipError_t::hipErrorNotReady.0,
        };
        self.code == not_ready
    }

    /// Whether a kernel faulted the device's context: an illegal or misaligned address, an
    /// illegal instruction, a trap or assertion, a watchdog timeout, an uncorrectable ECC error.
    /// The context is unusable afterwards (every later call of the process fails the same way;
    /// on AMD the device may be reset). HIP gives these the CUDA driver's numbers.
    pub fn is_device_fault(&self) -> bool {
        // ECC_UNCORRECTABLE 214, ILLEGAL_ADDRESS 700, LAUNCH_TIMEOUT 702, ASSERT 710,
        // HARDWARE_STACK_ERROR 714, ILLEGAL_INSTRUCTION 715, MISALIGNED_ADDRESS 716,
        // INVALID_ADDRESS_SPACE 717, INVALID_PC 718, LAUNCH_FAILED 719.
        matches!(self.code, 214 | 700 | 702 | 710 | 714..=719)
    }
}

/// The memory guard refused an allocation: it would take the ledger past its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    pub requested: u64,
    pub budget: u64,
    pub in_use: u64,
    pub free: u64,
    pub total: u64,
    /// The largest live allocations then (at most [`OverBudget::SITES`]), largest first: where
    /// the budget went.
    pub largest: Vec<crate::LiveAllocation>,
}

impl OverBudget {
    /// How many of the largest live allocations a refusal names.
    pub const SITES: usize = 3;
}

impl std::error::Error for OverBudget {}

impl fmt::Display for OverBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "allocation of {} refused by the memory guard: budget {}, in use {}, device free {}, device total {}",
            Bytes(self.requested),
            Bytes(self.budget),
            Bytes(self.in_use),
            Bytes(self.free),
            Bytes(self.total)
        )?;
        for (i, live) in self.largest.iter().enumerate() {
            write!(f, "{} {live}", if i == 0 { "; largest live:" } else { ";" })?;
        }
        Ok(())
    }
}

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Load(#[from] rocm_sys::LoadError),
    #[error("{0}")]
    Driver(DriverError),
    #[error("{0}")]
    OverBudget(OverBudget),
    #[error("no GPU: {0}")]
    NoDevice(String),
    #[error("device {ordinal} does not exist ({count} device(s) found)")]
    DeviceOutOfRange { ordinal: usize, count: usize },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("launch of `{kernel}` has {got:?} argument byte sizes, the kernel takes {expected:?}")]
    LaunchArguments { kernel: String, expected: Vec<usize>, got: Vec<usize> },
    #[error(
        "a buffer of stream {buffer_stream} was used on stream {stream}; use a buffer on the stream it belongs to"
    )]
    StreamMismatch { stream: u64, buffer_stream: u64 },
    /// An AMD code object with no entry the device can run, found before it was handed to the
    /// driver (which would fail later with `hipErrorNoBinaryForGpu`).
    #[error("device {ordinal} ({device}): {source}")]
    CodeObject { ordinal: usize, device: String, source: crate::code_object::CodeObjectError },
    #[error("`{name}` not found in module: {source}")]
    FunctionNotFound { name: String, source: DriverError },
    /// An operation on a stream that is recording a graph ([`crate::Stream::capture`]) which
    /// cannot be recorded, or would make the graph unsound, or came from another thread.
    #[error("stream {stream} is recording a graph, so {operation} is refused: {reason}")]
    CaptureRefused { stream: u64, operation: &'static str, reason: &'static str },
    /// The loaded HIP library cannot capture graphs.
    #[error("graphs are unsupported by this HIP library: {0}")]
    GraphsUnsupported(String),
    /// `ROCMFORGE_VENDOR_BLAS=off` ([`crate::VENDOR_BLAS_ENV`]): products take the portable path.
    #[error("the vendor BLAS is turned off ({}=off)", crate::VENDOR_BLAS_ENV)]
    VendorBlasOff,
}

impl Error {
    /// The driver error inside, if this is one.
    pub fn driver(&self) -> Option<&DriverError> {
        match self {
            Error::Driver(e) | Error::FunctionNotFound { source: e, .. } => Some(e),
            _ => None,
        }
    }
    /// Whether this is a [`DriverError::is_device_fault`].
    pub fn is_device_fault(&self) -> bool {
        self.driver().is_some_and(DriverError::is_device_fault)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A byte count printed with its binary-prefixed size, e.g. `1073741824 B (1.00 GiB)`.
#[derive(Debug, Clone, Copy)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit < UNITS.len() - 1 {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{} B ({value:.2} {})", self.0, UNITS[unit])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_budget_names_every_figure() {
        let e = OverBudget {
            requested: 3 << 30,
            budget: 2 << 30,
            in_use: 1024,
            free: 5 << 30,
            total: 8 << 30,
            largest: Vec::new(),
        };
        let text = Error::OverBudget(e).to_string();
        for needle in
            ["3.00 GiB", "budget 2147483648 B", "in use 1024 B", "free 5368709120", "total 8589934592"]
        {
            assert!(text.contains(needle), "`{needle}` missing from: {text}");
        }
    }

    #[test]
    fn device_faults_are_the_sticky_codes_on_both_platforms() {
        use rocm_sys::cuda::CUresult as Cu;
        use rocm_sys::hip::hipError_t as Hip;
        let error = |platform, code| DriverError {
            platform,
            call: "x",
            code,
            name: String::new(),
            description: String::new(),
        };
        for code in [
            Cu::CUDA_ERROR_ILLEGAL_ADDRESS.0,
            Cu::CUDA_ERROR_LAUNCH_FAILED.0,
            Cu::CUDA_ERROR_LAUNCH_TIMEOUT.0,
        ] {
            assert!(error(Platform::Nvidia, code).is_device_fault(), "{code}");
        }
        for code in
            [Hip::hipErrorIllegalAddress.0, Hip::hipErrorLaunchFailure.0, Hip::hipErrorECCNotCorrectable.0]
        {
            assert!(error(Platform::Amd, code as _).is_device_fault(), "{code}");
        }
        assert!(!error(Platform::Nvidia, Cu::CUDA_ERROR_OUT_OF_MEMORY.0).is_device_fault());
        assert!(!error(Platform::Amd, Hip::hipErrorNotReady.0 as _).is_device_fault());
    }
}
