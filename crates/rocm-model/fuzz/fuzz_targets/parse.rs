//! Fuzzes the GGUF parser with arbitrary bytes. Beyond "never panics, never allocates without
//! bound" (libFuzzer's malloc and RSS limits catch the latter), it checks what a file that
//! parses promises:
//! - every tensor's bytes are in the file and as long as its info says;
//! - lookups by name find the same infos; decoding gives one f32 per element;
//! - writing the parsed file back gives a file that parses to the same tensors, and writing
//!   that one again gives the same bytes (nothing is lost or invented by a round trip).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocm_model::{GgufFile, GgufWriter};

fn rewrite(file: &GgufFile) -> GgufWriter {
    GgufWriter::from_file(file).expect("the writer accepts what the reader accepted")
}

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else { return };
    for t in file.tensors() {
        assert_eq!(file.tensor_bytes(t).len() as u64, t.n_bytes());
        assert_eq!(file.tensor(t.name()).unwrap(), t);
        assert_eq!(t.file_offset(), file.data_offset() + t.data_offset());
        assert_eq!(t.data_offset() % u64::from(file.alignment()), 0);
        // Decoding allocates 4 bytes per element; bound it so big (but valid) sparse files
        // stay within the fuzzer's memory limit.
        if t.n_elements() <= 1 << 20 {
            if let Ok(values) = file.to_f32(t.name()) {
                assert_eq!(values.len() as u64, t.n_elements());
            }
        }
    }
    for (_, value) in file.metadata().iter() {
        let _ = value.preview(4, 32);
    }
    let once = rewrite(&file).to_bytes();
    let again = GgufFile::from_bytes(once.clone()).expect("a rewritten file parses");
    assert_eq!(again.tensors().len(), file.tensors().len());
    for (a, b) in again.tensors().iter().zip(file.tensors()) {
        assert_eq!((a.name(), a.ggml_type(), a.dims()), (b.name(), b.ggml_type(), b.dims()));
        assert_eq!(again.tensor_bytes(a), file.tensor_bytes(b));
    }
    assert_eq!(again.metadata().len(), file.metadata().len());
    assert_eq!(rewrite(&again).to_bytes(), once);
});
