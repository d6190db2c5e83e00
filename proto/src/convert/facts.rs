//! A node's host facts (facts.proto): boot identity, memory, power settings,
//! panic reports and the firewall, each bounded in size and count.

use super::{Result, WireError, bounded, each, memory_pressure, memory_pressure_wire, non_empty};
use crate::wire;
use meshd_domain::facts::{
    BootIdentity, BridgeFact, CheckResult, FirewallFact, FirewallRule, MemoryFacts,
    NetworkSetupFact, NodeFacts, OsKind, PanicFacts, PanicReport, PortFact, PowerSettings,
};

/// Longest boot id accepted (a UUID is 36 characters).
const MAX_BOOT_ID_CHARS: usize = 64;
/// Longest panic report file name and first line accepted.
const MAX_PANIC_FILE_CHARS: usize = 255;
const MAX_PANIC_LINE_CHARS: usize = 512;
/// Most processes named as holding sleep off, and the longest name.
const MAX_SLEEP_PREVENTERS: usize = 32;
const MAX_PROCESS_NAME_CHARS: usize = 64;
/// Longest network location or service name accepted (macOS's own limit
/// is far below it).
pub(super) const MAX_SERVICE_NAME_CHARS: usize = 128;

impl From<NodeFacts> for wire::NodeFacts {
    fn from(f: NodeFacts) -> Self {
        let bridges_read = f.bridges.is_some();
        Self {
            os: f.os.as_str().to_owned(),
            os_version: f.os_version,
            os_build: f.os_build,
            model: f.model,
            rdma_enabled: f.rdma_enabled,
            rdma_devices_read: f.rdma_devices_read,
            ports: f.ports.into_iter().map(Into::into).collect(),
            ports_complete: f.ports_complete,
            checks: f.checks.into_iter().map(Into::into).collect(),
            blind_spots: f.blind_spots,
            source: f.source,
            bridges: f
                .bridges
                .unwrap_or_default()
                .into_iter()
                .map(|b| wire::BridgeFact {
                    name: b.name,
                    active: b.member_link,
                    members: b.members,
                    service: b.service.unwrap_or_default(),
                    service_enabled: b.service_enabled,
                    up: b.up,
                })
                .collect(),
            bridges_read,
            boot: boot_wire(f.boot),
            memory: f.memory.map(memory_wire),
            power: f.power.map(|p| wire::PowerSettings {
                sleep_minutes: p.sleep_minutes,
                disk_sleep_minutes: p.disk_sleep_minutes,
                auto_restart: p.auto_restart,
                sleep_disabled: p.sleep_disabled,
                sleep_prevented_by: p.sleep_prevented_by,
            }),
            panics_read: f.panics.is_some(),
            latest_panic: f.panics.and_then(|p| p.latest).map(|r| wire::PanicReport {
                file: r.file,
                at_unix: r.at_unix,
                first_line: r.first_line,
                boot_id: r.boot_id.unwrap_or_default(),
            }),
            firewall: f.firewall.map(|fw| wire::FirewallFact {
                enabled: fw.enabled,
                block_all: fw.block_all,
                rules_read: fw.meshd_rules.is_some(),
                meshd_rules: fw
                    .meshd_rules
                    .unwrap_or_default()
                    .into_iter()
                    .map(|r| wire::FirewallRule {
                        path: r.path,
                        allowed: r.allowed,
                    })
                    .collect(),
            }),
            network_setup: f.network_setup.map(|n| wire::NetworkSetup {
                location: n.location,
                exo_daemon: n.exo_daemon,
            }),
        }
    }
}

/// More meshd rules than this is not a firewall a Mac has: refused rather
/// than carried in every report.
const MAX_FIREWALL_RULES: usize = 64;

fn firewall_fact(fw: wire::FirewallFact) -> Result<FirewallFact> {
    if fw.meshd_rules.len() > MAX_FIREWALL_RULES {
        return Err(WireError::new(
            "meshd_rules",
            format!(
                "{} rules; at most {MAX_FIREWALL_RULES} are accepted",
                fw.meshd_rules.len()
            ),
        ));
    }
    let rules: Vec<FirewallRule> = fw
        .meshd_rules
        .into_iter()
        .map(|r| FirewallRule {
            path: r.path,
            allowed: r.allowed,
        })
        .collect();
    Ok(FirewallFact {
        enabled: fw.enabled,
        block_all: fw.block_all,
        meshd_rules: (fw.rules_read || !rules.is_empty()).then_some(rules),
    })
}

/// An unknown boot is no message at all.
pub(super) fn boot_wire(b: BootIdentity) -> Option<wire::BootIdentity> {
    b.is_known().then(|| wire::BootIdentity {
        id: b.id.unwrap_or_default(),
        booted_at_unix: b.booted_at_unix,
    })
}

pub(super) fn boot_identity(b: Option<wire::BootIdentity>) -> Result<BootIdentity> {
    let Some(b) = b else {
        return Ok(BootIdentity::default());
    };
    Ok(BootIdentity {
        id: non_empty(bounded("id", b.id, MAX_BOOT_ID_CHARS)?),
        booted_at_unix: b.booted_at_unix,
    })
}

fn memory_wire(m: MemoryFacts) -> wire::MemoryFacts {
    wire::MemoryFacts {
        total_bytes: m.total_bytes,
        wired_bytes: m.wired_bytes,
        locked_bytes: m.locked_bytes,
        swap_total_bytes: m.swap_total_bytes,
        swap_used_bytes: m.swap_used_bytes,
        pressure: m.pressure.map(memory_pressure_wire),
        stall_some_bp: m.stall_some_bp,
        stall_full_bp: m.stall_full_bp,
        gpu_wired_limit_bytes: m.gpu_wired_limit_bytes,
    }
}

fn memory_facts(m: wire::MemoryFacts) -> Result<MemoryFacts> {
    Ok(MemoryFacts {
        total_bytes: m.total_bytes,
        wired_bytes: m.wired_bytes,
        locked_bytes: m.locked_bytes,
        swap_total_bytes: m.swap_total_bytes,
        swap_used_bytes: m.swap_used_bytes,
        pressure: m
            .pressure
            .map(|raw| memory_pressure("pressure", raw))
            .transpose()?,
        stall_some_bp: m.stall_some_bp,
        stall_full_bp: m.stall_full_bp,
        gpu_wired_limit_bytes: m.gpu_wired_limit_bytes,
    })
}

fn power_settings(p: wire::PowerSettings) -> Result<PowerSettings> {
    if p.sleep_prevented_by.len() > MAX_SLEEP_PREVENTERS {
        return Err(WireError::new(
            "sleep_prevented_by",
            format!(
                "{} names; at most {MAX_SLEEP_PREVENTERS} are accepted",
                p.sleep_prevented_by.len()
            ),
        ));
    }
    Ok(PowerSettings {
        sleep_minutes: p.sleep_minutes,
        disk_sleep_minutes: p.disk_sleep_minutes,
        auto_restart: p.auto_restart,
        sleep_disabled: p.sleep_disabled,
        sleep_prevented_by: p
            .sleep_prevented_by
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                bounded(
                    &format!("sleep_prevented_by[{i}]"),
                    name,
                    MAX_PROCESS_NAME_CHARS,
                )
            })
            .collect::<Result<_>>()?,
    })
}

fn panic_facts(read: bool, latest: Option<wire::PanicReport>) -> Result<Option<PanicFacts>> {
    let latest = latest
        .map(|r| -> Result<PanicReport> {
            Ok(PanicReport {
                file: bounded("file", r.file, MAX_PANIC_FILE_CHARS)?,
                at_unix: r.at_unix,
                first_line: bounded("first_line", r.first_line, MAX_PANIC_LINE_CHARS)?,
                boot_id: non_empty(bounded("boot_id", r.boot_id, MAX_BOOT_ID_CHARS)?),
            })
        })
        .transpose()
        .map_err(|e| e.within("latest_panic"))?;
    // A report is knowledge even from a peer that did not set the flag.
    Ok((read || latest.is_some()).then_some(PanicFacts { latest }))
}

impl TryFrom<wire::NodeFacts> for NodeFacts {
    type Error = WireError;
    fn try_from(f: wire::NodeFacts) -> Result<Self> {
        // A peer older than `bridges_read` sends its bridges without the
        // flag: a listed bridge is still knowledge, an empty list is not.
        let bridges_read = f.bridges_read || !f.bridges.is_empty();
        let bridges: Vec<BridgeFact> = f
            .bridges
            .into_iter()
            .map(|b| BridgeFact {
                name: b.name,
                up: b.up,
                member_link: b.active,
                members: b.members,
                service: non_empty(b.service),
                service_enabled: b.service_enabled,
            })
            .collect();
        Ok(Self {
            os: OsKind::from_name(&f.os),
            os_version: f.os_version,
            os_build: f.os_build,
            model: f.model,
            rdma_enabled: f.rdma_enabled,
            rdma_devices_read: f.rdma_devices_read,
            ports: each("ports", f.ports, PortFact::try_from)?,
            ports_complete: f.ports_complete,
            bridges: bridges_read.then_some(bridges),
            checks: each("checks", f.checks, CheckResult::try_from)?,
            blind_spots: f.blind_spots,
            source: f.source,
            firewall: f
                .firewall
                .map(firewall_fact)
                .transpose()
                .map_err(|e| e.within("firewall"))?,
            boot: boot_identity(f.boot).map_err(|e| e.within("boot"))?,
            memory: f
                .memory
                .map(memory_facts)
                .transpose()
                .map_err(|e| e.within("memory"))?,
            power: f
                .power
                .map(power_settings)
                .transpose()
                .map_err(|e| e.within("power"))?,
            panics: panic_facts(f.panics_read, f.latest_panic)?,
            network_setup: f
                .network_setup
                .map(|n| -> Result<NetworkSetupFact> {
                    Ok(NetworkSetupFact {
                        location: n
                            .location
                            .map(|l| bounded("location", l, MAX_SERVICE_NAME_CHARS))
                            .transpose()?,
                        exo_daemon: n.exo_daemon,
                    })
                })
                .transpose()
                .map_err(|e| e.within("network_setup"))?,
        })
    }
}
