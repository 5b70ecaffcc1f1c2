//! Which vendor stack is underneath: chosen by `ROCMFORGE_PLATFORM=auto|amd|nvidia`.

use std::fmt;

use crate::error::{Error, Result};

/// The env var that picks the platform.
pub const PLATFORM_ENV: &str = "ROCMFORGE_PLATFORM";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Platform {
    /// AMD GPUs through the HIP runtime (`libamdhip64`), kernels as hipcc code objects.
    Amd,
    /// NVIDIA GPUs through the CUDA driver API (`libcuda`), kernels as nvcc fatbins.
    Nvidia,
}

impl Platform {
    /// Every platform, AMD (the primary one) first.
    pub const ALL: [Platform; 2] = [Platform::Amd, Platform::Nvidia];

    /// Lower-case name, also the kernel folder name (`amd`, `nvidia`).
    pub fn name(self) -> &'static str {
        match self {
            Platform::Amd => "amd",
            Platform::Nvidia => "nvidia",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// What the user asked for through [`PLATFORM_ENV`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlatformChoice {
    /// Try AMD first (the primary platform), then NVIDIA.
    Auto,
    Only(Platform),
}

impl PlatformChoice {
    pub fn parse(text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(PlatformChoice::Auto),
            "amd" | "hip" | "rocm" => Ok(PlatformChoice::Only(Platform::Amd)),
            "nvidia" | "cuda" => Ok(PlatformChoice::Only(Platform::Nvidia)),
            other => {
                Err(Error::InvalidArgument(format!("{PLATFORM_ENV}={other}: expected auto, amd or nvidia")))
            }
        }
    }

    pub fn from_env() -> Result<Self> {
        Self::parse(&std::env::var(PLATFORM_ENV).unwrap_or_default())
    }

    /// The platforms to try, in order.
    pub fn candidates(self) -> &'static [Platform] {
        match self {
            PlatformChoice::Auto => &[Platform::Amd, Platform::Nvidia],
            PlatformChoice::Only(Platform::Amd) => &[Platform::Amd],
            PlatformChoice::Only(Platform::Nvidia) => &[Platform::Nvidia],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse() {
        assert_eq!(PlatformChoice::parse("").unwrap(), PlatformChoice::Auto);
        assert_eq!(PlatformChoice::parse("AMD").unwrap(), PlatformChoice::Only(Platform::Amd));
        assert_eq!(PlatformChoice::parse("nvidia").unwrap(), PlatformChoice::Only(Platform::Nvidia));
        let err = PlatformChoice::parse("intel").unwrap_err().to_string();
        assert!(err.contains("ROCMFORGE_PLATFORM=intel"), "{err}");
    }
}
