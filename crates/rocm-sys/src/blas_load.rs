//! Opening the vendor BLAS libraries: cuBLAS on NVIDIA, rocBLAS on AMD.
//!
//! Both are optional: rocmforge has a portable GEMM kernel, so a missing library is a
//! [`LoadError`] the runtime reports and the caller may fall back on, never a link error. Every
//! symbol is resolved when the library is opened, as for the driver libraries.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::LoadError;
use crate::cublas::CublasLibrary;
use crate::load::{candidates, open};
use crate::rocblas::RocblasLibrary;

impl std::fmt::Debug for CublasLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CublasLibrary")
    }
}

/// Env var naming an exact cuBLAS library to load instead of searching.
pub const CUBLAS_LIBRARY_ENV: &str = "ROCMFORGE_CUBLAS_LIBRARY";
/// Env var naming an exact rocBLAS library to load instead of searching.
pub const ROCBLAS_LIBRARY_ENV: &str = "ROCMFORGE_ROCBLAS_LIBRARY";

/// The sonames tried, newest first: cuBLAS 13 and 12 (CUDA 13 and 12), then the development
/// link. All have the 64-bit-stride `cublasGemmStridedBatchedEx` and `cublasGetStatusName`.
const CUBLAS_NAMES: &[&str] = &["libcublas.so.13", "libcublas.so.12", "libcublas.so"];
/// rocBLAS 5 (ROCm 7), 4 (ROCm 6), 3 and 0 (ROCm 5, Debian's packages), then the development link.
const ROCBLAS_NAMES: &[&str] =
    &["librocblas.so.5", "librocblas.so.4", "librocblas.so.3", "librocblas.so.0", "librocblas.so"];

/// Where cuBLAS lives when it is not on the loader's path: the toolkit
/// (`$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`) and NVIDIA's pip wheels
/// (`nvidia-cublas` for CUDA 13, `nvidia-cublas-cu12`) in the Python environments on `PATH`.
fn cublas_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).filter(|p| !p.is_empty()))
        .map(|root| PathBuf::from(root).join("lib64"))
        .collect();
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for site in python_site_packages() {
        for sub in ["nvidia/cu13/lib", "nvidia/cublas/lib"] {
            dirs.push(site.join(sub));
        }
    }
    dirs.retain(|d| d.is_dir());
    dirs.dedup();
    dirs
}

/// `site-packages` folders of the Python prefixes this process can see: `$VIRTUAL_ENV` and
/// the parent of every `bin` folder on `PATH` (a venv's or a pyenv's `python3` sits there).
/// Found by listing folders, never by running Python: loading a library must stay cheap.
fn python_site_packages() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> =
        std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()).map(PathBuf::from).into_iter().collect();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.file_name().is_some_and(|n| n == "bin") {
                prefixes.extend(dir.parent().map(Path::to_path_buf));
            }
        }
    }
    let mut sites = Vec::new();
    for prefix in prefixes {
        sites.extend(site_packages_under(&prefix));
    }
    sites.dedup();
    sites
}

/// `<prefix>/lib/python3.*/site-packages`, the ones that exist.
fn site_packages_under(prefix: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(prefix.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages"))
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    found
}

/// Opens cuBLAS: `$ROCMFORGE_CUBLAS_LIBRARY` if set, else `libcublas.so.13`, `.so.12`, `.so` on
/// the loader path, then in the toolkit and pip-wheel folders (see `cublas_dirs`).
///
/// # Safety
/// Loading runs the library's initialisers, and every bound symbol is trusted to have the
/// signature of the headers the bindings were generated from.
pub unsafe fn load_cublas() -> Result<CublasLibrary, LoadError> {
    let list = candidates(CUBLAS_LIBRARY_ENV, CUBLAS_NAMES, &cublas_dirs());
    // SAFETY: see this function's contract.
    open("cuBLAS (libcublas)", list, |lib| unsafe { CublasLibrary::from_library(lib) }).map(|(l, _)| l)
}

/// Where rocBLAS is looked for: `$ROCMFORGE_ROCBLAS_LIBRARY` alone when set, else each of
/// [`ROCBLAS_NAMES`] in the folder of the HIP runtime that was loaded, and nowhere else: a
/// rocBLAS from another ROCm installation would bring a second HIP runtime into the process
/// and be handed the first one's streams.
pub fn rocblas_candidates(env: impl Fn(&str) -> Option<OsString>, hip_library: &Path) -> Vec<OsString> {
    if let Some(exact) = env(ROCBLAS_LIBRARY_ENV).filter(|v| !v.is_empty()) {
        return vec![exact];
    }
    let dir = hip_library.parent().unwrap_or(Path::new("."));
    ROCBLAS_NAMES.iter().map(|n| dir.join(n).into_os_string()).collect()
}

/// Opens rocBLAS from the installation of the HIP runtime at `hip_library` (see
/// [`rocblas_candidates`]).
///
/// # Safety
/// As [`load_cublas`]; the declarations are hand-written (`rocblas.rs` says from what).
pub unsafe fn load_rocblas(hip_library: &Path) -> Result<RocblasLibrary, LoadError> {
    let list = rocblas_candidates(|v| std::env::var_os(v), hip_library);
    // SAFETY: see this function's contract.
    open("rocBLAS (librocblas)", list, |lib| unsafe { RocblasLibrary::from_library(lib) }).map(|(l, _)| l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_packages_are_found_under_a_prefix() {
        let root = std::env::temp_dir().join(format!("rocmforge-blas-load-{}", std::process::id()));
        let site = root.join("lib/python3.12/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        std::fs::create_dir_all(root.join("lib/other")).unwrap();
        assert_eq!(site_packages_under(&root), vec![site]);
        assert!(site_packages_under(&root.join("missing")).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn rocblas_comes_from_the_hip_runtime_folder_only() {
        let none = |_: &str| None;
        let hip = Path::new("/opt/rocm-6.2.0/lib/libamdhip64.so.6");
        let list = rocblas_candidates(none, hip);
        assert_eq!(list.len(), ROCBLAS_NAMES.len());
        assert!(
            list.iter().all(|c| Path::new(c).parent() == Some(Path::new("/opt/rocm-6.2.0/lib"))),
            "{list:?}"
        );
        // Two installations: the second one's HIP gets the second one's rocBLAS.
        let other = rocblas_candidates(none, Path::new("/opt/rocm-7.0.0/lib/libamdhip64.so.7"));
        assert_eq!(Path::new(&other[0]), Path::new("/opt/rocm-7.0.0/lib/librocblas.so.5"));
        let exact = |v: &str| (v == ROCBLAS_LIBRARY_ENV).then(|| OsString::from("/x/librocblas.so.4"));
        assert_eq!(rocblas_candidates(exact, hip), [OsString::from("/x/librocblas.so.4")]);
    }

    #[test]
    fn a_library_that_is_not_cublas_is_refused_naming_what_was_tried() {
        // libc exports none of cuBLAS's symbols: the load fails on the first lookup.
        let list = vec![OsString::from("libc.so.6"), OsString::from("/nonexistent/libcublas.so.13")];
        // SAFETY: nothing from libc is called; from_library only looks symbols up.
        let err = open("cuBLAS (libcublas)", list, |lib| unsafe { CublasLibrary::from_library(lib) })
            .expect_err("libc is not cuBLAS");
        let text = err.to_string();
        assert!(text.starts_with("cuBLAS (libcublas) could not be loaded"), "{text}");
        assert!(text.contains("cublasCreate_v2") && text.contains("/nonexistent/libcublas.so.13"), "{text}");
    }
}
