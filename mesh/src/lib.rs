//! Pure logic over the facts of every node: the cable map, the checks,
//! cabling plans and JACCL hostfiles. No I/O, no clock.

pub mod cables;
pub mod checks;
pub mod hostfile;
pub mod models;
pub mod plan;
pub mod views;

use std::fmt;
use std::str::FromStr;

/// JACCL's two topologies, as `mlx.launch --backend` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// A cable between every pair of ranks.
    Jaccl,
    /// Each rank cabled to its two neighbours.
    JacclRing,
}

/// A Thunderbolt 5 Mac-to-Mac link negotiates 80 Gb/s.
pub(crate) const TB5_LINK_BPS: u64 = 80_000_000_000;

/// Thunderbolt 4 / USB4 ports top out at 40 Gb/s.
pub(crate) const TB4_MAX_BPS: u64 = 40_000_000_000;

/// JACCL's full mesh caps at 8 ranks (ARCHITECTURE.md, Field facts).
pub const JACCL_MAX_RANKS: usize = 8;

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Jaccl => "jaccl",
            Backend::JacclRing => "jaccl-ring",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a JACCL backend; use \"jaccl\" or \"jaccl-ring\"")]
pub struct UnknownBackend(pub String);

impl FromStr for Backend {
    type Err = UnknownBackend;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jaccl" => Ok(Backend::Jaccl),
            "jaccl-ring" => Ok(Backend::JacclRing),
            _ => Err(UnknownBackend(s.to_owned())),
        }
    }
}

/// "80 Gb/s", "unknown speed" for 0: how evidence names a link speed.
pub(crate) fn gbps(bps: u64) -> String {
    if bps == 0 {
        return "unknown speed".to_owned();
    }
    let whole = bps / 1_000_000_000;
    let tenths = (bps % 1_000_000_000) / 100_000_000;
    if tenths == 0 {
        format!("{whole} Gb/s")
    } else {
        format!("{whole}.{tenths} Gb/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_round_trip_and_unknown_is_named() {
        for backend in [Backend::Jaccl, Backend::JacclRing] {
            assert_eq!(backend.as_str().parse::<Backend>(), Ok(backend));
        }
        let err = "ring".parse::<Backend>().unwrap_err();
        assert!(err.to_string().contains("\"ring\""), "{err}");
    }

    #[test]
    fn speeds_print_in_gigabits() {
        assert_eq!(gbps(80_000_000_000), "80 Gb/s");
        assert_eq!(gbps(2_500_000_000), "2.5 Gb/s");
        assert_eq!(gbps(0), "unknown speed");
    }
}
