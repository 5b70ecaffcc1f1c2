//! Opening the driver libraries: candidate names, the env overrides, and the optional symbols.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::cuda::{CUevent, CUfunction, CUresult, CudaLibrary};
use crate::hip::HipLibrary;

/// A driver library could not be opened or lacks a symbol rocmforge needs.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{library} could not be loaded; tried: {}", format_tried(.tried))]
pub struct LoadError {
    /// `"HIP runtime (libamdhip64)"` or `"CUDA driver (libcuda)"`.
    pub library: &'static str,
    /// Each candidate path with the loader's reason for refusing it.
    pub tried: Vec<(String, String)>,
}

fn format_tried(tried: &[(String, String)]) -> String {
    tried.iter().map(|(path, why)| format!("{path} ({why})")).collect::<Vec<_>>().join("; ")
}

impl std::fmt::Debug for HipLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HipLibrary")
    }
}

impl std::fmt::Debug for CudaLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CudaLibrary")
    }
}

/// Env var naming an exact HIP runtime library to load instead of searching.
pub const HIP_LIBRARY_ENV: &str = "ROCMFORGE_HIP_LIBRARY";
/// Env var naming an exact CUDA driver library to load instead of searching.
pub const CUDA_LIBRARY_ENV: &str = "ROCMFORGE_CUDA_LIBRARY";

pub(crate) fn candidates(env: &str, names: &[&str], dirs: &[PathBuf]) -> Vec<OsString> {
    if let Some(exact) = std::env::var_os(env).filter(|v| !v.is_empty()) {
        return vec![exact];
    }
    let mut out: Vec<OsString> = names.iter().map(OsString::from).collect();
    for dir in dirs {
        for name in names {
            out.push(dir.join(name).into_os_string());
        }
    }
    out
}

pub(crate) fn open<T>(
    library: &'static str,
    candidates: Vec<OsString>,
    bind: impl Fn(libloading::Library) -> Result<T, libloading::Error>,
) -> Result<(T, OsString), LoadError> {
    let mut tried = Vec::new();
    for path in candidates {
        // SAFETY: opening a driver library runs its initialisers; the candidates are the
        // vendor's own library names (or a path the user chose through the env override).
        let opened = unsafe { libloading::Library::new(&path) };
        match opened.and_then(&bind) {
            Ok(lib) => return Ok((lib, path)),
            Err(e) => tried.push((path.to_string_lossy().into_owned(), e.to_string())),
        }
    }
    Err(LoadError { library, tried })
}

/// Opens the HIP runtime: `$ROCMFORGE_HIP_LIBRARY` if set, else `libamdhip64.so`, `.so.6`,
/// `.so.5` on the loader path, then under `$ROCM_PATH/lib` and `/opt/rocm/lib`.
///
/// # Safety
/// Loading runs the library's initialisers, and every bound symbol is trusted to have the
/// signature of the headers the bindings were generated from.
pub unsafe fn load_hip() -> Result<HipLibrary, LoadError> {
    let mut dirs = Vec::new();
    if let Some(rocm) = std::env::var_os("ROCM_PATH") {
        dirs.push(PathBuf::from(rocm).join("lib"));
    }
    dirs.push(PathBuf::from("/opt/rocm/lib"));
    let names = ["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"];
    let list = candidates(HIP_LIBRARY_ENV, &names, &dirs);
    // SAFETY: see this function's contract.
    open("HIP runtime (libamdhip64)", list, |lib| unsafe { HipLibrary::from_library(lib) }).map(|(l, _)| l)
}

/// Driver entry points that not every supported driver has, resolved one by one.
#[derive(Debug, Clone, Copy)]
pub struct CudaExtras {
    /// `cuFuncGetParamInfo` (CUDA 12.4+): parameter offsets and sizes, for launch checks.
    pub func_get_param_info:
        Option<unsafe extern "C" fn(CUfunction, usize, *mut usize, *mut usize) -> CUresult>,
    /// `cuEventElapsedTime_v2` (12.8+) or, on older drivers, `cuEventElapsedTime`.
    pub event_elapsed_time: unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CUresult,
}

/// Opens the CUDA driver: `$ROCMFORGE_CUDA_LIBRARY` if set, else `libcuda.so.1`, `libcuda.so`.
///
/// # Safety
/// As [`load_hip`].
pub unsafe fn load_cuda() -> Result<(CudaLibrary, CudaExtras), LoadError> {
    let names = ["libcuda.so.1", "libcuda.so"];
    let list = candidates(CUDA_LIBRARY_ENV, &names, &[]);
    const NAME: &str = "CUDA driver (libcuda)";
    // SAFETY: see this function's contract.
    let (lib, path) = open(NAME, list, |lib| unsafe { CudaLibrary::from_library(lib) })?;
    // A second handle to the same library (reference-counted by the loader) for the symbols
    // the generated struct cannot hold because not every driver exports them.
    // SAFETY: the library at `path` was opened a moment ago.
    let extra = unsafe { libloading::Library::new(&path) }.and_then(|extra| {
        // SAFETY: the types are those declared in cuda.h for these symbols.
        unsafe {
            let param_info = extra.get(b"cuFuncGetParamInfo\0").map(|s| *s).ok();
            let elapsed = extra
                .get(b"cuEventElapsedTime_v2\0")
                .or_else(|_| extra.get(b"cuEventElapsedTime\0"))
                .map(|s| *s)?;
            // The handle is kept alive for the process: `lib` holds the library open too,
            // and forgetting this one keeps the function pointers above valid.
            std::mem::forget(extra);
            Ok(CudaExtras { func_get_param_info: param_info, event_elapsed_time: elapsed })
        }
    });
    match extra {
        Ok(extras) => Ok((lib, extras)),
        Err(e) => Err(LoadError {
            library: NAME,
            tried: vec![(path.to_string_lossy().into_owned(), e.to_string())],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_naming_the_path() {
        // SAFETY: the path does not exist, so nothing is loaded.
        let err = open("test", vec![OsString::from("/nonexistent/libnothing.so")], |lib| {
            // SAFETY: never reached.
            unsafe { CudaLibrary::from_library(lib) }
        })
        .expect_err("loading must fail");
        let text = err.to_string();
        assert!(text.contains("/nonexistent/libnothing.so"), "{text}");
        assert_eq!(err.tried.len(), 1);
    }

    #[test]
    fn a_library_without_the_symbols_is_an_error_naming_one() {
        // libc is on every Linux machine and exports none of the driver's symbols.
        let err = open("test", vec![OsString::from("libc.so.6")], |lib| {
            // SAFETY: from_library only looks symbols up; it fails on the first missing one.
            unsafe { HipLibrary::from_library(lib) }
        })
        .expect_err("loading must fail");
        assert!(err.to_string().contains("hip"), "{err}");
    }

    #[test]
    fn the_env_override_replaces_the_search() {
        let list = candidates("ROCMFORGE_TEST_UNSET_VAR_FOR_SURE", &["a.so", "b.so"], &[PathBuf::from("/x")]);
        assert_eq!(list, vec![OsString::from("a.so"), "b.so".into(), "/x/a.so".into(), "/x/b.so".into()]);
    }
}
