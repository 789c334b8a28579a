//! GPU footprints (experimental): signature rows of every physical KV block,
//! updated on the GPU each engine step, and the footprints of the requests
//! whose prefill ends, summed on the GPU and handed to eldrd without a host
//! round trip (`eldr_gpu_*` in eldr.h).
//!
//! This crate has no CUDA dependency: device arrays are raw pointers the
//! engine's CUDA library gave it, and streams raw `cudaStream_t` handles. The
//! calls that take them are `unsafe`; the library still checks each pointer's
//! kind (device, managed or mapped pinned memory) before any kernel runs.

use std::ffi::c_void;
use std::ptr::NonNull;

use eldr_sys as sys;

use crate::client::{Client, RequestId};
use crate::error::{check, status, Error, Result};

/// Sticky overflow bits of [`GpuFootprints::take_errors`].
pub mod gpu_error {
    use eldr_sys as sys;
    /// An expert id < 0 or >= experts.
    pub const EXPERT_ID: u32 = sys::ELDR_GPU_ERR_EXPERT_ID as u32;
    /// A slot outside num_blocks * block_size.
    pub const SLOT: u32 = sys::ELDR_GPU_ERR_SLOT as u32;
    /// A block row cell would pass block_size.
    pub const BLOCK_ROW: u32 = sys::ELDR_GPU_ERR_BLOCK_ROW as u32;
    /// A request sum would pass 32767.
    pub const FOOTPRINT: u32 = sys::ELDR_GPU_ERR_FOOTPRINT as u32;
    /// A block table entry outside num_blocks.
    pub const BLOCK_ID: u32 = sys::ELDR_GPU_ERR_BLOCK_ID as u32;
}

/// Shape of the rows and the device they live on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuOptions {
    pub layers: u32,
    pub experts: u32,
    pub top_k: u32,
    /// KV block size in tokens, 1..=255.
    pub block_size: u32,
    /// Physical KV blocks: rows `[num_blocks][layers][experts]`.
    pub num_blocks: u32,
    /// Bound on the requests of one sum or push.
    pub max_requests_per_step: u32,
    /// CUDA device ordinal.
    pub device: i32,
}

impl GpuOptions {
    /// The library's defaults (block size 16, 256 requests per step, device 0)
    /// for a model of this shape and a KV cache of `num_blocks` blocks.
    pub fn new(layers: u32, experts: u32, top_k: u32, num_blocks: u32) -> GpuOptions {
        GpuOptions {
            layers,
            experts,
            top_k,
            block_size: 16,
            num_blocks,
            max_requests_per_step: 256,
            device: 0,
        }
    }
}

/// A `cudaStream_t`; [`CudaStream::LEGACY_DEFAULT`] is the null stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaStream(*mut c_void);

// SAFETY: a cudaStream_t may be used from any thread of its process.
unsafe impl Send for CudaStream {}
unsafe impl Sync for CudaStream {}

impl CudaStream {
    /// The legacy default stream (a null `cudaStream_t`).
    pub const LEGACY_DEFAULT: CudaStream = CudaStream(std::ptr::null_mut());

    /// # Safety
    /// `raw` must be a live `cudaStream_t` of this process's CUDA context for
    /// as long as calls use it.
    pub unsafe fn from_raw(raw: *mut c_void) -> CudaStream {
        CudaStream(raw)
    }

    pub fn as_raw(self) -> *mut c_void {
        self.0
    }
}

/// Router top-k expert ids on the device, as the engine produced them.
#[derive(Clone, Copy, Debug)]
pub enum ExpertIds {
    I32(*const i32),
    I64(*const i64),
}

/// Which layers one [`GpuFootprints::update_blocks`] call carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layers {
    /// Ids are `[tokens][layers][top_k]`.
    All,
    /// Ids are `[tokens][top_k]` of this layer (engines that hook each MoE layer).
    One(u32),
}

/// The GPU footprint path of one engine (one device, one KV cache).
///
/// The C handle is not thread-safe (its rows and scratch are shared state):
/// it is `Send` but not `Sync`, and every call takes `&mut self`. Dropping it
/// synchronises the device (hand-offs may be in flight; the engine's streams
/// are waited for too), then frees the device memory.
pub struct GpuFootprints {
    raw: NonNull<sys::eldr_gpu_footprints_t>,
    options: GpuOptions,
}

// SAFETY: the handle is not tied to the creating thread; calls need &mut self.
unsafe impl Send for GpuFootprints {}

impl GpuFootprints {
    /// Allocates the rows on `options.device`. Without a CUDA build of
    /// libeldr: `UNSUPPORTED`; without a usable device: `CUDA`; bad options:
    /// `INVALID_ARGUMENT` (checked before any device is touched).
    pub fn new(options: &GpuOptions) -> Result<GpuFootprints> {
        crate::ensure_abi()?;
        let raw_options = sys::eldr_gpu_options_t {
            version: sys::ELDR_GPU_OPTIONS_VERSION as u32,
            layers: options.layers,
            experts: options.experts,
            top_k: options.top_k,
            block_size: options.block_size,
            num_blocks: options.num_blocks,
            max_requests_per_step: options.max_requests_per_step,
            device: options.device,
            reserved: [0; 4],
        };
        let mut out: *mut sys::eldr_gpu_footprints_t = std::ptr::null_mut();
        // SAFETY: valid options and out-param.
        check(unsafe { sys::eldr_gpu_footprints_new(&raw_options, &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| {
            Error::new(
                status::INTERNAL,
                "the library reported success but returned no GPU footprints",
            )
        })?;
        Ok(GpuFootprints {
            raw,
            options: *options,
        })
    }

    pub fn options(&self) -> &GpuOptions {
        &self.options
    }

    /// One engine step: the token at block offset 0 resets its block's row
    /// first; partial blocks accumulate across steps. Enqueued on `stream`.
    ///
    /// # Safety
    /// `expert_ids` must point to `tokens * layers * top_k` ids ([`Layers::All`])
    /// or `tokens * top_k` ([`Layers::One`]), and `slot_mapping` to `tokens`
    /// int64 slots (negative: padding), in device-accessible memory that stays
    /// valid until `stream` has run the step.
    pub unsafe fn update_blocks(
        &mut self,
        expert_ids: ExpertIds,
        tokens: u32,
        layers: Layers,
        slot_mapping: *const i64,
        stream: CudaStream,
    ) -> Result<()> {
        let (ids, id_bytes) = match expert_ids {
            ExpertIds::I32(p) => (p as *const c_void, 4),
            ExpertIds::I64(p) => (p as *const c_void, 8),
        };
        let layer = match layers {
            Layers::All => -1,
            Layers::One(l) => i32::try_from(l).map_err(|_| {
                Error::new(status::OUT_OF_RANGE, format!("layer {} is out of range", l))
            })?,
        };
        check(sys::eldr_gpu_footprints_update_blocks(
            self.raw.as_ptr(),
            ids,
            id_bytes,
            tokens,
            layer,
            slot_mapping,
            stream.as_raw(),
        ))
    }

    /// Sums the rows of each request's blocks (int32 accumulate) into `out`,
    /// int16 `[requests][layers][experts]`. Enqueued on `stream`.
    ///
    /// # Safety
    /// `block_table` must point to int32 `[requests][max_blocks]`,
    /// `num_blocks` to int32 `[requests]` (device memory) and `out` to
    /// `requests * layers * experts` int16 in device or mapped pinned host
    /// memory, all valid until `stream` has run the sum.
    pub unsafe fn sum_requests(
        &mut self,
        block_table: *const i32,
        max_blocks: u32,
        num_blocks: *const i32,
        requests: u32,
        out: *mut i16,
        stream: CudaStream,
    ) -> Result<()> {
        check(sys::eldr_gpu_footprints_sum_requests(
            self.raw.as_ptr(),
            block_table,
            max_blocks,
            num_blocks,
            requests,
            out,
            stream.as_raw(),
        ))
    }

    /// Sums the footprints of `request_ids` (row r of the tables for id r)
    /// and writes them from the GPU into `client`'s ring, one record each,
    /// without waiting for the GPU. All or none: `RING_FULL` means nothing was
    /// enqueued (retry later). `client` must be this path's alone: while its
    /// hand-offs are in flight, its CPU pushes fail with `STATE`.
    ///
    /// # Safety
    /// As [`GpuFootprints::sum_requests`] for `block_table` and `num_blocks`
    /// with `requests = request_ids.len()`.
    pub unsafe fn push_requests(
        &mut self,
        client: &Client,
        request_ids: &[&str],
        block_table: *const i32,
        max_blocks: u32,
        num_blocks: *const i32,
        stream: CudaStream,
    ) -> Result<()> {
        let requests = u32::try_from(request_ids.len()).map_err(|_| {
            Error::new(
                status::INVALID_ARGUMENT,
                format!("{} request ids in one step", request_ids.len()),
            )
        })?;
        let ids = request_ids
            .iter()
            .map(|id| RequestId::new(id))
            .collect::<Result<Vec<_>>>()?;
        let pointers: Vec<_> = ids.iter().map(|id| id.as_ptr()).collect();
        check(sys::eldr_gpu_footprints_push_requests(
            self.raw.as_ptr(),
            client.raw(),
            pointers.as_ptr(),
            block_table,
            max_blocks,
            num_blocks,
            requests,
            stream.as_raw(),
        ))
    }

    /// Reads and clears the sticky [`gpu_error`] bits (synchronises `stream`).
    pub fn take_errors(&mut self, stream: CudaStream) -> Result<u32> {
        let mut flags = 0u32;
        // SAFETY: valid handle and out-param; a CudaStream is live by contract.
        check(unsafe {
            sys::eldr_gpu_footprints_take_errors(self.raw.as_ptr(), stream.as_raw(), &mut flags)
        })?;
        Ok(flags)
    }
}

impl Drop for GpuFootprints {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { sys::eldr_gpu_footprints_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for GpuFootprints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuFootprints")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}
