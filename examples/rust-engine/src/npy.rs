//! Strict reader for int16 (N, L, E) NumPy .npy files: every header field is
//! checked and the payload must match the shape exactly.

use std::fmt;
use std::io::Read;

/// Footprints of `requests` requests, each `[layers][experts]`, row-major.
pub struct FootprintFile {
    pub requests: usize,
    pub layers: u32,
    pub experts: u32,
    pub counts: Vec<i16>,
}

#[derive(Debug)]
pub struct NpyError(String);

impl fmt::Display for NpyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(message: impl Into<String>) -> Result<T, NpyError> {
    Err(NpyError(message.into()))
}

const MAX_HEADER_BYTES: usize = 1 << 16;

pub fn read(path: &str) -> Result<FootprintFile, NpyError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| NpyError(format!("{}: {}", path, e)))?;
    parse(&bytes).map_err(|e| NpyError(format!("{}: {}", path, e)))
}

fn parse(bytes: &[u8]) -> Result<FootprintFile, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return err("not a .npy file (bad magic)");
    }
    let (header_len, data_offset) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        2 | 3 => return err("truncated header"),
        v => return err(format!("unsupported .npy version {}", v)),
    };
    if header_len == 0 || header_len > MAX_HEADER_BYTES || bytes.len() < data_offset + header_len {
        return err("truncated or oversized header");
    }
    let header = std::str::from_utf8(&bytes[data_offset..data_offset + header_len])
        .map_err(|_| NpyError("header is not text".into()))?;
    if dict_value(header, "descr").map_or(true, |v| !v.starts_with("'<i2'")) {
        return err("dtype must be little-endian int16 ('<i2')");
    }
    if dict_value(header, "fortran_order").map_or(true, |v| !v.starts_with("False")) {
        return err("array must be in C order (fortran_order False)");
    }
    let dims = dict_value(header, "shape")
        .and_then(parse_shape)
        .ok_or_else(|| NpyError("shape must be three positive integers (N, L, E)".into()))?;
    let (layers, experts) = match (u32::try_from(dims[1]), u32::try_from(dims[2])) {
        (Ok(l), Ok(e)) => (l, e),
        _ => return err("layers or experts out of range"),
    };
    let cells = dims[0]
        .checked_mul(dims[1])
        .and_then(|c| c.checked_mul(dims[2]))
        .and_then(|c| usize::try_from(c).ok())
        .ok_or_else(|| NpyError("shape too large".into()))?;
    let payload = &bytes[data_offset + header_len..];
    if Some(payload.len()) != cells.checked_mul(2) {
        return err(format!(
            "payload is {} bytes, shape ({}, {}, {}) needs {}",
            payload.len(),
            dims[0],
            dims[1],
            dims[2],
            cells as u128 * 2
        ));
    }
    let counts = payload
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect();
    Ok(FootprintFile {
        requests: dims[0] as usize,
        layers,
        experts,
        counts,
    })
}

/// The text after `'key':` in the header dict, spaces skipped.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let quoted = format!("'{}'", key);
    let rest = header[header.find(&quoted)? + quoted.len()..].trim_start();
    Some(rest.strip_prefix(':')?.trim_start())
}

/// "(N, L, E)" with three positive integers (a trailing comma is fine).
fn parse_shape(text: &str) -> Option<[u64; 3]> {
    let inner = text.strip_prefix('(')?;
    let inner = &inner[..inner.find(')')?];
    let parts: Vec<&str> = inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if parts.len() != 3 {
        return None;
    }
    let mut dims = [0u64; 3];
    for (d, p) in dims.iter_mut().zip(parts) {
        *d = p.parse().ok().filter(|&v| v > 0)?;
    }
    Some(dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(header: &str, payload: &[u8]) -> Vec<u8> {
        let mut h = header.to_string();
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((h.len() as u16).to_le_bytes());
        out.extend(h.as_bytes());
        out.extend(payload);
        out
    }

    #[test]
    fn reads_a_valid_file() {
        let payload: Vec<u8> = (0..12i16).flat_map(|v| v.to_le_bytes()).collect();
        let sut = parse(&npy(
            "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3, 2), }",
            &payload,
        ))
        .unwrap();
        assert_eq!((sut.requests, sut.layers, sut.experts), (2, 3, 2));
        assert_eq!(sut.counts, (0..12).collect::<Vec<i16>>());
    }

    #[test]
    fn rejects_wrong_dtype_order_shape_and_size() {
        let ok = "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 1, 2), }";
        assert!(parse(&npy(ok, &[0; 4])).is_ok());
        for (header, payload) in [
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2), }",
                4,
            ),
            (
                "{'descr': '<i2', 'fortran_order': True, 'shape': (1, 1, 2), }",
                4,
            ),
            (
                "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 2), }",
                4,
            ),
            (
                "{'descr': '<i2', 'fortran_order': False, 'shape': (0, 1, 2), }",
                0,
            ),
            (ok, 3),
            (ok, 6),
        ] {
            assert!(
                parse(&npy(header, &vec![0; payload])).is_err(),
                "{} {}",
                header,
                payload
            );
        }
        assert!(parse(b"\x93NUMPY").is_err());
        assert!(parse(b"garbage").is_err());
    }
}
