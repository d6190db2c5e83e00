//! `sysctl`: `sysctl -n hw.model` prints the model identifier alone
//! ("Mac16,9"); `sysctl NAME…` prints one `name: value` line per name:
//!
//! ```text
//! hw.memsize: 34359738368
//! vm.swapusage: total = 13312.00M  used = 11625.69M  free = 1686.31M  (encrypted)
//! kern.memorystatus_vm_pressure_level: 2
//! kern.bootsessionuuid: 40962879-B7EE-4F13-AF6E-E7266EF5E732
//! kern.boottime: { sec = 1790421415, usec = 985376 } Sat Sep 26 06:16:55 2026
//! iogpu.wired_limit_mb: 0
//! ```

use std::collections::BTreeMap;

use meshd_domain::facts::MemoryPressure;

/// `None` when the output is blank.
pub fn parse_hw_model(text: &str) -> Option<String> {
    let model = text.lines().map(str::trim).find(|line| !line.is_empty())?;
    Some(model.to_owned())
}

/// Every `name: value` line, by name; a name printed twice keeps its last
/// value.
pub fn parse_sysctl_values(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            let name = name.trim();
            // sysctl names are dotted paths ("hw.memsize").
            let well_formed = name.contains('.')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            well_formed.then(|| (name.to_owned(), value.trim().to_owned()))
        })
        .collect()
}

/// A plain unsigned integer value (`hw.memsize`, `iogpu.wired_limit_mb`).
pub fn parse_unsigned(value: &str) -> Option<u64> {
    let value = value.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// `kern.memorystatus_vm_pressure_level`: 1 normal, 2 warning, 4 critical
/// (XNU's `kVMPressure*`); anything else is not a level.
pub fn parse_pressure_level(value: &str) -> Option<MemoryPressure> {
    match parse_unsigned(value)? {
        1 => Some(MemoryPressure::Normal),
        2 => Some(MemoryPressure::Warning),
        4 => Some(MemoryPressure::Critical),
        _ => None,
    }
}

/// `vm.swapusage`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapUsage {
    pub total_bytes: u64,
    pub used_bytes: u64,
}

/// `total = 13312.00M  used = 11625.69M  free = 1686.31M  (encrypted)`:
/// sizes in K, M or G with two decimals (binary units). `None` unless both
/// total and used are read.
pub fn parse_swap_usage(value: &str) -> Option<SwapUsage> {
    let mut total = None;
    let mut used = None;
    let mut words = value.split_whitespace().peekable();
    while let Some(word) = words.next() {
        let slot = match word {
            "total" => &mut total,
            "used" => &mut used,
            _ => continue,
        };
        if words.next() != Some("=") {
            continue;
        }
        if let Some(size) = words.next().and_then(parse_size) {
            *slot = Some(size);
        }
    }
    Some(SwapUsage {
        total_bytes: total?,
        used_bytes: used?,
    })
}

/// "11625.69M" → bytes, rounded to the nearest byte.
fn parse_size(text: &str) -> Option<u64> {
    let (number, shift) = [('K', 10), ('M', 20), ('G', 30)]
        .into_iter()
        .find_map(|(unit, shift)| Some((text.strip_suffix(unit)?, shift)))?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > 6
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let scale = 10u64.pow(u32::try_from(fraction.len()).ok()?);
    let fraction: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    let unit_bytes = 1u64 << shift;
    let fraction_bytes =
        (u128::from(fraction) * u128::from(unit_bytes) + u128::from(scale / 2)) / u128::from(scale);
    whole
        .checked_mul(unit_bytes)?
        .checked_add(u64::try_from(fraction_bytes).ok()?)
}

/// `kern.boottime`: `{ sec = 1790421415, usec = 985376 } Sat Sep 26 …` →
/// the seconds.
pub fn parse_boottime(value: &str) -> Option<u64> {
    let fields = value.trim_start().strip_prefix('{')?.split_once('}')?.0;
    fields.split(',').find_map(|field| {
        let (key, number) = field.split_once('=')?;
        (key.trim() == "sec")
            .then(|| parse_unsigned(number))
            .flatten()
    })
}

/// `kern.bootsessionuuid`: a UUID (8-4-4-4-12 hex digits), upper-cased as
/// macOS prints it; `None` for anything else.
pub fn parse_uuid(value: &str) -> Option<String> {
    let value = value.trim();
    let groups: Vec<&str> = value.split('-').collect();
    let lengths = [8, 4, 4, 4, 12];
    let well_formed = groups.len() == lengths.len()
        && groups
            .iter()
            .zip(lengths)
            .all(|(group, len)| group.len() == len && group.bytes().all(|b| b.is_ascii_hexdigit()));
    well_formed.then(|| value.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimmed_first_line_or_nothing() {
        assert_eq!(parse_hw_model("Mac16,9\n").as_deref(), Some("Mac16,9"));
        assert_eq!(
            parse_hw_model("\n  Mac15,14 \n").as_deref(),
            Some("Mac15,14")
        );
        assert_eq!(parse_hw_model(" \n\t\n"), None);
    }

    #[test]
    fn name_value_lines() {
        let values = parse_sysctl_values(
            "hw.memsize: 34359738368\nsysctl: unknown oid 'x'\nnot a line\nkern.x:  a b \n",
        );
        assert_eq!(
            values.get("hw.memsize").map(String::as_str),
            Some("34359738368")
        );
        assert_eq!(values.get("kern.x").map(String::as_str), Some("a b"));
        assert_eq!(values.len(), 2, "{values:?}");
    }

    #[test]
    fn swap_sizes_in_binary_units() {
        assert_eq!(
            parse_swap_usage("total = 2048.00M  used = 1017.50M  free = 1030.50M  (encrypted)"),
            Some(SwapUsage {
                total_bytes: 2048 << 20,
                used_bytes: (1017 << 20) + (1 << 19),
            })
        );
        assert_eq!(
            parse_swap_usage("total = 0.00M  used = 0.00M  free = 0.00M"),
            Some(SwapUsage {
                total_bytes: 0,
                used_bytes: 0
            })
        );
        assert_eq!(
            parse_swap_usage("total = 2.00G  used = 512.00K").map(|s| s.total_bytes),
            Some(2 << 30)
        );
        assert_eq!(parse_swap_usage("total = 2048.00M"), None);
        assert_eq!(parse_swap_usage("total = x  used = 1M"), None);
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size(".5M"), None);
        // A unit that is not ASCII is refused, not sliced through.
        assert_eq!(parse_size("13312.00ˇ"), None);
        assert_eq!(parse_size("ˇ"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn levels_boot_time_and_uuids() {
        assert_eq!(parse_pressure_level("4"), Some(MemoryPressure::Critical));
        assert_eq!(parse_pressure_level("3"), None);
        assert_eq!(
            parse_boottime("{ sec = 1790421415, usec = 985376 } Sat Sep 26 06:16:55 2026"),
            Some(1_790_421_415)
        );
        assert_eq!(parse_boottime("{ usec = 5 }"), None);
        assert_eq!(
            parse_uuid("40962879-b7ee-4f13-af6e-e7266ef5e732").as_deref(),
            Some("40962879-B7EE-4F13-AF6E-E7266EF5E732")
        );
        assert_eq!(parse_uuid("40962879-B7EE-4F13-AF6E"), None);
        assert_eq!(parse_uuid("4096287G-B7EE-4F13-AF6E-E7266EF5E732"), None);
    }
}
