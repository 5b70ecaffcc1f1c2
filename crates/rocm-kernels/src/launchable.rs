//! Every entry point a launcher can pick ([`all`]), and the host test that proves each exists in
//! the code objects built for every target that can run it.
//!
//! Each launcher module lists its entries with the same functions it names them with at launch
//! (`launchable()` next to the launcher). `cargo xtask kernels` records the entry points of each
//! object by target (`<stem>.symbols`, embedded beside the object: [`crate::embedded::symbols`]).
//! The test then checks, per platform and target built, that every entry whose capability the
//! target has is there: a renamed entry, a variant added to a launcher and not to its kernel, or
//! a target left out of a file's target list fails on the host, not on a GPU.

use rocm_runtime::{CodeObjectKind, MatrixCores, bf16, f16};

use crate::KernelModule;
use crate::dtype::{Dtype, kernel_name};

/// What a device must have for a launcher to pick an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: every target.
    Nothing,
    /// NVIDIA `mma.sync` (`MatrixCores::MmaSync`).
    MmaSync,
    /// Hopper warpgroup MMA (`DeviceInfo::warpgroup_mma`: sm_90a code).
    WarpgroupMma,
    /// AMD MFMA (`MatrixCores::Mfma`).
    Mfma,
}

/// One entry point a launcher can pick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launchable {
    pub module: KernelModule,
    pub entry: String,
    pub needs: Needs,
}

impl Launchable {
    pub(crate) fn new(module: KernelModule, entry: impl Into<String>, needs: Needs) -> Launchable {
        Launchable { module, entry: entry.into(), needs }
    }
}

/// The storage types every launcher generic over [`Dtype`] takes, by their entry suffix.
pub(crate) const DTYPES: [&str; 3] = [f32::NAME, f16::NAME, bf16::NAME];

/// The entries of a launcher generic over `Dtype` (`kernel_name::<T>(prefix)` for every `T`).
pub(crate) fn every_dtype(module: KernelModule, prefix: &str) -> Vec<Launchable> {
    let names = [kernel_name::<f32>(prefix), kernel_name::<f16>(prefix), kernel_name::<bf16>(prefix)];
    names.into_iter().map(|name| Launchable::new(module, name, Needs::Nothing)).collect()
}

/// Every entry any launcher of this crate can pick.
pub fn all() -> Vec<Launchable> {
    [
        crate::axpy::launchable(),
        crate::fill::launchable(),
        crate::spin::launchable(),
        crate::stream_read::launchable(),
        crate::stream_rmw::launchable(),
        crate::swiglu::launchable(),
        crate::causal_mask::launchable(),
        crate::kv_cache::launchable(),
        crate::gemm::launchable(),
        crate::softmax::launchable(),
        crate::rmsnorm::launchable(),
        crate::rope::launchable(),
        crate::attention::unfused::launchable(),
        crate::attention::flash::launchable(),
        crate::quant::dequant::launchable(),
        crate::quant::mxfp::launchable(),
        crate::quant::mxfp4_tiled::launchable(),
        crate::quant::q4k_tiled::launchable(),
        crate::quant::q8_0_tiled::launchable(),
        crate::quant::matvec::launchable(),
        crate::quant::quant_gemm::launchable(),
        crate::persistent_mlp::launchable(),
    ]
    .concat()
}

/// Whether a device running code built for `target` has `needs`: NVIDIA `sm_80`, `sm_90a` (SASS)
/// or `compute_90` (PTX, JIT-compiled for a later GPU); AMD gfx target IDs.
pub fn target_has(kind: CodeObjectKind, target: &str, needs: Needs) -> bool {
    match (kind, needs) {
        (_, Needs::Nothing) => true,
        (CodeObjectKind::Nvidia, Needs::MmaSync) => sm_number(target).is_some_and(|n| n >= 80),
        (CodeObjectKind::Nvidia, Needs::WarpgroupMma) => target == "sm_90a",
        (CodeObjectKind::Amd, Needs::Mfma) => MatrixCores::for_amd_arch(target) == MatrixCores::Mfma,
        _ => false,
    }
}

/// `80` of `sm_80`, `90` of `sm_90a` or `compute_90`.
fn sm_number(target: &str) -> Option<u32> {
    let digits = target.strip_prefix("sm_").or_else(|| target.strip_prefix("compute_"))?;
    digits.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse().ok()
}

/// A `<stem>.symbols` record ([`crate::embedded::symbols`]): `(target, entries)` per line
/// `<target>: <entry> <entry> ...`; lines starting with `#` are comments.
pub fn parse_record(text: &str) -> Vec<(&str, Vec<&str>)> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(target, entries)| (target.trim(), entries.split_whitespace().collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Set (to `1`) where the kernels must have been built: CI builds every platform's first.
    const REQUIRE_ENV: &str = "ROCMFORGE_REQUIRE_KERNELS";

    #[test]
    fn the_launchable_list_is_well_formed() {
        let all = all();
        let mut seen = BTreeSet::new();
        for l in &all {
            assert!(
                l.entry.starts_with("rf_") && l.entry.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{l:?}"
            );
            assert!(seen.insert((l.module, l.entry.clone())), "listed twice: {l:?}");
        }
        // Every module has an entry some launcher picks (a module nothing launches is dead).
        for module in KernelModule::ALL {
            assert!(all.iter().any(|l| l.module == *module), "no launcher picks an entry of {module}");
        }
    }

    #[test]
    fn target_capabilities() {
        use CodeObjectKind::*;
        assert!(
            target_has(Nvidia, "sm_80", Needs::MmaSync) && target_has(Nvidia, "compute_90", Needs::MmaSync)
        );
        assert!(!target_has(Nvidia, "sm_75", Needs::MmaSync));
        assert!(
            target_has(Nvidia, "sm_90a", Needs::WarpgroupMma)
                && !target_has(Nvidia, "sm_90", Needs::WarpgroupMma)
        );
        assert!(!target_has(Nvidia, "compute_90", Needs::WarpgroupMma));
        assert!(target_has(Amd, "gfx90a", Needs::Mfma) && !target_has(Amd, "gfx1100", Needs::Mfma));
        assert!(!target_has(Amd, "gfx90a", Needs::MmaSync) && !target_has(Nvidia, "sm_90a", Needs::Mfma));
        assert_eq!(
            parse_record("# x\nsm_80: a b\n\ncompute_90: c\n"),
            [("sm_80", vec!["a", "b"]), ("compute_90", vec!["c"])]
        );
    }

    /// The host test of the host/kernel contract: every entry a launcher can pick exists in the
    /// objects built for each platform and target whose device could be given it.
    #[test]
    fn every_launchable_entry_exists_for_every_built_target() {
        let required = std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1");
        let all = all();
        let mut checked = 0usize;
        for kind in [CodeObjectKind::Nvidia, CodeObjectKind::Amd] {
            let built: Vec<KernelModule> = KernelModule::ALL
                .iter()
                .copied()
                .filter(|m| crate::embedded::image(kind, *m).is_some())
                .collect();
            if built.is_empty() {
                assert!(
                    !required,
                    "{REQUIRE_ENV}=1 and no {kind} kernel is embedded: run `cargo xtask kernels --platform all`"
                );
                eprintln!("no {kind} kernels embedded: nothing to check for {kind}");
                continue;
            }
            let mut records = Vec::new();
            for module in &built {
                let text = crate::embedded::symbols(kind, *module).unwrap_or_else(|| {
                    panic!(
                        "{kind}/{module} has no symbols record: rebuild the kernels (`cargo xtask kernels`)"
                    )
                });
                let record = parse_record(text);
                assert!(!record.is_empty(), "{kind}/{module}: empty symbols record");
                records.push((*module, record));
            }
            let targets: BTreeSet<&str> =
                records.iter().flat_map(|(_, r)| r.iter().map(|(t, _)| *t)).collect();
            let mut missing = Vec::new();
            for l in &all {
                let needed_on: Vec<&str> =
                    targets.iter().copied().filter(|t| target_has(kind, t, l.needs)).collect();
                if needed_on.is_empty() {
                    continue;
                }
                let Some((_, record)) = records.iter().find(|(m, _)| *m == l.module) else {
                    missing.push(format!(
                        "{} ({kind} object not built, needed on {})",
                        l.entry,
                        needed_on.join(", ")
                    ));
                    continue;
                };
                for target in needed_on {
                    match record.iter().find(|(t, _)| *t == target) {
                        Some((_, entries)) if entries.contains(&l.entry.as_str()) => checked += 1,
                        Some(_) => missing.push(format!("{}/{}: {} on {target}", kind, l.module, l.entry)),
                        // A restricted file's object carries only its own targets; where a
                        // target that needs this entry is absent from it, the object lacks it.
                        None => missing.push(format!(
                            "{}/{}: {} (no {target} code in the object)",
                            kind, l.module, l.entry
                        )),
                    }
                }
            }
            assert!(
                missing.is_empty(),
                "entries launchers can pick are missing:\n  {}",
                missing.join("\n  ")
            );
        }
        eprintln!("checked {checked} (entry, target) pairs");
    }
}
