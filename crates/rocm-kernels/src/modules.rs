//! [`KernelModule`]: the kernel sources as a type. `build.rs` writes one variant per
//! `kernels/*.hip` file, so a launcher names its module by a variant (a typo does not compile)
//! and a test can walk every module ([`KernelModule::ALL`]).

include!(concat!(env!("OUT_DIR"), "/modules.rs"));

impl std::fmt::Display for KernelModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_variant_per_source_in_name_order() {
        // At run time where nextest says (an archive remaps the checkout on the GPU host).
        let manifest =
            std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
        let dir = std::path::Path::new(&manifest).join("../../kernels");
        let mut stems: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "hip"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        stems.sort();
        let names: Vec<&str> = KernelModule::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names, stems);
        assert_eq!(KernelModule::FlashMma.name(), "flash_mma");
        assert_eq!(KernelModule::Mxfp4Tiled.to_string(), "mxfp4_tiled");
    }
}
