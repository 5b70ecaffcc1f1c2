//! The fixed header: magic, version, tensor count, metadata count.

use super::error::{GgufError, Result};
use super::limits::{MAX_METADATA_ENTRIES, MAX_TENSORS, MIN_KV_BYTES, MIN_TENSOR_INFO_BYTES};
use super::reader::Cursor;

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// The format versions read: 2 (64-bit counts and lengths) and 3 (adds big-endian files, which
/// look the same as version 2 when little-endian). Version 1 used 32-bit counts; no current
/// writer produces it.
pub const SUPPORTED_VERSIONS: [u32; 2] = [2, 3];

/// Header size in bytes: magic, version, two u64 counts.
pub const HEADER_BYTES: u64 = 4 + 4 + 8 + 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub tensor_count: u64,
    pub metadata_count: u64,
}

impl Header {
    pub(crate) fn read(cur: &mut Cursor<'_>) -> Result<Header> {
        let magic = cur.take(4, || "the magic".into())?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic { found: magic.to_vec() });
        }
        let version = cur.u32(|| "the version".into())?;
        if !SUPPORTED_VERSIONS.contains(&version) {
            // The magic is written byte by byte, so a big-endian file still starts with
            // "GGUF"; its version (a small number) then reads with its low bytes zero.
            let swapped = version.swap_bytes();
            if version & 0xFFFF == 0 && (1..=0xFFFF).contains(&swapped) {
                return Err(GgufError::BigEndian { raw: version, swapped });
            }
            return Err(GgufError::UnsupportedVersion { version });
        }
        let at = cur.pos();
        let tensor_count = cur.u64(|| "the tensor count".into())?;
        let metadata_count = cur.u64(|| "the metadata count".into())?;
        let remaining = cur.remaining();
        // Each entry takes some minimum number of bytes, so the rest of the file bounds both
        // counts before anything is allocated by them.
        check_count("tensors", tensor_count, MAX_TENSORS, at, remaining, MIN_TENSOR_INFO_BYTES)?;
        check_count(
            "metadata entries",
            metadata_count,
            MAX_METADATA_ENTRIES,
            at + 8,
            remaining,
            MIN_KV_BYTES,
        )?;
        let needed = tensor_count
            .checked_mul(MIN_TENSOR_INFO_BYTES)
            .and_then(|t| metadata_count.checked_mul(MIN_KV_BYTES).and_then(|m| m.checked_add(t)));
        if needed.is_none_or(|n| n > remaining) {
            return Err(GgufError::CountTooLarge {
                what: "tensors and metadata entries",
                count: tensor_count.saturating_add(metadata_count),
                offset: at,
                reason: format!("cannot fit in the {remaining} bytes after the header"),
            });
        }
        Ok(Header { version, tensor_count, metadata_count })
    }
}

fn check_count(
    what: &'static str,
    count: u64,
    max: u64,
    offset: u64,
    remaining: u64,
    each: u64,
) -> Result<()> {
    let reason = if count > max {
        format!("exceed the limit of {max}")
    } else if count.saturating_mul(each) > remaining {
        format!("cannot fit in the {remaining} bytes after the header (each takes at least {each})")
    } else {
        return Ok(());
    };
    Err(GgufError::CountTooLarge { what, count, offset, reason })
}
