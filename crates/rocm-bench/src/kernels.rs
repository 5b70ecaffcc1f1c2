//! `rocm-bench kernels`: the code objects rocm-kernels embedded in this build. Test binaries
//! built in the same profile with the same `ROCMFORGE_EMBED_PLATFORMS` carry the same tables
//! (`gpu-archive` builds both that way), so on a GPU host `.gpu/rocm-bench kernels` says what
//! the archived suite can launch, whatever `target/kernels` holds there.

use crate::Result;

pub fn run(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        return Err("usage: rocm-bench kernels".into());
    }
    println!("kernels embedded in this build (from {}):", rocm_kernels::embedded::KERNELS_DIR);
    for (platform, table) in
        [("amd", rocm_kernels::embedded::AMD), ("nvidia", rocm_kernels::embedded::NVIDIA)]
    {
        println!("  {platform}: {}", names(table));
    }
    Ok(())
}

/// The table's kernel file stems, comma-separated, or `none`.
fn names(table: &[(&str, &[u8])]) -> String {
    let list = table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    if list.is_empty() { "none".to_string() } else { list }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_listed_by_name_or_none() {
        assert_eq!(names(&[]), "none");
        assert_eq!(names(&[("rmsnorm", b"x"), ("softmax", b"")]), "rmsnorm, softmax");
    }
}
