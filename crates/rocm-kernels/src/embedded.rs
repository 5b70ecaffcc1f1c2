//! The compiled kernels, embedded in the crate at build time.
//!
//! `cargo xtask kernels` compiles `kernels/<name>.hip` into `<dir>/nvidia/<name>.fatbin` (nvcc:
//! SASS per SM arch plus PTX) and `<dir>/amd/<name>.hsaco` (hipcc: an offload bundle with a code
//! object per gfx target); this crate's build script embeds whatever is there, so a binary needs no
//! kernel files at run time. `<dir>` is `$ROCMFORGE_KERNELS_DIR` or `<workspace>/target/kernels`
//! ([`KERNELS_DIR`] says which). Platforms or kernels that were not built are simply absent:
//! lookups return `None`, and the caller reports that the kernels need building. Every object
//! starts on a 64-byte boundary.

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

fn lookup(table: &'static [(&'static str, &'static [u8])], name: &str) -> Option<&'static [u8]> {
    table.binary_search_by(|(n, _)| (*n).cmp(name)).ok().map(|i| table[i].1)
}

/// The code object of `kind` built from `module`'s source, if it was built.
pub fn image(kind: rocm_runtime::CodeObjectKind, module: crate::KernelModule) -> Option<&'static [u8]> {
    match kind {
        rocm_runtime::CodeObjectKind::Amd => amd(module.name()),
        rocm_runtime::CodeObjectKind::Nvidia => nvidia(module.name()),
    }
}

/// The entry points of `kind`'s object built from `module`'s source, by target, as
/// `cargo xtask kernels` recorded them: `None` where the object (or its record) is absent.
pub fn symbols(kind: rocm_runtime::CodeObjectKind, module: crate::KernelModule) -> Option<&'static str> {
    let table = match kind {
        rocm_runtime::CodeObjectKind::Amd => AMD_SYMBOLS,
        rocm_runtime::CodeObjectKind::Nvidia => NVIDIA_SYMBOLS,
    };
    table.binary_search_by(|(n, _)| (*n).cmp(module.name())).ok().map(|i| table[i].1)
}

/// The NVIDIA fatbin built from `kernels/<name>.hip` (for `cuModuleLoadData`), if it was built.
pub fn nvidia(name: &str) -> Option<&'static [u8]> {
    lookup(NVIDIA, name)
}

/// The AMD code object bundle built from `kernels/<name>.hip` (for `hipModuleLoadData`), if it was
/// built.
pub fn amd(name: &str) -> Option<&'static [u8]> {
    lookup(AMD, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// What `nvcc --fatbin` writes first: 0xBA55ED50, little-endian.
    const FATBIN_MAGIC: [u8; 4] = 0xBA55_ED50_u32.to_le_bytes();
    const OFFLOAD_BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
    const ELF_MAGIC: &[u8] = b"\x7fELF";

    /// The objects on disk in `<KERNELS_DIR>/<sub>`, by stem. Empty when nothing is built.
    fn on_disk(sub: &str, ext: &str) -> Vec<(String, Vec<u8>)> {
        let mut found: Vec<(String, Vec<u8>)> = std::fs::read_dir(Path::new(KERNELS_DIR).join(sub))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == ext))
            .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
            .collect();
        found.sort();
        found
    }

    fn check_table(
        table: &'static [(&'static str, &'static [u8])],
        get: fn(&str) -> Option<&'static [u8]>,
        sub: &str,
        ext: &str,
        magic_ok: fn(&[u8]) -> bool,
    ) {
        assert!(table.windows(2).all(|w| w[0].0 < w[1].0), "{sub} table not sorted by name");
        for (name, bytes) in table {
            assert!(!bytes.is_empty(), "{sub}/{name} is empty");
            assert!(
                magic_ok(bytes),
                "{sub}/{name} does not start like a {ext}: {:02x?}",
                &bytes[..bytes.len().min(8)]
            );
            assert_eq!(bytes.as_ptr() as usize % 64, 0, "{sub}/{name} is not 64-byte aligned");
            assert_eq!(get(name).map(<[u8]>::as_ptr), Some(bytes.as_ptr()));
        }
        // Everything built (as of this test binary's build) is embedded, byte for byte. Objects
        // rebuilt after that would rerun the build script on the next cargo build. On a host
        // that runs an archived suite the build folder is not there; the checks above stand.
        if !Path::new(KERNELS_DIR).join(sub).is_dir() {
            return;
        }
        let disk = on_disk(sub, ext);
        let embedded: Vec<(String, Vec<u8>)> =
            table.iter().map(|(n, b)| (n.to_string(), b.to_vec())).collect();
        let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&embedded), names(&disk), "{sub}: embedded objects differ from {KERNELS_DIR}");
        for ((name, e), (_, d)) in embedded.iter().zip(&disk) {
            assert!(e == d, "{sub}/{name}: embedded bytes differ from the file in {KERNELS_DIR}");
        }
        assert_eq!(get("no-such-kernel"), None);
    }

    #[test]
    fn nvidia_objects_are_embedded_fatbins() {
        check_table(NVIDIA, nvidia, "nvidia", "fatbin", |b| b.starts_with(&FATBIN_MAGIC));
    }

    #[test]
    fn amd_objects_are_embedded_code_objects() {
        check_table(AMD, amd, "amd", "hsaco", |b| {
            b.starts_with(OFFLOAD_BUNDLE_MAGIC) || b.starts_with(ELF_MAGIC)
        });
    }

    #[test]
    fn kernels_dir_is_absolute() {
        assert!(Path::new(KERNELS_DIR).is_absolute(), "{KERNELS_DIR}");
    }
}
