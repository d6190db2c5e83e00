//! Which boot this is: `/proc/sys/kernel/random/boot_id` (a UUID the kernel
//! makes at every boot) and `btime` in `/proc/stat` (the boot time, in
//! seconds since the Unix epoch).

use meshd_domain::facts::BootIdentity;

use crate::macos::sysctl::parse_uuid;
use crate::source::Source;

pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
pub const PROC_STAT: &str = "/proc/stat";

/// `btime 1700000000` from `/proc/stat`.
pub fn parse_btime(stat: &str) -> Option<u64> {
    stat.lines().find_map(|line| {
        let value = line.strip_prefix("btime")?.trim();
        (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
            .then(|| value.parse().ok())
            .flatten()
    })
}

/// The boot id, as the kernel prints it (lower case); `None` unless it is
/// a UUID.
pub fn parse_boot_id(text: &str) -> Option<String> {
    parse_uuid(text).map(|uuid| uuid.to_ascii_lowercase())
}

/// This node's boot; what cannot be read stays unknown, with the reason in
/// `blind_spots`.
pub fn read_boot(source: &dyn Source, blind_spots: &mut Vec<String>) -> BootIdentity {
    let id = match source.read_file(BOOT_ID) {
        Ok(text) => {
            let id = parse_boot_id(&text);
            if id.is_none() {
                blind_spots.push(format!("boot id unknown: {BOOT_ID} holds no UUID"));
            }
            id
        }
        Err(err) => {
            blind_spots.push(format!("boot id unknown: cannot read {BOOT_ID}: {err}"));
            None
        }
    };
    let booted_at_unix = match source.read_file(PROC_STAT) {
        Ok(text) => {
            let btime = parse_btime(&text);
            if btime.is_none() {
                blind_spots.push(format!("boot time unknown: {PROC_STAT} has no btime line"));
            }
            btime
        }
        Err(err) => {
            blind_spots.push(format!("boot time unknown: cannot read {PROC_STAT}: {err}"));
            None
        }
    };
    BootIdentity { id, booted_at_unix }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn btime_and_boot_id() {
        assert_eq!(
            parse_btime("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_btime("btimex 5\nbtime\n"), None);
        assert_eq!(
            parse_boot_id("5E0C1D2B-8A5D-4C7A-9F3E-2B1C0D9E8F7A\n").as_deref(),
            Some("5e0c1d2b-8a5d-4c7a-9f3e-2b1c0d9e8f7a")
        );
        assert_eq!(parse_boot_id("not a uuid"), None);
    }
}
