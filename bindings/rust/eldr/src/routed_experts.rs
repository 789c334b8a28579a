//! Footprints from stock engines' routed-expert payloads: SGLang's base64 raw
//! ids (`meta_info.routed_experts`) and vLLM's base64 `.npy`
//! (`choices[i].routed_experts`), counted into int16 `[layers][experts]`.

use std::ptr;

use eldr_sys as sys;

use crate::error::{check, status, Error, Result};

/// Element type of expert ids. `Int16` reserves -1 for a prefix-cache hit:
/// skipped, and counted in [`RoutedExpertsInfo::cached_entries`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdDtype {
    Uint8,
    Uint16,
    Int16,
    Int32,
    Int64,
}

impl IdDtype {
    fn to_raw(self) -> u32 {
        (match self {
            IdDtype::Uint8 => sys::ELDR_DTYPE_UINT8,
            IdDtype::Uint16 => sys::ELDR_DTYPE_UINT16,
            IdDtype::Int16 => sys::ELDR_DTYPE_INT16,
            IdDtype::Int32 => sys::ELDR_DTYPE_INT32,
            IdDtype::Int64 => sys::ELDR_DTYPE_INT64,
        }) as u32
    }

    fn from_raw(raw: u32) -> Option<IdDtype> {
        match raw as i32 {
            sys::ELDR_DTYPE_UINT8 => Some(IdDtype::Uint8),
            sys::ELDR_DTYPE_UINT16 => Some(IdDtype::Uint16),
            sys::ELDR_DTYPE_INT16 => Some(IdDtype::Int16),
            sys::ELDR_DTYPE_INT32 => Some(IdDtype::Int32),
            sys::ELDR_DTYPE_INT64 => Some(IdDtype::Int64),
            _ => None,
        }
    }

    /// SGLang's `meta_info.routed_experts_dtype` names: "uint8", "int32", ...
    pub fn from_name(name: &str) -> Result<IdDtype> {
        match name {
            "uint8" => Ok(IdDtype::Uint8),
            "uint16" => Ok(IdDtype::Uint16),
            "int16" => Ok(IdDtype::Int16),
            "int32" => Ok(IdDtype::Int32),
            "int64" => Ok(IdDtype::Int64),
            _ => Err(Error::new(
                status::INVALID_ARGUMENT,
                format!(
                    "unknown routed_experts_dtype '{}' (uint8, uint16, int16, int32, int64)",
                    name
                ),
            )),
        }
    }
}

/// What to count. `num_hidden_layers` and `top_k` are the payload's axes:
/// required for raw ids; for a `.npy`, 0 takes them from its shape and a
/// nonzero value must match it.
#[derive(Clone, Debug, Default)]
pub struct RoutedExpertsOptions {
    pub num_experts: u32,
    pub num_hidden_layers: u32,
    pub top_k: u32,
    /// Hidden layers that are MoE layers, ascending and unique; empty = all.
    pub moe_layers: Vec<u32>,
    /// Count rows `[first_row, first_row + row_count)`; `None` = to the end.
    pub first_row: u64,
    pub row_count: Option<u64>,
}

/// What a decode saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutedExpertsInfo {
    pub dtype: Option<IdDtype>,
    pub num_hidden_layers: u32,
    pub top_k: u32,
    /// Footprint layers (the MoE layers).
    pub layers: u32,
    pub rows_in_payload: u64,
    pub rows_counted: u64,
    /// int16 -1 (prefix-cache) entries skipped in the counted rows.
    pub cached_entries: u64,
}

fn raw_options(o: &RoutedExpertsOptions) -> Result<sys::eldr_routed_experts_options_t> {
    let mut raw: sys::eldr_routed_experts_options_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a struct of the right type.
    unsafe { sys::eldr_routed_experts_options_init(&mut raw) };
    raw.num_experts = o.num_experts;
    raw.num_hidden_layers = o.num_hidden_layers;
    raw.top_k = o.top_k;
    if !o.moe_layers.is_empty() {
        raw.moe_layers = o.moe_layers.as_ptr();
        raw.num_moe_layers = u32::try_from(o.moe_layers.len())
            .map_err(|_| Error::new(status::INVALID_ARGUMENT, "more than 2^32 moe_layers"))?;
    }
    raw.first_row = o.first_row;
    raw.row_count = o.row_count.unwrap_or(u64::MAX);
    Ok(raw)
}

/// Footprint cells for these options when the payload's layer axis is known.
fn cells(o: &RoutedExpertsOptions, hidden_layers: u32) -> usize {
    let layers = if o.moe_layers.is_empty() {
        hidden_layers as usize
    } else {
        o.moe_layers.len()
    };
    layers * o.num_experts as usize
}

type Call<'a> = dyn FnMut(
        &sys::eldr_routed_experts_options_t,
        *mut i16,
        usize,
        *mut sys::eldr_routed_experts_info_t,
    ) -> i32
    + 'a;

fn run(
    o: &RoutedExpertsOptions,
    out_cells: usize,
    call: &mut Call<'_>,
) -> Result<(Vec<i16>, RoutedExpertsInfo)> {
    crate::ensure_abi()?;
    let raw = raw_options(o)?;
    let mut out = vec![0i16; out_cells];
    let mut info: sys::eldr_routed_experts_info_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a struct of the right type.
    unsafe { sys::eldr_routed_experts_info_init(&mut info) };
    let ptr_out = if out.is_empty() {
        ptr::NonNull::<i16>::dangling().as_ptr()
    } else {
        out.as_mut_ptr()
    };
    check(call(&raw, ptr_out, out.len(), &mut info))?;
    Ok((
        out,
        RoutedExpertsInfo {
            dtype: IdDtype::from_raw(info.dtype),
            num_hidden_layers: info.num_hidden_layers,
            top_k: info.top_k,
            layers: info.layers,
            rows_in_payload: info.rows_in_payload,
            rows_counted: info.rows_counted,
            cached_entries: info.cached_entries,
        },
    ))
}

/// Raw little-endian ids `[rows][num_hidden_layers][top_k]` of `dtype`.
pub fn footprint_from_ids(
    ids: &[u8],
    dtype: IdDtype,
    options: &RoutedExpertsOptions,
) -> Result<(Vec<i16>, RoutedExpertsInfo)> {
    let n = cells(options, options.num_hidden_layers);
    run(options, n, &mut |raw, out, len, info| {
        // SAFETY: ids and out are live slices of the given lengths; the
        // options' moe_layers pointer borrows `options` for this call.
        unsafe {
            sys::eldr_routed_experts_decode_ids(
                ids.as_ptr().cast(),
                ids.len(),
                dtype.to_raw(),
                raw,
                out,
                len,
                info,
            )
        }
    })
}

/// SGLang: `meta_info.routed_experts` (base64 raw ids of `dtype`, from
/// `meta_info.routed_experts_dtype`, default int32).
pub fn footprint_from_sglang(
    base64: &str,
    dtype: IdDtype,
    options: &RoutedExpertsOptions,
) -> Result<(Vec<i16>, RoutedExpertsInfo)> {
    let n = cells(options, options.num_hidden_layers);
    run(options, n, &mut |raw, out, len, info| {
        // SAFETY: as footprint_from_ids; the text is passed with its length.
        unsafe {
            sys::eldr_routed_experts_decode_base64_ids(
                base64.as_ptr().cast(),
                base64.len(),
                dtype.to_raw(),
                raw,
                out,
                len,
                info,
            )
        }
    })
}

/// vLLM: `choices[i].routed_experts` (a base64 `.npy`). `expected`: the dtype
/// the `.npy` must have, or `None` for any. Without `num_hidden_layers` and
/// `moe_layers`, the layer count comes from the `.npy` header, read first.
pub fn footprint_from_vllm(
    base64_npy: &str,
    expected: Option<IdDtype>,
    options: &RoutedExpertsOptions,
) -> Result<(Vec<i16>, RoutedExpertsInfo)> {
    let dtype = expected
        .map(IdDtype::to_raw)
        .unwrap_or(sys::ELDR_DTYPE_AUTO as u32);
    let mut call = |raw: &sys::eldr_routed_experts_options_t,
                    out: *mut i16,
                    len: usize,
                    info: *mut sys::eldr_routed_experts_info_t| {
        // SAFETY: as footprint_from_sglang.
        unsafe {
            sys::eldr_routed_experts_decode_base64_npy(
                base64_npy.as_ptr().cast(),
                base64_npy.len(),
                dtype,
                raw,
                out,
                len,
                info,
            )
        }
    };
    if options.num_hidden_layers != 0 || !options.moe_layers.is_empty() {
        let n = cells(options, options.num_hidden_layers);
        return run(options, n, &mut call);
    }
    // The layer axis is the .npy's: read its header first to size the output.
    let shape = npy_shape(base64_npy)?;
    run(options, cells(options, shape.num_hidden_layers), &mut call)
}

/// The header of a base64 `.npy` alone (dtype, rows and axes; nothing counted).
pub fn npy_shape(base64_npy: &str) -> Result<RoutedExpertsInfo> {
    crate::ensure_abi()?;
    let mut info: sys::eldr_routed_experts_info_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; the text is passed with its length.
    unsafe {
        sys::eldr_routed_experts_info_init(&mut info);
        check(sys::eldr_routed_experts_inspect_base64_npy(
            base64_npy.as_ptr().cast(),
            base64_npy.len(),
            &mut info,
        ))?;
    }
    Ok(RoutedExpertsInfo {
        dtype: IdDtype::from_raw(info.dtype),
        num_hidden_layers: info.num_hidden_layers,
        top_k: info.top_k,
        layers: info.layers,
        rows_in_payload: info.rows_in_payload,
        rows_counted: info.rows_counted,
        cached_entries: info.cached_entries,
    })
}
