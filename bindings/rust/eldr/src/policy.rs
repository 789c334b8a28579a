//! Routing policies (`ELDR_POLICY_*`).

use eldr_sys as sys;

/// Routing policy (`ELDR_POLICY_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Locality band of width tau, least loaded inside it.
    Eldr,
    RoundRobin,
    Random,
    /// Join the shortest queue.
    Jsq,
    /// Power of two choices.
    P2c,
    /// Label pools from the table.
    Domain,
    /// Locality band with a load guard.
    EldrGuard,
    /// Least added decode time under the step model (the library's default).
    EldrCost,
}

impl Policy {
    pub const ALL: [Policy; 8] = [
        Policy::Eldr,
        Policy::RoundRobin,
        Policy::Random,
        Policy::Jsq,
        Policy::P2c,
        Policy::Domain,
        Policy::EldrGuard,
        Policy::EldrCost,
    ];

    pub fn as_raw(self) -> u32 {
        (match self {
            Policy::Eldr => sys::ELDR_POLICY_ELDR,
            Policy::RoundRobin => sys::ELDR_POLICY_ROUND_ROBIN,
            Policy::Random => sys::ELDR_POLICY_RANDOM,
            Policy::Jsq => sys::ELDR_POLICY_JSQ,
            Policy::P2c => sys::ELDR_POLICY_P2C,
            Policy::Domain => sys::ELDR_POLICY_DOMAIN,
            Policy::EldrGuard => sys::ELDR_POLICY_ELDR_GUARD,
            Policy::EldrCost => sys::ELDR_POLICY_ELDR_COST,
        }) as u32
    }

    /// `None` for a code this binding does not know (a newer library).
    pub fn from_raw(raw: u32) -> Option<Policy> {
        Policy::ALL.iter().copied().find(|p| p.as_raw() == raw)
    }

    /// The library's name: `"eldr"`, `"round_robin"`, ...
    pub fn name(self) -> &'static str {
        // SAFETY: static storage (or NULL, mapped to "").
        unsafe { crate::error::static_cstr(sys::eldr_policy_name(self.as_raw())) }
    }

    /// Parses a library name (`"eldr"`, `"jsq"`, ...).
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.iter().copied().find(|p| p.name() == name)
    }
}
