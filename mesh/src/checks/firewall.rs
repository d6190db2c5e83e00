//! The macOS Application Firewall must let meshd be reached: with the
//! firewall on and no allow rule, every connection to meshd's gRPC and
//! metrics ports and every probe to its responder waits on a prompt nobody
//! on a headless cluster answers, so the peers see the node as dead.
//!
//! A rule is tied to the binary's code signature: an ad-hoc-signed meshd
//! rebuilt in place can lose it, which `sudo meshd install` restores.

use meshd_domain::facts::{CheckResult, FirewallRule, NodeFacts};

use super::Check;
use meshd_domain::facts::SOCKETFILTERFW;

fn allow_fix(path: &str) -> String {
    format!(
        "sudo {SOCKETFILTERFW} --add {path} && sudo {SOCKETFILTERFW} --unblockapp {path}  \
         # or run `sudo meshd install` again, which adds it"
    )
}

/// Passes with the firewall off, or on with every meshd rule allowing
/// incoming connections; fails when it blocks everything, has no rule for
/// meshd or a rule that blocks it; skipped where the state or the rules
/// are unknown.
pub(super) fn firewall_allows_meshd(mut check: Check, facts: &NodeFacts) -> CheckResult {
    let Some(firewall) = &facts.firewall else {
        check.blind("the Application Firewall is unknown (socketfilterfw could not be read)");
        return check.finish_on(facts);
    };
    match (firewall.enabled, firewall.block_all) {
        (Some(false), _) => {
            check.pass("the Application Firewall is off");
            return check.finish_on(facts);
        }
        (None, _) => {
            check.blind("whether the Application Firewall is on is unknown");
            return check.finish_on(facts);
        }
        (Some(true), Some(true)) => check.fail(
            "the Application Firewall blocks all incoming connections (State = 2), whatever \
             its rules say: peers cannot reach meshd",
            format!(
                "turn off \"Block all incoming connections\" in System Settings > Network > \
                 Firewall > Options, or: sudo {SOCKETFILTERFW} --setblockall off"
            ),
        ),
        (Some(true), _) => {}
    }
    match &firewall.meshd_rules {
        None => check.blind(
            "the Application Firewall is on and its rules are unknown (socketfilterfw \
             --listapps could not be read; it needs root)",
        ),
        Some(rules) if rules.is_empty() => check.fail(
            "the Application Firewall is on and has no rule for meshd: connections to its \
             gRPC and metrics ports and probes to its responder wait on an allow prompt",
            allow_fix("/usr/local/bin/meshd"),
        ),
        Some(rules) => {
            for rule in rules {
                judge_rule(&mut check, rule);
            }
        }
    }
    check.finish_on(facts)
}

fn judge_rule(check: &mut Check, rule: &FirewallRule) {
    match rule.allowed {
        Some(true) => check.pass(format!(
            "the Application Firewall allows incoming connections to {}",
            rule.path
        )),
        Some(false) => check.fail(
            format!(
                "the Application Firewall blocks incoming connections to {}",
                rule.path
            ),
            allow_fix(&rule.path),
        ),
        None => check.blind(format!(
            "the Application Firewall's rule for {} is in a state other than allow or block",
            rule.path
        )),
    }
}
