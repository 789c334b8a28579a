//! Cluster tables: fitted from calibration footprints, saved and loaded as files.

use std::ffi::CString;
use std::path::Path;
use std::ptr::NonNull;

use eldr_sys as sys;

use crate::error::{check, status, Error, Result};
use crate::footprint::{checked_cells, Footprint};
use crate::prompt::{PredictorInfo, PredictorOptions, Prompt};

/// Shape and parameters of a cluster table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TableInfo {
    pub layers: u32,
    pub experts: u32,
    pub top_k: u32,
    /// Clusters = decode workers.
    pub num_workers: u32,
    pub num_selected_layers: u32,
    pub default_tau: f32,
}

/// Options of [`Table::fit`]. `num_workers` is required; the rest default to
/// the library's values (`eldr_fit_options_init`).
#[derive(Clone, Copy, Debug)]
pub struct FitOptions {
    pub num_workers: u32,
    pub seed: u64,
    /// Greedy layer selection (needs decode counts).
    pub select_layers: bool,
    pub max_iterations: u32,
    /// 0 = all cores.
    pub threads: u32,
}

impl FitOptions {
    pub fn new(num_workers: u32) -> FitOptions {
        let mut raw = std::mem::MaybeUninit::<sys::eldr_fit_options_t>::zeroed();
        // SAFETY: init writes every field of the struct it is given.
        let raw = unsafe {
            sys::eldr_fit_options_init(raw.as_mut_ptr());
            raw.assume_init()
        };
        FitOptions {
            num_workers,
            seed: raw.seed,
            select_layers: raw.select_layers != 0,
            max_iterations: raw.max_iterations,
            threads: raw.threads,
        }
    }

    fn to_raw(self) -> sys::eldr_fit_options_t {
        let mut raw = std::mem::MaybeUninit::<sys::eldr_fit_options_t>::zeroed();
        // SAFETY: as in new().
        let mut raw = unsafe {
            sys::eldr_fit_options_init(raw.as_mut_ptr());
            raw.assume_init()
        };
        raw.num_workers = self.num_workers;
        raw.seed = self.seed;
        raw.select_layers = self.select_layers as u32;
        raw.max_iterations = self.max_iterations;
        raw.threads = self.threads;
        raw
    }
}

/// Calibration footprints for [`Table::fit`]: `n` requests, each
/// `[layers][experts]` int16 counts, row-major, concatenated.
#[derive(Clone, Copy, Debug)]
pub struct Calibration<'a> {
    pub prefill: &'a [i16],
    /// Decode-phase counts of the same requests (enables layer selection).
    pub decode: Option<&'a [i16]>,
    pub n: u64,
    pub layers: u32,
    pub experts: u32,
    /// Experts per token of the model.
    pub top_k: u32,
}

/// An immutable cluster table. Safe to share between threads; a
/// [`Router`](crate::Router) keeps its own reference, so the table may be
/// dropped once routers are built.
pub struct Table {
    raw: NonNull<sys::eldr_table_t>,
}

// SAFETY: eldr_table_t is immutable once created (eldr.h, thread safety).
unsafe impl Send for Table {}
unsafe impl Sync for Table {}

impl Table {
    /// Loads and verifies a cluster table file.
    pub fn load(path: impl AsRef<Path>) -> Result<Table> {
        crate::ensure_abi()?;
        let path = path_to_cstring(path.as_ref())?;
        let mut out: *mut sys::eldr_table_t = std::ptr::null_mut();
        // SAFETY: path is NUL-terminated; out is a valid out-param.
        check(unsafe { sys::eldr_table_load(path.as_ptr(), &mut out) })?;
        Table::from_out(out)
    }

    /// Fits a table from calibration footprints (balanced k-means on signatures).
    pub fn fit(data: &Calibration<'_>, options: &FitOptions) -> Result<Table> {
        crate::ensure_abi()?;
        let cells = checked_cells(data.n, data.layers, data.experts)?;
        let check_len = |what: &str, len: usize| {
            if len == cells {
                Ok(())
            } else {
                Err(Error::new(
                    status::INVALID_ARGUMENT,
                    format!(
                        "{} holds {} counts, [{}][{}][{}] needs {}",
                        what, len, data.n, data.layers, data.experts, cells
                    ),
                ))
            }
        };
        check_len("prefill", data.prefill.len())?;
        if let Some(decode) = data.decode {
            check_len("decode", decode.len())?;
        }
        let raw_options = options.to_raw();
        let decode_ptr = data.decode.map_or(std::ptr::null(), |d| d.as_ptr());
        let mut out: *mut sys::eldr_table_t = std::ptr::null_mut();
        // SAFETY: both arrays hold n*layers*experts counts (checked above).
        check(unsafe {
            sys::eldr_table_fit(
                data.prefill.as_ptr(),
                decode_ptr,
                data.n,
                data.layers,
                data.experts,
                data.top_k,
                &raw_options,
                &mut out,
            )
        })?;
        Table::from_out(out)
    }

    fn from_out(out: *mut sys::eldr_table_t) -> Result<Table> {
        NonNull::new(out).map(|raw| Table { raw }).ok_or_else(|| {
            Error::new(
                status::INTERNAL,
                "the library reported success but returned no table",
            )
        })
    }

    /// Writes the table atomically (temporary file + rename).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_to_cstring(path.as_ref())?;
        // SAFETY: valid handle and NUL-terminated path.
        check(unsafe { sys::eldr_table_save(self.raw.as_ptr(), path.as_ptr()) })
    }

    pub fn info(&self) -> Result<TableInfo> {
        let raw = std::mem::MaybeUninit::<sys::eldr_table_info_t>::zeroed();
        // SAFETY: zeroed is a valid eldr_table_info_t; version set before the call.
        let mut raw = unsafe { raw.assume_init() };
        raw.version = sys::ELDR_TABLE_INFO_VERSION as u32;
        // SAFETY: valid handle and out struct.
        check(unsafe { sys::eldr_table_get_info(self.raw.as_ptr(), &mut raw) })?;
        Ok(TableInfo {
            layers: raw.layers,
            experts: raw.experts,
            top_k: raw.top_k,
            num_workers: raw.num_workers,
            num_selected_layers: raw.num_selected_layers,
            default_tau: raw.default_tau,
        })
    }

    /// Worker id owning each cluster, in cluster order.
    pub fn worker_ids(&self) -> Result<Vec<i32>> {
        let n = self.info()?.num_workers;
        let mut ids = vec![0i32; n as usize];
        // SAFETY: ids holds n entries.
        check(unsafe { sys::eldr_table_get_worker_ids(self.raw.as_ptr(), ids.as_mut_ptr(), n) })?;
        Ok(ids)
    }

    /// The request's signature: count * IDF over the selected layers, unit L2.
    pub fn signature(&self, footprint: &Footprint<'_>) -> Result<Vec<f32>> {
        let info = self.info()?;
        let n = info.num_selected_layers as usize * info.experts as usize;
        let mut out = vec![0f32; n];
        // SAFETY: the footprint's slice matches its shape; out holds n floats.
        check(unsafe {
            sys::eldr_table_compute_signature(
                self.raw.as_ptr(),
                footprint.counts().as_ptr(),
                footprint.layers(),
                footprint.experts(),
                out.as_mut_ptr(),
                n as u64,
            )
        })?;
        Ok(out)
    }

    /// Similarity to each cluster centroid, in cluster order.
    pub fn scores(&self, footprint: &Footprint<'_>) -> Result<Vec<f32>> {
        let n = self.info()?.num_workers;
        let mut out = vec![0f32; n as usize];
        // SAFETY: as signature().
        check(unsafe {
            sys::eldr_table_score(
                self.raw.as_ptr(),
                footprint.counts().as_ptr(),
                footprint.layers(),
                footprint.experts(),
                out.as_mut_ptr(),
                n,
            )
        })?;
        Ok(out)
    }

    /// A copy of this table with a footprint predictor fitted on `prompts`:
    /// `prompts[i]` produced footprint `i` of `footprints` (`[n][layers][experts]`
    /// int16 counts in this table's geometry, concatenated: the request's
    /// prefill footprint, or its decode counts where prefill is not
    /// recorded). Returns the table and how many records were skipped as
    /// invalid (an empty prompt, an id past the vocabulary, ...);
    /// `INVALID_ARGUMENT` when none is usable.
    pub fn fit_predictor(
        &self,
        prompts: &[Prompt<'_>],
        footprints: &[i16],
        options: &PredictorOptions,
    ) -> Result<(Table, u64)> {
        let info = self.info()?;
        let n = prompts.len() as u64;
        let cells = checked_cells(n, info.layers, info.experts)?;
        if footprints.len() != cells {
            return Err(Error::new(
                status::INVALID_ARGUMENT,
                format!(
                    "footprints holds {} counts, {} prompts of [{}][{}] need {}",
                    footprints.len(),
                    n,
                    info.layers,
                    info.experts,
                    cells
                ),
            ));
        }
        let raw_prompts: Vec<sys::eldr_prompt_t> = prompts.iter().map(|p| p.to_raw()).collect();
        let raw_options = options.to_raw();
        let mut skipped = 0u64;
        let mut out: *mut sys::eldr_table_t = std::ptr::null_mut();
        // SAFETY: n prompt views borrowing live data; footprints holds
        // n*layers*experts counts (checked above); valid out-params.
        check(unsafe {
            sys::eldr_table_fit_predictor(
                self.raw.as_ptr(),
                raw_prompts.as_ptr(),
                footprints.as_ptr(),
                n,
                info.layers,
                info.experts,
                &raw_options,
                &mut skipped,
                &mut out,
            )
        })?;
        Ok((Table::from_out(out)?, skipped))
    }

    /// The predictor this table carries; `None` when it has none (it was
    /// not fitted with prompts).
    pub fn predictor_info(&self) -> Result<Option<PredictorInfo>> {
        let raw = std::mem::MaybeUninit::<sys::eldr_predictor_info_t>::zeroed();
        // SAFETY: zeroed is a valid eldr_predictor_info_t; version set before the call.
        let mut raw = unsafe { raw.assume_init() };
        raw.version = sys::ELDR_PREDICTOR_INFO_VERSION as u32;
        // SAFETY: valid handle and out struct.
        let rc = unsafe { sys::eldr_table_get_predictor_info(self.raw.as_ptr(), &mut raw) };
        if rc == sys::ELDR_E_NOT_FOUND {
            return Ok(None);
        }
        check(rc)?;
        Ok(Some(PredictorInfo {
            prototypes: raw.prototypes,
            kinds: raw.kinds,
            learned: raw.learned,
            demand_bytes: raw.demand_bytes,
            feature_bytes: raw.feature_bytes,
            index_bytes: raw.index_bytes,
        }))
    }

    pub(crate) fn as_ptr(&self) -> *const sys::eldr_table_t {
        self.raw.as_ptr()
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: the handle is owned and freed exactly once.
        unsafe { sys::eldr_table_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("info", &self.info().ok())
            .finish()
    }
}

fn path_to_cstring(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::new(
            status::INVALID_ARGUMENT,
            format!("path {:?} contains a NUL byte", path),
        )
    })
}
