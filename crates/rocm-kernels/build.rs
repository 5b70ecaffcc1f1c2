//! Embeds the code objects `cargo xtask kernels` built (`<dir>/nvidia/*.fatbin`,
//! `<dir>/amd/*.hsaco`, each with the `<stem>.symbols` list of its entry points by target) by
//! writing `$OUT_DIR/embedded.rs`, which `src/embedded.rs` includes, and the `KernelModule` enum,
//! one variant per `kernels/*.hip` file, to `$OUT_DIR/modules.rs` (`src/modules.rs`).
//!
//! An object older than its source, or than a header the source includes (`kernel_includes.rs`),
//! is embedded with a warning: the kernels need rebuilding (`cargo xtask kernels`). An object
//! whose source is gone is left out, with a warning.
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

#[path = "kernel_includes.rs"]
mod kernel_includes;

/// (table name, subfolder, object extension)
const PLATFORMS: &[(&str, &str, &str)] = &[("NVIDIA", "nvidia", "fatbin"), ("AMD", "amd", "hsaco")];

/// What `cargo xtask kernels` writes next to each object: its entry points by target.
const SYMBOLS_EXTENSION: &str = "symbols";

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
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    // The sources: one module each, whatever is built.
    let sources_dir = workspace.join("kernels");
    println!("cargo::rerun-if-changed={}", sources_dir.display());
    let sources = sources(&sources_dir);
    let modules = out_dir.join("modules.rs");
    std::fs::write(&modules, modules_rs(&sources))
        .unwrap_or_else(|e| panic!("writing {}: {e}", modules.display()));
    let include_dir = sources_dir.join("include");
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
        let mut objects = if wanted(sub) { objects(&dir, ext) } else { Vec::new() };
        objects.retain(|(stem, path)| {
            let source = sources_dir.join(format!("{stem}.hip"));
            if mtime(&source).is_none() {
                println!(
                    "cargo::warning=leaving out {}: kernels/{stem}.hip no longer exists (cargo xtask kernels removes it)",
                    path.display()
                );
                return false;
            }
            // The source and its headers (kernel_inputs lists the source first).
            let inputs = kernel_includes::kernel_inputs(&source, &include_dir);
            if mtime(path) < inputs.iter().filter_map(|p| mtime(p)).max() {
                println!(
                    "cargo::warning={} is older than kernels/{stem}.hip or a header it includes: the embedded kernel \
                     is stale; run `cargo xtask kernels`",
                    path.display()
                );
            }
            true
        });
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
        writeln!(code).unwrap();
        writeln!(
            code,
            "/// The entry points of each {table} object by target (`<stem>.symbols`), sorted by name; \
             absent where the build wrote none."
        )
        .unwrap();
        writeln!(code, "pub static {table}_SYMBOLS: &[(&str, &str)] = &[").unwrap();
        for (stem, path) in &objects {
            let symbols = path.with_extension(SYMBOLS_EXTENSION);
            if symbols.is_file() {
                println!("cargo::rerun-if-changed={}", symbols.display());
                let symbols = symbols.to_str().expect("object paths are UTF-8 (checked in objects())");
                writeln!(code, "    ({stem:?}, include_str!({symbols:?})),").unwrap();
            }
        }
        writeln!(code, "];").unwrap();
    }
    let out = out_dir.join("embedded.rs");
    std::fs::write(&out, code).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}

/// The stems of `kernels/*.hip`, sorted.
fn sources(dir: &Path) -> Vec<String> {
    objects(dir, "hip").into_iter().map(|(stem, _)| stem).collect()
}

/// `$OUT_DIR/modules.rs`: the `KernelModule` enum, a variant per kernel source
/// (`flash_mma` -> `FlashMma`).
fn modules_rs(stems: &[String]) -> String {
    let variant = |stem: &str| -> String {
        stem.split('_')
            .map(|part| {
                let mut chars = part.chars();
                chars.next().map_or(String::new(), |c| c.to_ascii_uppercase().to_string() + chars.as_str())
            })
            .collect()
    };
    let mut code = String::new();
    writeln!(
        code,
        "/// A kernel module: one `kernels/<name>.hip` file, compiled into one code object per platform"
    )
    .unwrap();
    writeln!(
        code,
        "/// (`cargo xtask kernels`). Generated from the sources by `build.rs`, so a launcher can only name"
    )
    .unwrap();
    writeln!(code, "/// a file that exists.").unwrap();
    writeln!(code, "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]").unwrap();
    writeln!(code, "pub enum KernelModule {{").unwrap();
    for stem in stems {
        writeln!(code, "    /// `kernels/{stem}.hip`").unwrap();
        writeln!(code, "    {},", variant(stem)).unwrap();
    }
    writeln!(code, "}}").unwrap();
    writeln!(code).unwrap();
    writeln!(code, "impl KernelModule {{").unwrap();
    writeln!(code, "    /// Every module, in the order of their names.").unwrap();
    writeln!(code, "    pub const ALL: &[KernelModule] = &[").unwrap();
    for stem in stems {
        writeln!(code, "        KernelModule::{},", variant(stem)).unwrap();
    }
    writeln!(code, "    ];").unwrap();
    writeln!(code).unwrap();
    writeln!(code, "    /// The file stem: `kernels/<name>.hip`, `<name>.fatbin`, `<name>.hsaco`.").unwrap();
    writeln!(code, "    pub const fn name(self) -> &'static str {{").unwrap();
    writeln!(code, "        match self {{").unwrap();
    for stem in stems {
        writeln!(code, "            KernelModule::{} => {stem:?},", variant(stem)).unwrap();
    }
    writeln!(code, "        }}").unwrap();
    writeln!(code, "    }}").unwrap();
    writeln!(code, "}}").unwrap();
    code
}

fn mtime(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
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
