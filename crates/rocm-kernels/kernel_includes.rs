//! The files a kernel is compiled from: its source and the headers it includes, directly or
//! through other headers. `cargo xtask kernels` rebuilds an object when one of them is newer than
//! it, and rocm-kernels' build script warns about an embedded object in that state; both compile
//! this one file (`#[path]`), so they agree on what an object depends on.

use std::path::{Path, PathBuf};

/// `source` and every file reachable from it through `#include "name"` lines, each found next to
/// the file that includes it or else in `include_dir` (the compilers' `-I`). A quoted include that
/// resolves to neither (the CPU emulator's own headers, behind a macro no GPU build defines) and
/// every `<name>` include are left out. Lines inside `#if` blocks count: a superset never misses
/// a dependency.
pub fn kernel_inputs(source: &Path, include_dir: &Path) -> Vec<PathBuf> {
    let mut files = vec![source.to_path_buf()];
    let mut next = 0;
    while next < files.len() {
        let text = std::fs::read_to_string(&files[next]).unwrap_or_default();
        let here = files[next].parent().map(Path::to_path_buf);
        for name in quoted_includes(&text) {
            let found =
                here.iter().map(|dir| dir.join(name)).chain([include_dir.join(name)]).find(|p| p.is_file());
            if let Some(path) = found.filter(|p| !files.contains(p)) {
                files.push(path);
            }
        }
        next += 1;
    }
    files
}

/// The names of a text's `#include "name"` lines.
fn quoted_includes(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter_map(|line| {
        let directive = line.trim_start().strip_prefix('#')?.trim_start();
        let quoted = directive.strip_prefix("include")?.trim_start().strip_prefix('"')?;
        quoted.split('"').next().filter(|name| !name.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_quoted_includes_through_headers_once() {
        let dir = std::env::temp_dir().join(format!("rf-kernel-includes-{}", std::process::id()));
        let include = dir.join("include");
        std::fs::create_dir_all(&include).unwrap();
        let write = |path: PathBuf, text: &str| std::fs::write(path, text).unwrap();
        write(
            dir.join("k.hip"),
            "#include \"a.h\"\n  #  include \"local.h\"\n#include <hip/hip_runtime.h>\n#if EMU\n#include \"emu.h\"\n#endif\n",
        );
        write(dir.join("local.h"), "// nothing\n");
        write(include.join("a.h"), "#include \"b.h\"\n");
        write(include.join("b.h"), "#include \"a.h\"\n#include \"c.h\"\n");
        write(include.join("c.h"), "");
        write(include.join("unused.h"), "");
        let got = kernel_inputs(&dir.join("k.hip"), &include);
        std::fs::remove_dir_all(&dir).unwrap();
        let names: Vec<String> =
            got.iter().map(|p| p.strip_prefix(&dir).unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["k.hip", "include/a.h", "local.h", "include/b.h", "include/c.h"]);
    }

    #[test]
    fn the_kernels_inputs_are_what_they_include() {
        let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
        let include = kernels.join("include");
        let named = |stem: &str| -> Vec<String> {
            kernel_inputs(&kernels.join(format!("{stem}.hip")), &include)
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        let stream_read = named("stream_read");
        for header in
            ["rocmforge.h", "rocmforge_dependent_launch.h", "rocmforge_stream_read_abi.h", "rocmforge_abi.h"]
        {
            assert!(
                stream_read.iter().any(|n| n == header),
                "stream_read.hip: {header} missing from {stream_read:?}"
            );
        }
        assert!(!stream_read.iter().any(|n| n == "rocmforge_flash_abi.h"), "{stream_read:?}");
        assert!(named("flash_mma").iter().any(|n| n == "rocmforge_flash_abi.h"));
    }
}
