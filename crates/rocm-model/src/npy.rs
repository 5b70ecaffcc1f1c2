//! A minimal NumPy `.npy` (format version 1.0) writer for little-endian f32 arrays (and i64
//! ones, for token ids).
//!
//! Layout: the magic `\x93NUMPY`, version bytes 1 and 0, a u16 little-endian header length,
//! then an ASCII Python dict literal (`descr`, `fortran_order`, `shape`) padded with spaces and
//! ended by `\n` so the data starts at a multiple of 64 bytes (what NumPy itself writes; the
//! format asks for a multiple of 16), then the data in C (row-major) order.

use std::io::{self, Write};

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// Alignment of the data's start.
const ALIGN: usize = 64;

/// The header (magic, version, length, dict) of an f32 array of `shape`.
fn header(shape: &[u64]) -> io::Result<Vec<u8>> {
    header_of("<f4", shape)
}

/// The header of an array of `shape` whose elements NumPy's `descr` names (`<f4`, `<i8`).
fn header_of(descr: &str, shape: &[u64]) -> io::Result<Vec<u8>> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    // A one-element tuple needs its trailing comma: `(5,)`.
    let tuple = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
    let unpadded = MAGIC.len() + 2 + 2 + dict.len() + 1;
    dict.extend(std::iter::repeat_n(' ', unpadded.next_multiple_of(ALIGN) - unpadded));
    dict.push('\n');
    let len = u16::try_from(dict.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "npy header longer than 65535 bytes"))?;
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + dict.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    Ok(out)
}

/// Writes `data` as an f32 array of `shape` (row-major; the product of `shape` must be
/// `data.len()`).
pub fn write_npy_f32(out: &mut impl Write, shape: &[u64], data: &[f32]) -> io::Result<()> {
    check_shape(shape, data.len())?;
    write_npy_f32_header(out, shape)?;
    write_f32_data(out, data)
}

/// Writes `data` as an i64 (`<i8`) array of `shape` (row-major; the product of `shape` must be
/// `data.len()`).
pub fn write_npy_i64(out: &mut impl Write, shape: &[u64], data: &[i64]) -> io::Result<()> {
    check_shape(shape, data.len())?;
    out.write_all(&header_of("<i8", shape)?)?;
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    out.write_all(&bytes)
}

/// Refuses a shape whose product is not `len`.
fn check_shape(shape: &[u64], len: usize) -> io::Result<()> {
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    if elements != Some(len as u64) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("shape {shape:?} does not hold {len} elements"),
        ));
    }
    Ok(())
}

/// Bytes of the `.npy` file of an f32 array of `shape`: header and data, or `None` past
/// `u64::MAX` (or for a header NumPy's format 1.0 cannot hold).
pub fn npy_f32_len(shape: &[u64]) -> Option<u64> {
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?;
    let header = header(shape).ok()?.len() as u64;
    elements.checked_mul(size_of::<f32>() as u64)?.checked_add(header)
}

/// Writes the header of an f32 array of `shape`, for a writer that then streams its values
/// with [`write_f32_data`], all `shape`'s product of them in row-major order.
pub fn write_npy_f32_header(out: &mut impl Write, shape: &[u64]) -> io::Result<()> {
    out.write_all(&header(shape)?)
}

/// Writes `data` as little-endian f32, the body of an `.npy` file after its header.
pub fn write_f32_data(out: &mut impl Write, data: &[f32]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(data.len().min(1 << 16) * 4);
    for chunk in data.chunks(1 << 16) {
        buf.clear();
        chunk.iter().for_each(|v| buf.extend_from_slice(&v.to_le_bytes()));
        out.write_all(&buf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_names_the_shape() {
        for shape in [&[][..], &[5], &[2, 3], &[4, 3, 2, 1]] {
            let n: u64 = shape.iter().product();
            let mut out = Vec::new();
            write_npy_f32(&mut out, shape, &vec![1.5; n as usize]).unwrap();
            let hlen = u16::from_le_bytes([out[8], out[9]]) as usize;
            assert_eq!((10 + hlen) % 64, 0);
            assert_eq!(out.len(), 10 + hlen + 4 * n as usize);
            let text = std::str::from_utf8(&out[10..10 + hlen]).unwrap();
            assert!(text.ends_with('\n'));
            let expect = match shape.len() {
                0 => "()".to_string(),
                1 => format!("({},)", shape[0]),
                _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
            };
            assert!(text.contains(&format!("'shape': {expect}")), "{text}");
            assert_eq!(&out[10 + hlen..10 + hlen + 4], &1.5f32.to_le_bytes());
        }
    }

    #[test]
    fn a_header_and_streamed_data_make_the_same_file() {
        let data: Vec<f32> = (0..200).map(|i| i as f32 * 0.5).collect();
        let mut whole = Vec::new();
        write_npy_f32(&mut whole, &[20, 10], &data).unwrap();
        let mut streamed = Vec::new();
        write_npy_f32_header(&mut streamed, &[20, 10]).unwrap();
        data.chunks(33).for_each(|c| write_f32_data(&mut streamed, c).unwrap());
        assert_eq!(streamed, whole);
        assert_eq!(npy_f32_len(&[20, 10]), Some(whole.len() as u64));
        assert_eq!(npy_f32_len(&[1 << 62, 4]), None, "2^64 data bytes");
        assert_eq!(npy_f32_len(&[1 << 32, 1 << 32]), None, "2^64 elements");
    }

    #[test]
    fn a_shape_that_does_not_match_is_refused() {
        assert!(write_npy_f32(&mut Vec::new(), &[2, 2], &[1.0; 3]).is_err());
        assert!(write_npy_f32(&mut Vec::new(), &[u64::MAX, 2], &[1.0; 3]).is_err());
        assert!(write_npy_i64(&mut Vec::new(), &[2, 2], &[1; 3]).is_err());
    }

    #[test]
    fn i64_arrays_are_little_endian_i8() {
        let mut out = Vec::new();
        write_npy_i64(&mut out, &[3], &[1, -2, 1 << 40]).unwrap();
        let hlen = u16::from_le_bytes([out[8], out[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let text = std::str::from_utf8(&out[10..10 + hlen]).unwrap();
        assert!(text.starts_with("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }"), "{text}");
        let data = &out[10 + hlen..];
        assert_eq!(data.len(), 24);
        assert_eq!(&data[8..16], &(-2i64).to_le_bytes());
        assert_eq!(&data[16..], &(1i64 << 40).to_le_bytes());
    }
}
