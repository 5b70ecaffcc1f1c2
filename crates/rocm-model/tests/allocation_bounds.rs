//! The reader never allocates by a length the file does not back: crafted headers that claim
//! huge strings, arrays and counts are refused before any large allocation. Measured with a
//! global allocator that records the largest request made while a parse runs on this thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rocm_model::GgufFile;

struct Recording;

thread_local! {
    static RECORDING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: allocations during thread teardown must not touch destroyed thread-locals.
    let _ = RECORDING.try_with(|on| {
        if on.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
            let _ = TOTAL.try_with(|t| t.set(t.get() + size));
        }
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; recording only reads the
// size and touches const-initialised thread-locals, which do not allocate.
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Recording = Recording;

/// Parses `bytes`; returns whether it parsed, the largest allocation the parse made and the
/// sum of all its allocations (an upper bound of its peak memory).
fn measured(bytes: &[u8]) -> (bool, usize, usize) {
    LARGEST.with(|l| l.set(0));
    TOTAL.with(|t| t.set(0));
    RECORDING.with(|r| r.set(true));
    let ok = GgufFile::check(bytes).is_ok();
    RECORDING.with(|r| r.set(false));
    (ok, LARGEST.with(Cell::get), TOTAL.with(Cell::get))
}

fn parse_measured(bytes: &[u8]) -> (bool, usize) {
    let (ok, largest, _) = measured(bytes);
    (ok, largest)
}

fn header(tensors: u64, kv: u64) -> Vec<u8> {
    [&b"GGUF"[..], &3u32.to_le_bytes(), &tensors.to_le_bytes(), &kv.to_le_bytes()].concat()
}

/// One metadata entry `k` of type `ty` whose encoded value starts with `value`.
fn entry(ty: u32, value: &[u8]) -> Vec<u8> {
    [&1u64.to_le_bytes()[..], b"k", &ty.to_le_bytes(), value].concat()
}

fn array(elem: u32, len: u64) -> Vec<u8> {
    [&elem.to_le_bytes()[..], &len.to_le_bytes()].concat()
}

#[test]
fn crafted_lengths_cause_no_large_allocation() {
    let filler = vec![0u8; 200];
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a 16 MiB string value",
            [header(0, 1), entry(8, &(16u64 << 20).to_le_bytes()), filler.clone()].concat(),
        ),
        ("a 1 KiB key", [header(0, 1), 1024u64.to_le_bytes().to_vec(), filler.clone()].concat()),
        ("2^20 metadata entries", [header(0, 1 << 20), filler.clone()].concat()),
        ("2^20 tensors", [header(1 << 20, 0), filler.clone()].concat()),
        ("u64::MAX tensors", [header(u64::MAX, 0), filler.clone()].concat()),
    ];
    // 2^24 elements of every type: the limit, in a file of a few hundred bytes.
    for elem in 0..13u32 {
        cases.push((
            "an array of 2^24 elements",
            [header(0, 1), entry(9, &array(elem, 1 << 24)), filler.clone()].concat(),
        ));
    }
    // An array of 15 strings, each claiming 16 MiB.
    let mut strings = [header(0, 1), entry(9, &array(8, 15))].concat();
    for _ in 0..15 {
        strings.extend_from_slice(&(16u64 << 20).to_le_bytes());
    }
    cases.push(("strings claiming 16 MiB each", strings));
    // A tensor name claiming 1 KiB, four dims.
    cases.push(("a tensor info", [header(1, 0), 1000u64.to_le_bytes().to_vec(), filler.clone()].concat()));

    for (what, bytes) in &cases {
        let (ok, largest) = parse_measured(bytes);
        assert!(!ok, "{what}: parsed");
        assert!(largest <= 4096, "{what}: a {}-byte file made a {largest}-byte allocation", bytes.len());
    }
}

#[test]
fn allocations_stay_within_a_small_multiple_of_the_file() {
    // The worst ratios a valid file can force: many one-byte elements, many empty strings
    // (8 bytes in the file, a 24-byte String in memory), many empty nested arrays, many
    // minimal metadata entries and tensor infos (unique three-byte names).
    let n = 100_000u64;
    let mut u8s = [header(0, 1), entry(9, &array(0, n))].concat();
    u8s.resize(u8s.len() + n as usize, 7);
    let mut strings = [header(0, 1), entry(9, &array(8, n))].concat();
    strings.resize(strings.len() + 8 * n as usize, 0);
    let mut arrays = [header(0, 1), entry(9, &array(9, n))].concat();
    for _ in 0..n {
        arrays.extend(array(0, 0));
    }
    // Three printable characters: 64^3 unique names.
    let name = |i: u64| {
        let digit = |k: u64| b'0' + ((i >> (6 * k)) & 63) as u8;
        [&3u64.to_le_bytes()[..], &[digit(0), digit(1), digit(2)]].concat()
    };
    let mut entries = header(0, n);
    for i in 0..n {
        entries.extend([name(i), 0u32.to_le_bytes().to_vec(), vec![1]].concat());
    }
    let mut infos = header(n, 0);
    for i in 0..n {
        // One dimension of 0 elements, F32, offset 0: empty tensors, so no data is needed.
        infos.extend(
            [
                name(i),
                1u32.to_le_bytes().to_vec(),
                0u64.to_le_bytes().to_vec(),
                0u32.to_le_bytes().to_vec(),
                0u64.to_le_bytes().to_vec(),
            ]
            .concat(),
        );
    }
    infos.resize(infos.len().next_multiple_of(32), 0); // where the (empty) data section starts
    for (what, bytes) in [
        ("u8s", u8s),
        ("empty strings", strings),
        ("empty arrays", arrays),
        ("entries", entries),
        ("tensor infos", infos),
    ] {
        let (ok, largest, total) = measured(&bytes);
        assert!(ok, "{what}: refused");
        let len = bytes.len();
        assert!(largest <= 4 * len, "{what}: a {len}-byte file made a {largest}-byte allocation");
        assert!(total <= 16 * len, "{what}: a {len}-byte file made {total} bytes of allocations");
        eprintln!("{what}: {len} bytes in the file, largest allocation {largest}, all allocations {total}");
    }
}
