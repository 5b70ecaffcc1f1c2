//! `cargo xtask gpu-test` and `cargo xtask gpu-archive`.
//!
//! - `gpu-test` builds the kernels for the platform of this machine and runs the workspace's tests
//!   under the nextest `gpu` profile with `ROCMFORGE_REQUIRE_GPU=1`, so a missing GPU is a failure
//!   and never a run that passes by skipping everything.
//! - `gpu-archive` packs what a GPU host without cargo needs into one folder: a nextest archive
//!   (test binaries with their kernels embedded), the nextest binary and lean builds of xtask and
//!   rocm-bench (benchmarks, with the same kernels embedded). `DIR/xtask gpu-test --archive DIR`,
//!   run from the root of a checkout, runs it there.
//!
//! `test.rs` runs the suite (with `devices.rs` counting the GPUs and `sanitizer.rs` the checkers'
//! reports), `archive.rs` packs it; this file holds what both sides agree on (the profiles, the
//! archive's name) and the cargo plumbing: finding nextest and the target folder, running and
//! showing commands.

mod archive;
mod devices;
mod sanitizer;
mod test;

pub use archive::archive;
pub use test::test;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Result;

/// The nextest archive inside the folder `gpu-archive` writes.
const ARCHIVE_FILE: &str = "rocmforge-gpu.tar.zst";
/// The cargo profile GPU suites are built with (workspace `Cargo.toml`: optimised, stripped).
const CARGO_PROFILE: &str = "gpu";
/// The nextest profile GPU tests run under (`.config/nextest.toml`), and that file.
const NEXTEST_PROFILE: &str = "gpu";
const NEXTEST_CONFIG: &str = ".config/nextest.toml";

/// cargo-nextest as cargo would find it: on PATH, next to cargo, or in `$CARGO_HOME/bin`.
fn find_nextest() -> Result<PathBuf> {
    let exe = format!("cargo-nextest{}", std::env::consts::EXE_SUFFIX);
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    if let Some(dir) =
        std::env::var_os("CARGO").and_then(|c| PathBuf::from(c).parent().map(Path::to_path_buf))
    {
        dirs.push(dir);
    }
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    } else if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    dirs.into_iter().map(|d| d.join(&exe)).find(|p| p.is_file()).ok_or_else(|| {
        "cargo-nextest not found (PATH, next to cargo, $CARGO_HOME/bin): `cargo install cargo-nextest --locked`"
            .into()
    })
}

/// The cargo target folder, as cargo resolves it (CARGO_TARGET_DIR, config, `<root>/target`).
fn target_dir(root: &Path) -> Result<PathBuf> {
    let out = Command::new(crate::cargo())
        .current_dir(root)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    let json = String::from_utf8_lossy(&out.stdout);
    let key = "\"target_directory\":\"";
    let start = json.find(key).ok_or("cargo metadata printed no target_directory")? + key.len();
    let end = json[start..].find('"').ok_or("cargo metadata: unterminated target_directory")? + start;
    Ok(PathBuf::from(json[start..end].replace("\\\\", "\\")))
}

fn run_checked(mut cmd: Command) -> Result<()> {
    println!("+ {}", shown(&cmd));
    let status =
        cmd.status().map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
    if !status.success() {
        return Err(format!("`{}` failed ({status})", shown(&cmd)).into());
    }
    Ok(())
}

/// A command as a shell line, for the log.
fn shown(cmd: &Command) -> String {
    let mut line = String::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            line.push_str(&format!("{}={} ", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    line.push_str(&cmd.get_program().to_string_lossy());
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || "'\"()|&;<>$*?".contains(c)) {
            line.push_str(&format!(" '{}'", arg.replace('\'', r"'\''")));
        } else {
            line.push(' ');
            line.push_str(&arg);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_shown_quoted() {
        let mut cmd = Command::new("nextest");
        cmd.args(["run", "-E", "binary(/^gpu_/)"]).env("A", "1");
        assert_eq!(shown(&cmd), "A=1 nextest run -E 'binary(/^gpu_/)'");
    }
}
