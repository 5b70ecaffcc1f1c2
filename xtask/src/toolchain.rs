//! Finding the GPU toolchains where people keep them: `PATH`, `ROCM_PATH`, `CUDA_HOME` /
//! `CUDA_PATH`, the usual install prefixes, NVIDIA's pip wheels (`nvidia-cuda-nvcc`), and the
//! forky chroot of `cargo xtask amd-toolchain`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::amd_toolchain::{self, Chroot};

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
}

pub(crate) fn on_path(exe: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(exe)).find(|p| p.is_file())
}

/// ROCm install prefixes in the order they are tried.
fn rocm_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = env_dir("ROCM_PATH").into_iter().collect();
    roots.push(PathBuf::from("/opt/rocm"));
    roots.push(PathBuf::from("/usr"));
    roots
}

/// CUDA toolkit roots: env vars, `/usr/local/cuda`, then pip wheels (`nvidia/cu13`, `nvidia/cuda_nvcc`).
fn cuda_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(|v| env_dir(v)).collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    for site in python_site_dirs() {
        for sub in ["nvidia/cu13", "nvidia/cu12", "nvidia/cuda_nvcc", "nvidia/cuda_runtime"] {
            roots.push(site.join(sub));
        }
    }
    roots
}

/// The site-packages folders of `python3`, where `pip install nvidia-cuda-nvcc` puts nvcc.
fn python_site_dirs() -> Vec<PathBuf> {
    let script = "import site,sysconfig;print('\\n'.join(set(site.getsitepackages()+[site.getusersitepackages(),sysconfig.get_paths()['purelib']])))";
    match Command::new("python3").args(["-c", script]).output() {
        Ok(out) if out.status.success() => {
            String::from_utf8_lossy(&out.stdout).lines().map(PathBuf::from).filter(|p| p.is_dir()).collect()
        }
        _ => Vec::new(),
    }
}

pub fn hipcc() -> Option<PathBuf> {
    rocm_roots().into_iter().map(|r| r.join("bin/hipcc")).find(|p| p.is_file()).or_else(|| on_path("hipcc"))
}

/// The compiler AMD kernels are built with.
#[derive(Debug, Clone)]
pub enum AmdCompiler {
    /// forky's hipcc, in the chroot `cargo xtask amd-toolchain` makes.
    Chroot(Chroot),
    /// The host's hipcc.
    Host(PathBuf),
}

impl AmdCompiler {
    /// hipcc's path on this machine (inside the chroot's folder for a chroot).
    pub fn hipcc(&self) -> PathBuf {
        match self {
            AmdCompiler::Chroot(c) => c.hipcc(),
            AmdCompiler::Host(p) => p.clone(),
        }
    }
}

/// The chroot's hipcc when the chroot is complete and can be entered, else the host's hipcc.
/// Looked up once per process.
pub fn amd_compiler() -> Option<AmdCompiler> {
    static FOUND: OnceLock<Option<AmdCompiler>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let dir = amd_toolchain::chroot_dir();
            if amd_toolchain::marker(&dir).is_some() {
                match Chroot::open(&dir) {
                    Ok(chroot) => return Some(AmdCompiler::Chroot(chroot)),
                    Err(e) => eprintln!("warning: {e}; falling back to the host's hipcc"),
                }
            }
            hipcc().map(AmdCompiler::Host)
        })
        .clone()
}

pub fn nvcc() -> Option<PathBuf> {
    on_path("nvcc").or_else(|| cuda_roots().into_iter().map(|r| r.join("bin/nvcc")).find(|p| p.is_file()))
}

pub fn hip_include_dir() -> Option<PathBuf> {
    rocm_roots().into_iter().map(|r| r.join("include")).find(|d| d.join("hip/hip_runtime_api.h").is_file())
}

pub fn cuda_include_dir() -> Option<PathBuf> {
    // nvcc's own toolkit first, so headers and compiler agree.
    let from_nvcc = nvcc().and_then(|n| n.parent()?.parent().map(|r| r.join("include")));
    from_nvcc
        .into_iter()
        .chain(cuda_roots().into_iter().map(|r| r.join("include")))
        .find(|d| d.join("cuda.h").is_file())
}

/// How to get what is missing, named so a user can act on it.
pub fn install_hint(what: &str) -> &'static str {
    match what {
        "hipcc" => {
            "run `cargo xtask amd-toolchain` as root (a Debian forky chroot with hipcc 7 for every current AMD GPU), or install hipcc and libamdhip64-dev (Debian/Ubuntu: `apt-get install hipcc libamdhip64-dev`) or ROCm, and set ROCM_PATH if it is not in /opt/rocm"
        }
        "hip.h" => {
            "install hipcc and libamdhip64-dev (Debian/Ubuntu: `apt-get install hipcc libamdhip64-dev`) or ROCm, and set ROCM_PATH if it is not in /opt/rocm"
        }
        "libclang" => "install libclang (Debian/Ubuntu: `apt-get install libclang-dev`)",
        "cuobjdump" => {
            "install the CUDA toolkit, or `pip install nvidia-cuda-cuobjdump==13.4.*` beside the nvcc wheels"
        }
        _ => {
            "install the CUDA toolkit and set CUDA_HOME, or `pip install nvidia-cuda-nvcc==13.4.* nvidia-nvvm==13.4.* nvidia-cuda-runtime==13.0.* nvidia-cuda-crt==13.4.* nvidia-cuda-cccl==13.0.* nvidia-cuda-cuobjdump==13.4.*`"
        }
    }
}

/// First line of `tool --version`-like output, for `doctor`.
pub fn version_line(tool: &Path, arg: &str) -> String {
    match Command::new(tool).arg(arg).output() {
        Ok(out) => {
            let text =
                String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .find(|l| l.contains("release") || l.contains("version") || l.contains("HIP"))
                .unwrap_or("(no version printed)")
                .trim()
                .to_string()
        }
        Err(e) => format!("(cannot run: {e})"),
    }
}

/// The oldest nvcc whose ptxas compiles a cp.async with an L2 cache policy correctly: the
/// kernels' weight copies take their evict-first policy only from it on
/// (`rf_cp_async16_policy` in kernels/include/rocmforge_mma.h), so an older one builds correct
/// kernels that decode more slowly.
pub const NVCC_FOR_WEIGHT_POLICY: (u32, u32) = (13, 4);

/// The `release X.Y` of nvcc's `--version` line ("Cuda compilation tools, release 13.4,
/// V13.4.92"), as (X, Y).
pub fn nvcc_release(version_line: &str) -> Option<(u32, u32)> {
    let rest = &version_line[version_line.find("release ")? + "release ".len()..];
    let number = rest.split(|c: char| c != '.' && !c.is_ascii_digit()).next()?;
    let (major, minor) = number.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::nvcc_release;

    #[test]
    fn reads_nvcc_release() {
        assert_eq!(nvcc_release("Cuda compilation tools, release 13.4, V13.4.92"), Some((13, 4)));
        assert_eq!(nvcc_release("Cuda compilation tools, release 12.10, V12.10.1"), Some((12, 10)));
        assert_eq!(nvcc_release("Cuda compilation tools, release 13"), None);
        assert_eq!(nvcc_release("(no version printed)"), None);
    }
}
