//! The entry points of each code object, by target, recorded next to it as `<stem>.symbols`
//! (`<target>: <entry> <entry> ...` a line) when `cargo xtask kernels` builds it. rocm-kernels
//! embeds the records with the objects, and its host test (`launchable`) proves that every entry
//! a launcher can pick exists for every target that could be asked for it.
//!
//! AMD: the kernels an offload bundle's code objects declare in their metadata
//! (`amdhsa.kernels`, what `hipModuleGetFunction` finds), read here ([`amd_resources`]).
//! NVIDIA: fatbins are compressed (`-compress-all`), so `cuobjdump` lists them: `-symbols` gives
//! each cubin's `STO_ENTRY` functions, `-ptx` each PTX's `.entry`s.

use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_runtime::Platform;

use crate::{Result, amd_resources, toolchain};

/// The record's path for an object.
pub fn record_path(object: &Path) -> PathBuf {
    object.with_extension("symbols")
}

/// Writes the record of `object` (a platform's code object).
pub fn record(platform: Platform, object: &Path) -> Result<()> {
    let targets = match platform {
        Platform::Amd => amd(object)?,
        Platform::Nvidia => nvidia(object)?,
    };
    if targets.is_empty() || targets.iter().any(|(_, entries)| entries.is_empty()) {
        return Err(
            format!("{}: no entry points found for some target: {targets:?}", object.display()).into()
        );
    }
    let name = object.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut text = format!("# entry points of {name} by target (cargo xtask kernels)\n");
    for (target, entries) in targets {
        text.push_str(&format!("{target}: {}\n", entries.join(" ")));
    }
    let path = record_path(object);
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()).into())
}

fn amd(object: &Path) -> Result<Vec<(String, Vec<String>)>> {
    let data = std::fs::read(object).map_err(|e| format!("{}: {e}", object.display()))?;
    let objects = amd_resources::read_bundle(&data).map_err(|e| format!("{}: {e}", object.display()))?;
    Ok(objects.into_iter().map(|o| (o.target, o.entries.into_iter().map(|e| e.name).collect())).collect())
}

/// cuobjdump: on PATH, next to nvcc (the CUDA toolkit, or NVIDIA's `nvidia-cuda-cuobjdump` wheel,
/// which installs beside the nvcc wheel).
pub fn cuobjdump() -> Option<PathBuf> {
    let next_to_nvcc = toolchain::nvcc().map(|n| n.with_file_name("cuobjdump")).filter(|p| p.is_file());
    next_to_nvcc.or_else(|| toolchain::on_path("cuobjdump"))
}

fn nvidia(object: &Path) -> Result<Vec<(String, Vec<String>)>> {
    let tool = cuobjdump().ok_or_else(|| {
        format!(
            "cuobjdump not found (it lists a fatbin's entry points): {}",
            toolchain::install_hint("cuobjdump")
        )
    })?;
    let run = |flag: &str| -> Result<String> {
        let out = Command::new(&tool)
            .arg(flag)
            .arg(object)
            .output()
            .map_err(|e| format!("{}: {e}", tool.display()))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("{} {flag} {}: {}", tool.display(), object.display(), err.trim()).into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let mut targets = parse_cuobjdump_symbols(&run("-symbols")?);
    targets.extend(parse_cuobjdump_ptx(&run("-ptx")?));
    Ok(targets)
}

/// `(sm_<arch>, entries)` per cubin of `cuobjdump -symbols`.
fn parse_cuobjdump_symbols(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    // cuobjdump heads every fatbin member, PTX ones too, with `arch = `: only cubins count.
    let mut in_elf = false;
    for line in text.lines() {
        if line.starts_with("Fatbin ") {
            in_elf = line.starts_with("Fatbin elf code");
        } else if let Some(arch) = line.trim().strip_prefix("arch = ").filter(|_| in_elf) {
            out.push((arch.trim().to_string(), Vec::new()));
        } else if in_elf
            && line.starts_with("STT_FUNC")
            && line.contains("STO_ENTRY")
            && let (Some((_, entries)), Some(name)) = (out.last_mut(), line.split_whitespace().last())
        {
            entries.push(name.to_string());
        }
    }
    for (_, entries) in &mut out {
        entries.sort();
    }
    out
}

/// `(compute_<arch>, entries)` per PTX of `cuobjdump -ptx`.
fn parse_cuobjdump_ptx(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_ptx = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("Fatbin ") {
            in_ptx = line.starts_with("Fatbin ptx code");
        } else if let Some(arch) = line.strip_prefix("arch = ").filter(|_| in_ptx) {
            let arch = arch.trim();
            out.push((
                arch.strip_prefix("sm_").map_or(arch.to_string(), |n| format!("compute_{n}")),
                Vec::new(),
            ));
        } else if let Some(rest) =
            line.strip_prefix(".visible .entry ").or_else(|| line.strip_prefix(".entry "))
            && in_ptx
            && let Some(entries) = out.last_mut().map(|(_, e)| e)
        {
            entries.push(rest.split(['(', ' ']).next().unwrap_or_default().to_string());
        }
    }
    for (_, entries) in &mut out {
        entries.sort();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuobjdump_listings() {
        let symbols = "\nFatbin elf code:\n================\narch = sm_80\ncode version = [1,8]\n\nsymbols:\n\
                       STT_FUNC         STB_GLOBAL STO_ENTRY      rf_b\nSTT_FUNC         STB_GLOBAL STO_ENTRY      rf_a\n\
                       \nFatbin elf code:\n================\narch = sm_90a\n\nsymbols:\n\
                       STT_OBJECT       STB_WEAK   STV_DEFAULT  U .nv.reservedSmem.offset0\n\
                       STT_FUNC         STB_LOCAL  STV_DEFAULT    helper\n\
                       STT_FUNC         STB_GLOBAL STO_ENTRY      rf_a\n\
                       \nFatbin ptx code:\n================\narch = sm_90\n";
        assert_eq!(
            parse_cuobjdump_symbols(symbols),
            [
                ("sm_80".to_string(), vec!["rf_a".to_string(), "rf_b".to_string()]),
                ("sm_90a".into(), vec!["rf_a".into()])
            ]
        );
        let ptx = "\nFatbin elf code:\n================\narch = sm_80\n\nFatbin ptx code:\n================\narch = sm_90\ncode version = [9,0]\n\n.version 9.0\n\
                   .visible .entry rf_axpy_f32(\n.param .u64 x\n)\n.func helper(\n";
        assert_eq!(parse_cuobjdump_ptx(ptx), [("compute_90".to_string(), vec!["rf_axpy_f32".to_string()])]);
    }
}
