//! Routing from the prompt (`eldr_prompt.h`): for gateways that pick the
//! decode worker before prefill runs (llm-d, SGLang's PD router) and so have
//! no footprint yet. A table fitted with prompts carries a footprint
//! predictor ([`Table::fit_predictor`](crate::Table::fit_predictor)); the
//! router predicts the request's footprint from its prompt and routes it
//! ([`Router::route_tokens`](crate::Router::route_tokens),
//! [`Router::route_text`](crate::Router::route_text)); the real footprint,
//! once prefill has run, teaches the predictor
//! ([`Router::learn`](crate::Router::learn)).

use eldr_sys as sys;

/// Token ids are below this (`ELDR_MAX_VOCABULARY`, 2^20).
pub const MAX_VOCABULARY: u32 = sys::ELDR_MAX_VOCABULARY as u32;
/// A prompt of more token ids is refused (`ELDR_MAX_PROMPT_TOKENS`).
pub const MAX_PROMPT_TOKENS: usize = sys::ELDR_MAX_PROMPT_TOKENS as usize;
/// A text prompt of more bytes is refused (`ELDR_MAX_PROMPT_BYTES`, 512 KiB).
pub const MAX_PROMPT_BYTES: usize = sys::ELDR_MAX_PROMPT_BYTES as usize;

/// One prompt: the tokenizer's ids (each below [`MAX_VOCABULARY`]) or UTF-8
/// text (the tokenizer-free input: words and code points). A view: nothing is
/// copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prompt<'a> {
    Tokens(&'a [u32]),
    Text(&'a str),
}

impl<'a> From<&'a [u32]> for Prompt<'a> {
    fn from(tokens: &'a [u32]) -> Prompt<'a> {
        Prompt::Tokens(tokens)
    }
}

impl<'a> From<&'a str> for Prompt<'a> {
    fn from(text: &'a str) -> Prompt<'a> {
        Prompt::Text(text)
    }
}

impl Prompt<'_> {
    /// The C view (`eldr_prompt_t`); valid while the borrowed data lives.
    pub(crate) fn to_raw(self) -> sys::eldr_prompt_t {
        match self {
            Prompt::Tokens(t) => sys::eldr_prompt_t {
                tokens: t.as_ptr(),
                n_tokens: t.len(),
                text: std::ptr::null(),
                text_len: 0,
            },
            Prompt::Text(s) => sys::eldr_prompt_t {
                tokens: std::ptr::null(),
                n_tokens: 0,
                text: s.as_ptr() as *const std::os::raw::c_char,
                text_len: s.len(),
            },
        }
    }
}

/// Options of [`Table::fit_predictor`](crate::Table::fit_predictor);
/// `Default` gives the library's (`eldr_predictor_options_init`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PredictorOptions {
    /// Prototypes kept, the oldest replaced first.
    pub capacity: u32,
    /// Prototypes averaged per prediction.
    pub neighbours: u32,
    /// Softmax temperature over cosines.
    pub bandwidth: f32,
    /// Features kept per prototype.
    pub max_features: u32,
}

impl Default for PredictorOptions {
    fn default() -> PredictorOptions {
        let raw = default_raw_options();
        PredictorOptions {
            capacity: raw.capacity,
            neighbours: raw.neighbours,
            bandwidth: raw.bandwidth,
            max_features: raw.max_features,
        }
    }
}

impl PredictorOptions {
    pub(crate) fn to_raw(self) -> sys::eldr_predictor_options_t {
        let mut raw = default_raw_options();
        raw.capacity = self.capacity;
        raw.neighbours = self.neighbours;
        raw.bandwidth = self.bandwidth;
        raw.max_features = self.max_features;
        raw
    }
}

fn default_raw_options() -> sys::eldr_predictor_options_t {
    let mut raw = std::mem::MaybeUninit::<sys::eldr_predictor_options_t>::zeroed();
    // SAFETY: init writes the whole struct.
    unsafe {
        sys::eldr_predictor_options_init(raw.as_mut_ptr());
        raw.assume_init()
    }
}

/// The predictor a table carries ([`Table::predictor_info`](crate::Table::predictor_info)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PredictorInfo {
    pub prototypes: u32,
    /// `ELDR_PROMPT_KIND_*` bits; see [`PredictorInfo::tokens`] and [`PredictorInfo::text`].
    pub kinds: u32,
    /// Records learned, calibration included.
    pub learned: u64,
    /// Memory, per component, in bytes.
    pub demand_bytes: u64,
    pub feature_bytes: u64,
    pub index_bytes: u64,
}

impl PredictorInfo {
    /// It predicts from token ids.
    pub fn tokens(&self) -> bool {
        self.kinds & sys::ELDR_PROMPT_KIND_TOKENS as u32 != 0
    }
    /// It predicts from text.
    pub fn text(&self) -> bool {
        self.kinds & sys::ELDR_PROMPT_KIND_TEXT as u32 != 0
    }
}

/// A router's prompt counters since creation ([`Router::prompt_stats`](crate::Router::prompt_stats)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptStats {
    /// Decisions made from a prompt.
    pub routed: u64,
    /// Bad prompts, or no predictor.
    pub rejected: u64,
    /// Real footprints learned from.
    pub learned: u64,
    /// [`Router::learn`](crate::Router::learn) for an unknown id, or a bad footprint.
    pub learn_rejected: u64,
    /// Kept prompts dropped before their footprint came.
    pub dropped: u64,
}
