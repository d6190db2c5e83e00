//! Memory on Linux: `/proc/meminfo` (sizes in kB, which the kernel means as
//! KiB) and, where the kernel has pressure stall information,
//! `/proc/pressure/memory`:
//!
//! ```text
//! some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//! full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//! ```

use std::collections::BTreeMap;

use meshd_domain::facts::MemoryFacts;

use crate::source::Source;

pub const MEMINFO: &str = "/proc/meminfo";
pub const PRESSURE_MEMORY: &str = "/proc/pressure/memory";

/// Every `Name:   123 kB` line, in bytes; a line without a unit is taken
/// as a count (the `HugePages_*` lines) and left out.
pub fn parse_meminfo(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let mut words = rest.split_whitespace();
            let value: u64 = words.next()?.parse().ok()?;
            match (words.next(), words.next()) {
                (Some("kB"), None) => Some((name.trim().to_owned(), value.checked_mul(1024)?)),
                _ => None,
            }
        })
        .collect()
}

/// The memory facts `/proc/meminfo` gives.
pub fn memory_from_meminfo(meminfo: &BTreeMap<String, u64>) -> MemoryFacts {
    let get = |name: &str| meminfo.get(name).copied();
    MemoryFacts {
        total_bytes: get("MemTotal"),
        wired_bytes: get("Unevictable"),
        locked_bytes: get("Mlocked"),
        swap_total_bytes: get("SwapTotal"),
        swap_used_bytes: get("SwapTotal")
            .zip(get("SwapFree"))
            .map(|(total, free)| total.saturating_sub(free)),
        ..MemoryFacts::default()
    }
}

/// Stall shares over the last 10 s, in basis points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStall {
    pub some_bp: Option<u32>,
    pub full_bp: Option<u32>,
}

/// The `avg10` of the `some` and `full` lines ("12.34" percent → 1234
/// basis points).
pub fn parse_pressure(text: &str) -> MemoryStall {
    let mut stall = MemoryStall::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let slot = match words.next() {
            Some("some") => &mut stall.some_bp,
            Some("full") => &mut stall.full_bp,
            _ => continue,
        };
        *slot = words
            .find_map(|w| w.strip_prefix("avg10="))
            .and_then(parse_percent_bp);
    }
    stall
}

/// "12.34" → 1234; at most two decimals (what the kernel prints) and at
/// most 100 %.
fn parse_percent_bp(text: &str) -> Option<u32> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || fraction.len() > 2
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u32 = whole.parse().ok()?;
    let hundredths: u32 = format!("{fraction:0<2}").parse().ok()?;
    let bp = whole.checked_mul(100)?.checked_add(hundredths)?;
    (bp <= 10_000).then_some(bp)
}

/// This node's memory: `None` with the reason when `/proc/meminfo` cannot
/// be read; the stall shares stay unknown on kernels without PSI, which is
/// noted in `blind_spots`.
pub fn read_memory(source: &dyn Source, blind_spots: &mut Vec<String>) -> Option<MemoryFacts> {
    let mut memory = match source.read_file(MEMINFO) {
        Ok(text) => memory_from_meminfo(&parse_meminfo(&text)),
        Err(err) => {
            blind_spots.push(format!("memory unknown: cannot read {MEMINFO}: {err}"));
            return None;
        }
    };
    match source.read_file(PRESSURE_MEMORY) {
        Ok(text) => {
            let stall = parse_pressure(&text);
            memory.stall_some_bp = stall.some_bp;
            memory.stall_full_bp = stall.full_bp;
        }
        Err(err) => blind_spots.push(format!(
            "memory pressure stalls unknown: cannot read {PRESSURE_MEMORY} (a kernel without \
             PSI, or psi=0): {err}"
        )),
    }
    Some(memory)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_lines_in_bytes() {
        let info = parse_meminfo(
            "MemTotal:       16384000 kB\nUnevictable:        4096 kB\nMlocked:  0 kB\n\
             SwapTotal: 2097152 kB\nSwapFree: 1048576 kB\nHugePages_Total:       0\nbad line\n",
        );
        let memory = memory_from_meminfo(&info);
        assert_eq!(memory.total_bytes, Some(16_384_000 * 1024));
        assert_eq!(memory.wired_bytes, Some(4096 * 1024));
        assert_eq!(memory.locked_bytes, Some(0));
        assert_eq!(memory.swap_used_bytes, Some(1_048_576 * 1024));
        assert!(!info.contains_key("HugePages_Total"));
        assert_eq!(
            memory_from_meminfo(&BTreeMap::new()),
            MemoryFacts::default()
        );
    }

    #[test]
    fn pressure_avg10_in_basis_points() {
        let stall = parse_pressure(
            "some avg10=12.34 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.5 avg60=0.00\n",
        );
        assert_eq!(
            stall,
            MemoryStall {
                some_bp: Some(1234),
                full_bp: Some(50)
            }
        );
        let odd = parse_pressure("some avg10=100.01\nfull avg10=x\n");
        assert_eq!(odd, MemoryStall::default());
        assert_eq!(parse_percent_bp("1.234"), None);
        assert_eq!(parse_percent_bp("100"), Some(10_000));
    }
}
