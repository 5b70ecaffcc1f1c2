//! Embeds the code objects `cargo xtask kernels` built (`<dir>/nvidia/*.fatbin`,
//! `<dir>/amd/*.hsaco`) by writing `$OUT_DIR/embedded.rs`, which `src/embedded.rs` includes.
//!
//! `<dir>` is `$ROCMFORGE_KERNELS_DIR` (relative paths are taken from the workspace root, as xtask
//! does) or `<workspace>/target/kernels`. Nothing built is not an error: the tables are empty and
//! GPU tests skip (or fail under `ROCMFORGE_REQUIRE_GPU=1`) saying so.
//!
//! `ROCMFORGE_EMBED_PLATFORMS` (`nvidia`, `amd` or both, comma-separated; all when unset) limits
//! what is embedded: `cargo xtask gpu-archive --platform nvidia` packs a suite for one host
//! without the other platform's objects in every test binary.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// (table name, subfolder, object extension)
const PLATFORMS: &[(&str, &str, &str)] = &[("NVIDIA", "nvidia", "fatbin"), ("AMD", "amd", "hsaco")];

fn main() {
    let manifest =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest.join("../..");
    println!("cargo::rerun-if-env-changed=ROCMFORGE_KERNELS_DIR");
    println!("cargo::rerun-if-env-changed=ROCMFORGE_EMBED_PLATFORMS");
    let embed = std::env::var("ROCMFORGE_EMBED_PLATFORMS").ok().filter(|v| !v.trim().is_empty());
    let wanted = |sub: &str| embed.as_deref().is_none_or(|list| list.split(',').any(|p| p.trim() == sub));
    let kernels_dir = match std::env::var_os("ROCMFORGE_KERNELS_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => workspace.join(dir),
        None => workspace.join("target").join("kernels"),
    };
    // Cargo treats a watched path that does not exist as always changed, which would rerun this
    // script and rebuild every dependent crate on each build. Creating the (empty) root once makes
    // the watch below a plain directory scan that notices `cargo xtask kernels` writing into it.
    if !kernels_dir.is_dir() {
        let _ = std::fs::create_dir_all(&kernels_dir);
    }
    let kernels_dir = std::fs::canonicalize(&kernels_dir).unwrap_or(kernels_dir);
    // Cargo scans a watched directory recursively: new platform folders and objects, and rewritten
    // ones, all rerun this script.
    println!("cargo::rerun-if-changed={}", kernels_dir.display());

    let mut code = String::new();
    writeln!(code, "/// The folder the code objects were embedded from.").unwrap();
    writeln!(code, "pub static KERNELS_DIR: &str = {:?};", kernels_dir.to_string_lossy()).unwrap();
    writeln!(code).unwrap();
    writeln!(
        code,
        "/// Keeps an embedded object on a 64-byte boundary, since loaders read headers in place."
    )
    .unwrap();
    writeln!(code, "#[allow(dead_code)] // unused when no kernel is built").unwrap();
    writeln!(code, "#[repr(C, align(64))]").unwrap();
    writeln!(code, "struct Aligned<B: ?Sized>(B);").unwrap();
    for (table, sub, ext) in PLATFORMS {
        let dir = kernels_dir.join(sub);
        if dir.is_dir() {
            println!("cargo::rerun-if-changed={}", dir.display());
        }
        let objects = if wanted(sub) { objects(&dir, ext) } else { Vec::new() };
        writeln!(code).unwrap();
        writeln!(
            code,
            "/// Code objects for the {table} platform, `(kernel file stem, bytes)`, sorted by name."
        )
        .unwrap();
        writeln!(code, "pub static {table}: &[(&str, &[u8])] = &[").unwrap();
        for (stem, path) in &objects {
            println!("cargo::rerun-if-changed={}", path.display());
            // Debug formatting escapes the path into a valid Rust string literal.
            let path = path.to_str().expect("object paths are UTF-8 (checked in objects())");
            writeln!(
                code,
                "    ({stem:?}, {{ static O: &Aligned<[u8]> = &Aligned(*include_bytes!({path:?})); &O.0 }}),"
            )
            .unwrap();
        }
        writeln!(code, "];").unwrap();
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("embedded.rs");
    std::fs::write(&out, code).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}

/// `(stem, path)` of every `*.<ext>` file in `dir`, sorted by stem; empty if `dir` does not exist.
fn objects(dir: &Path, ext: &str) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if !path.is_file() || path.extension().is_none_or(|e| e != ext) {
            continue;
        }
        match (path.file_stem().and_then(|s| s.to_str()), path.to_str()) {
            (Some(stem), Some(_)) => found.push((stem.to_string(), path.clone())),
            _ => println!("cargo::warning=skipping {}: not a UTF-8 path", path.display()),
        }
    }
    found.sort();
    found
}
