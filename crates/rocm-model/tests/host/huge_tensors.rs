//! A valid file whose tensor is larger than the host's memory (a sparse file: the data is a
//! hole). Every library path that would hold the tensor, or its f32 values, in memory refuses
//! with the tensor and the sizes instead of aborting the process (`gguf dump`, which streams,
//! is tested in `cli.rs`).

use crate::common::{TempDir, sparse_gguf};
use rocm_model::{GgmlType, GgufError, GgufFile, GgufWriter, WriteError};

/// Whether the kernel refuses an allocation larger than RAM and swap. It does under Linux's
/// default heuristic overcommit (mode 0) and under strict accounting (2); with overcommit
/// forced on (1) a reservation of terabytes succeeds and the copy is then killed by the OOM
/// killer, so the test cannot run there and says so.
fn huge_allocations_fail(test: &str) -> bool {
    match std::fs::read_to_string("/proc/sys/vm/overcommit_memory") {
        Ok(mode) if mode.trim() == "1" => {
            eprintln!("SKIP {test}: vm.overcommit_memory is 1, so allocations of terabytes succeed");
            false
        }
        _ => true,
    }
}

#[test]
fn a_tensor_larger_than_memory_is_refused_with_its_sizes() {
    if !huge_allocations_fail("a_tensor_larger_than_memory_is_refused_with_its_sizes") {
        return;
    }
    let dir = TempDir::new("huge");
    let path = dir.join("huge.gguf");
    // 2^41 F32 elements: 8 TiB of data (a hole), 8 TiB as f32.
    sparse_gguf(&path, "huge", &[1 << 20, 1 << 21], GgmlType::F32);
    let file = GgufFile::open(&path).unwrap();

    let e = file.to_f32("huge").unwrap_err();
    assert!(matches!(e, GgufError::HostAllocation { elements: 0x200_0000_0000, .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "tensor `huge`: its 2199023255552 elements as f32 take 8796093022208 B (8.00 TiB), more host \
         memory than could be allocated"
    );

    let e = GgufWriter::from_file(&file).unwrap_err();
    assert!(matches!(e, WriteError::HostAllocation { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "tensor `huge`: copying its 8796093022208 B (8.00 TiB) into memory failed: could not allocate"
    );

    // In pieces it can be walked (only the first is decoded here: the rest is 8 TiB of holes).
    let mut first = None;
    let e = file
        .to_f32_chunked("huge", 1 << 16, |piece| {
            first = Some(piece.len());
            Err(GgufError::NoSuchTensor { name: "enough".into() })
        })
        .unwrap_err();
    assert_eq!((first, e.to_string()), (Some(1 << 16), "no tensor named `enough`".to_string()));
}
