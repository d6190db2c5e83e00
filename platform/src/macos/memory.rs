//! Memory and boot identity on macOS, from `sysctl` (memory size, swap,
//! pressure level, boot session and time), `vm_stat` (wired pages) and
//! `sysctl iogpu.wired_limit_mb` (the GPU's wired limit, Apple silicon).
//! The memory watcher reads these alone, every few seconds; the facts read
//! joins them with everything else.

use std::collections::BTreeMap;

use meshd_domain::facts::{BootIdentity, MemoryFacts};

use super::sysctl::{
    parse_boottime, parse_pressure_level, parse_swap_usage, parse_sysctl_values, parse_unsigned,
    parse_uuid,
};
use super::vm_stat::{VmStat, parse_vm_stat};
use crate::source::{HostCommand, Source};

/// The outputs memory and boot facts are built from.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryOutputs<'a> {
    /// `sysctl hw.memsize vm.swapusage …` ([`HostCommand::Sysctl`]).
    pub sysctl: Option<&'a str>,
    pub vm_stat: Option<&'a str>,
    pub gpu_wired_limit: Option<&'a str>,
}

/// One named value of `sysctl`'s output, parsed; a missing or unreadable
/// one is a blind spot naming the name.
fn value<T>(
    values: &BTreeMap<String, String>,
    name: &str,
    parse: impl Fn(&str) -> Option<T>,
    blind_spots: &mut Vec<String>,
) -> Option<T> {
    match values.get(name) {
        Some(text) => {
            let parsed = parse(text);
            if parsed.is_none() {
                blind_spots.push(format!("{}: {name} reads {text:?}", HostCommand::Sysctl));
            }
            parsed
        }
        None => {
            blind_spots.push(format!("{}: no {name} line", HostCommand::Sysctl));
            None
        }
    }
}

/// Memory facts from whatever of `outputs` was read; `None` when none was.
pub fn memory_facts(
    outputs: MemoryOutputs<'_>,
    blind_spots: &mut Vec<String>,
) -> Option<MemoryFacts> {
    if outputs.sysctl.is_none() && outputs.vm_stat.is_none() && outputs.gpu_wired_limit.is_none() {
        return None;
    }
    let mut memory = MemoryFacts::default();
    if let Some(text) = outputs.sysctl {
        let values = parse_sysctl_values(text);
        memory.total_bytes = value(&values, "hw.memsize", parse_unsigned, blind_spots);
        if let Some(swap) = value(&values, "vm.swapusage", parse_swap_usage, blind_spots) {
            memory.swap_total_bytes = Some(swap.total_bytes);
            memory.swap_used_bytes = Some(swap.used_bytes);
        }
        memory.pressure = value(
            &values,
            "kern.memorystatus_vm_pressure_level",
            parse_pressure_level,
            blind_spots,
        );
    }
    if let Some(text) = outputs.vm_stat {
        let stat: VmStat = parse_vm_stat(text);
        memory.wired_bytes = stat.wired_bytes();
        if memory.wired_bytes.is_none() {
            blind_spots.push(format!(
                "{}: no page size or no \"Pages wired down\" line, so wired memory is unknown",
                HostCommand::VmStat
            ));
        }
    }
    if let Some(text) = outputs.gpu_wired_limit {
        let values = parse_sysctl_values(text);
        memory.gpu_wired_limit_bytes = values
            .get("iogpu.wired_limit_mb")
            .and_then(|v| parse_unsigned(v))
            .and_then(|mb| mb.checked_mul(1 << 20));
        if memory.gpu_wired_limit_bytes.is_none() {
            blind_spots.push(format!("{}: printed no limit", HostCommand::GpuWiredLimit));
        }
    }
    Some(memory)
}

/// Which boot this is, from `sysctl`'s output; what it does not say stays
/// unknown, and `blind_spots` says why.
pub fn boot_identity(sysctl: Option<&str>, blind_spots: &mut Vec<String>) -> BootIdentity {
    let Some(text) = sysctl else {
        return BootIdentity::default();
    };
    let values = parse_sysctl_values(text);
    BootIdentity {
        id: value(&values, "kern.bootsessionuuid", parse_uuid, blind_spots),
        booted_at_unix: value(&values, "kern.boottime", parse_boottime, blind_spots),
    }
}

/// Runs [`HostCommand::MACOS_MEMORY`] and builds the memory facts; a
/// command that fails is a blind spot.
pub fn read_memory(source: &dyn Source, blind_spots: &mut Vec<String>) -> Option<MemoryFacts> {
    let mut run = |command: HostCommand| match source.capture(command) {
        Ok(text) => Some(text),
        Err(err) => {
            blind_spots.push(err.to_string());
            None
        }
    };
    let sysctl = run(HostCommand::Sysctl);
    let vm_stat = run(HostCommand::VmStat);
    let gpu_wired_limit = run(HostCommand::GpuWiredLimit);
    memory_facts(
        MemoryOutputs {
            sysctl: sysctl.as_deref(),
            vm_stat: vm_stat.as_deref(),
            gpu_wired_limit: gpu_wired_limit.as_deref(),
        },
        blind_spots,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshd_domain::facts::MemoryPressure;

    #[test]
    fn memory_from_the_three_outputs() {
        let mut blind = Vec::new();
        let memory = memory_facts(
            MemoryOutputs {
                sysctl: Some(
                    "hw.memsize: 34359738368\nvm.swapusage: total = 0.00M  used = 0.00M  free = 0.00M\n\
                     kern.memorystatus_vm_pressure_level: 4\n",
                ),
                vm_stat: Some("(page size of 16384 bytes)\nPages wired down: 2.\n"),
                gpu_wired_limit: Some("iogpu.wired_limit_mb: 0\n"),
            },
            &mut blind,
        )
        .expect("memory");
        assert!(blind.is_empty(), "{blind:?}");
        assert_eq!(
            memory,
            MemoryFacts {
                total_bytes: Some(34_359_738_368),
                wired_bytes: Some(32_768),
                swap_total_bytes: Some(0),
                swap_used_bytes: Some(0),
                pressure: Some(MemoryPressure::Critical),
                gpu_wired_limit_bytes: Some(0),
                ..MemoryFacts::default()
            }
        );
    }

    #[test]
    fn what_is_not_printed_is_unknown_and_named() {
        let mut blind = Vec::new();
        assert_eq!(memory_facts(MemoryOutputs::default(), &mut blind), None);
        let memory = memory_facts(
            MemoryOutputs {
                sysctl: Some("hw.memsize: lots\n"),
                ..MemoryOutputs::default()
            },
            &mut blind,
        )
        .expect("some");
        assert_eq!(memory, MemoryFacts::default());
        assert_eq!(blind.len(), 3, "{blind:?}");
        assert!(
            blind[0].ends_with("hw.memsize reads \"lots\""),
            "{}",
            blind[0]
        );
        let boot = boot_identity(Some("kern.boottime: { sec = 5, usec = 0 }\n"), &mut blind);
        assert_eq!(
            boot,
            BootIdentity {
                id: None,
                booted_at_unix: Some(5)
            }
        );
        assert!(
            blind
                .last()
                .expect("named")
                .contains("kern.bootsessionuuid")
        );
        assert_eq!(boot_identity(None, &mut blind), BootIdentity::default());
    }
}
