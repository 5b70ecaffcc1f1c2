//! `cargo xtask bench` and `cargo xtask attention-dump`: forwarded to `rocm-bench`, the binary
//! that links the kernels. xtask itself stays free of rocm-kernels (which embeds every compiled
//! code object and rebuilds after each `cargo xtask kernels`), so building xtask never waits
//! for the kernels.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Result;

const BINARY: &str = "rocm-bench";

/// Runs `rocm-bench <subcommand> <args>` in place of this process, so its exit status is ours.
pub fn forward(subcommand: &str, args: &[String]) -> Result<()> {
    let cmd = command(subcommand, args, packed_beside_me().as_deref(), &crate::workspace_root());
    replace_process(cmd)
}

/// The `rocm-bench` that `gpu-archive` packs next to xtask (`.gpu/rocm-bench`), for a host
/// without cargo. Not when cargo started xtask (`cargo xtask` sets `CARGO`): there the binary
/// beside it is whatever `cargo build` last left in `target/debug/`, possibly older than the
/// sources and the kernels, while `cargo run` rebuilds what changed, as `cargo xtask bench`
/// always did when the benchmarks were part of xtask.
fn packed_beside_me() -> Option<PathBuf> {
    if std::env::var_os("CARGO").is_some() {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let beside = exe.parent()?.join(format!("{BINARY}{}", std::env::consts::EXE_SUFFIX));
    beside.is_file().then_some(beside)
}

/// The packed binary when there is one, else `cargo run` of the workspace's (release: the host
/// code around each timed launch should not be a debug build's).
fn command(subcommand: &str, args: &[String], packed: Option<&Path>, root: &Path) -> Command {
    let mut cmd = match packed {
        Some(exe) => Command::new(exe),
        None => {
            let mut cmd = Command::new(crate::cargo());
            cmd.current_dir(root).args(["run", "--quiet", "--release", "--package", BINARY, "--"]);
            cmd
        }
    };
    cmd.arg(subcommand).args(args);
    cmd
}

#[cfg(unix)]
fn replace_process(mut cmd: Command) -> Result<()> {
    use std::os::unix::process::CommandExt;
    // exec only returns on failure; on success the tool's exit status, or the signal that ends
    // it, is this process's own.
    let e = cmd.exec();
    Err(format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()).into())
}

#[cfg(not(unix))]
fn replace_process(mut cmd: Command) -> Result<()> {
    let status =
        cmd.status().map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
    std::process::exit(status.code().unwrap_or(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(cmd: &Command) -> (String, Vec<String>) {
        let args = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        (cmd.get_program().to_string_lossy().into_owned(), args)
    }

    #[test]
    fn a_packed_binary_gets_the_arguments_as_they_are() {
        let args = ["rope".to_string(), "--iters".to_string(), "3".to_string()];
        let cmd = command("bench", &args, Some(Path::new(".gpu/rocm-bench")), Path::new("/w"));
        assert_eq!(
            parts(&cmd),
            (".gpu/rocm-bench".into(), vec!["bench".into(), "rope".into(), "--iters".into(), "3".into()])
        );
    }

    #[test]
    fn without_one_cargo_runs_the_workspaces_in_release() {
        let cmd = command("attention-dump", &["/tmp/a".to_string()], None, Path::new("/w"));
        let (_, args) = parts(&cmd);
        assert_eq!(
            args,
            ["run", "--quiet", "--release", "--package", "rocm-bench", "--", "attention-dump", "/tmp/a"]
        );
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/w")));
    }
}
