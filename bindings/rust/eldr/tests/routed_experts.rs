//! Routed-expert decoders through the safe API: SGLang and vLLM payloads
//! built here (ids, base64, .npy byte by byte) against a bincount.

use eldr::{
    footprint_from_ids, footprint_from_sglang, footprint_from_vllm, npy_shape, status, IdDtype,
    RoutedExpertsOptions,
};

const ROWS: usize = 29;
const HIDDEN: usize = 4;
const K: usize = 2;
const EXPERTS: u32 = 24;

fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((v >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn ids(seed: u64) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..ROWS * HIDDEN * K)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as u32 % EXPERTS
        })
        .collect()
}

fn bincount(ids: &[u32], moe: &[usize], rows: usize) -> Vec<i16> {
    let mut fp = vec![0i16; moe.len() * EXPERTS as usize];
    for r in 0..rows {
        for (l, &h) in moe.iter().enumerate() {
            for j in 0..K {
                fp[l * EXPERTS as usize + ids[(r * HIDDEN + h) * K + j] as usize] += 1;
            }
        }
    }
    fp
}

fn npy_u8(data: &[u8]) -> Vec<u8> {
    let mut dict = format!(
        "{{'descr': '|u1', 'fortran_order': False, 'shape': ({}, {}, {}), }}",
        ROWS, HIDDEN, K
    );
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.push((dict.len() & 0xff) as u8);
    out.push((dict.len() >> 8) as u8);
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn sglang_int32_prompt_rows() {
    let v = ids(1);
    let bytes: Vec<u8> = v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect();
    let opts = RoutedExpertsOptions {
        num_experts: EXPERTS,
        num_hidden_layers: HIDDEN as u32,
        top_k: K as u32,
        row_count: Some(20),
        ..Default::default()
    };
    let (fp, info) = footprint_from_sglang(&b64(&bytes), IdDtype::Int32, &opts).unwrap();
    assert_eq!(fp, bincount(&v, &[0, 1, 2, 3], 20));
    assert_eq!((info.rows_in_payload, info.rows_counted), (ROWS as u64, 20));
    let (raw, _) = footprint_from_ids(&bytes, IdDtype::Int32, &opts).unwrap();
    assert_eq!(raw, fp);
}

#[test]
fn vllm_npy_with_dense_layers() {
    let v = ids(2);
    let bytes: Vec<u8> = v.iter().map(|&x| x as u8).collect();
    let text = b64(&npy_u8(&bytes));
    let opts = RoutedExpertsOptions {
        num_experts: EXPERTS,
        moe_layers: vec![1, 3],
        ..Default::default()
    };
    let (fp, info) = footprint_from_vllm(&text, Some(IdDtype::Uint8), &opts).unwrap();
    assert_eq!(fp, bincount(&v, &[1, 3], ROWS));
    assert_eq!(info.layers, 2);
    // The layer axis from the header when the caller gives neither.
    let all = RoutedExpertsOptions {
        num_experts: EXPERTS,
        ..Default::default()
    };
    let (fp, info) = footprint_from_vllm(&text, None, &all).unwrap();
    assert_eq!(fp, bincount(&v, &[0, 1, 2, 3], ROWS));
    assert_eq!(info.num_hidden_layers, HIDDEN as u32);
    assert_eq!(npy_shape(&text).unwrap().rows_in_payload, ROWS as u64);
    let err = footprint_from_vllm(&text, Some(IdDtype::Uint16), &all).unwrap_err();
    assert_eq!(err.status(), status::SHAPE_MISMATCH);
}

#[test]
fn int16_cached_and_errors() {
    let vals: [i16; 4] = [-1, 3, -1, 0];
    let bytes: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
    let opts = RoutedExpertsOptions {
        num_experts: 4,
        num_hidden_layers: 1,
        top_k: 2,
        ..Default::default()
    };
    let (fp, info) = footprint_from_ids(&bytes, IdDtype::Int16, &opts).unwrap();
    assert_eq!(fp, vec![1, 0, 0, 1]);
    assert_eq!(info.cached_entries, 2);
    let err = footprint_from_sglang("AAA!", IdDtype::Uint8, &opts).unwrap_err();
    assert_eq!(err.status(), status::CORRUPT);
    assert!(err.message().contains("base64"), "{}", err.message());
    let err = footprint_from_ids(&[9, 0], IdDtype::Uint8, &opts).unwrap_err();
    assert_eq!(err.status(), status::OUT_OF_RANGE);
    assert!(IdDtype::from_name("float32").is_err());
    assert_eq!(IdDtype::from_name("uint16").unwrap(), IdDtype::Uint16);
}
