//! The bounds the reader enforces, and why each is where it is.
//!
//! A GGUF header is untrusted input: every count and length in it is a 64-bit number an
//! attacker (or a truncated download) chooses. The reader never allocates by such a number
//! before it has checked that the bytes it describes are present in the file, and it refuses
//! values no real model needs, so a crafted file costs at most a small multiple of its own
//! size in memory and time. `docs/gguf.md` lists the same limits with their reasons.

/// Dimensions a tensor may have: ggml's `GGML_MAX_DIMS`. GGUF stores `n_dims` as a `u32`; a
/// reader that trusts it indexes past a four-element shape array.
pub const MAX_DIMS: usize = 4;

/// Bytes in a metadata key or a tensor name. ggml itself keeps tensor names below
/// `GGML_MAX_NAME` (64) bytes; keys are dotted paths of a few dozen bytes. 1 KiB leaves room for
/// other tools' naming without letting a name be a megabyte.
pub const MAX_NAME_BYTES: u64 = 1024;

/// Bytes in one metadata string value. The largest real ones are chat templates (tens of KiB)
/// and licence texts.
pub const MAX_STRING_BYTES: u64 = 16 << 20;

/// Elements in one metadata array. The largest real arrays are tokenizer vocabularies and
/// merge lists, a few hundred thousand entries.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;

/// Levels of arrays inside arrays (a top-level array is level 1). Real files use one level;
/// the format allows any, and a reader that recurses without a bound overflows its stack.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Tensors in one file. Large mixture-of-experts models hold a few thousand.
pub const MAX_TENSORS: u64 = 1 << 20;

/// Metadata entries in one file. Real files hold a few dozen.
pub const MAX_METADATA_ENTRIES: u64 = 1 << 20;

/// `general.alignment` when the key is absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u32 = 32;

/// The largest `general.alignment` accepted. Alignment beyond a huge page buys nothing, and an
/// enormous one turns the padding before the data section into an overflow.
pub const MAX_ALIGNMENT: u32 = 1 << 20;

/// Smallest encoding of one metadata entry: key length (8), value type (4), a one-byte value.
pub(crate) const MIN_KV_BYTES: u64 = 8 + 4 + 1;

/// Smallest encoding of one tensor info: name length (8), `n_dims` (4), type (4), offset (8).
pub(crate) const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// Checks a `general.alignment` value, returning why it is refused.
pub(crate) fn check_alignment(value: u64) -> Result<u32, &'static str> {
    if value == 0 {
        Err("alignment must not be zero")
    } else if !value.is_power_of_two() {
        Err("alignment must be a power of two")
    } else if value > u64::from(MAX_ALIGNMENT) {
        Err("alignment exceeds the limit of 1 MiB")
    } else {
        // In range of u32: at most MAX_ALIGNMENT.
        Ok(value as u32)
    }
}
