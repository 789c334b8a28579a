//! A borrowed footprint: int16 counts, row-major [layers][experts].

use crate::error::{status, Error, Result};

/// A prefill footprint checked for a consistent shape. The C API takes a bare
/// pointer plus dimensions; this type guarantees the slice really holds
/// `layers * experts` counts, so the library never reads past it.
#[derive(Clone, Copy, Debug)]
pub struct Footprint<'a> {
    counts: &'a [i16],
    layers: u32,
    experts: u32,
}

impl<'a> Footprint<'a> {
    /// Fails with `INVALID_ARGUMENT` unless `counts.len() == layers * experts`
    /// and both dimensions are nonzero.
    pub fn new(counts: &'a [i16], layers: u32, experts: u32) -> Result<Footprint<'a>> {
        let cells = checked_cells(1, layers, experts)?;
        if counts.len() != cells {
            return Err(Error::new(
                status::INVALID_ARGUMENT,
                format!(
                    "footprint holds {} counts, shape [{}][{}] needs {}",
                    counts.len(),
                    layers,
                    experts,
                    cells
                ),
            ));
        }
        Ok(Footprint {
            counts,
            layers,
            experts,
        })
    }

    pub fn counts(&self) -> &'a [i16] {
        self.counts
    }
    pub fn layers(&self) -> u32 {
        self.layers
    }
    pub fn experts(&self) -> u32 {
        self.experts
    }
}

/// `n * layers * experts` without overflow, all factors nonzero.
pub(crate) fn checked_cells(n: u64, layers: u32, experts: u32) -> Result<usize> {
    if n == 0 || layers == 0 || experts == 0 {
        return Err(Error::new(
            status::INVALID_ARGUMENT,
            format!("empty shape [{}][{}][{}]", n, layers, experts),
        ));
    }
    (layers as u64)
        .checked_mul(experts as u64)
        .and_then(|c| c.checked_mul(n))
        .and_then(|c| usize::try_from(c).ok())
        .ok_or_else(|| {
            Error::new(
                status::INVALID_ARGUMENT,
                format!("shape [{}][{}][{}] overflows", n, layers, experts),
            )
        })
}
