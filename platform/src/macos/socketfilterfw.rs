//! The Application Firewall's own tool,
//! `/usr/libexec/ApplicationFirewall/socketfilterfw`: `--getglobalstate`
//! and `--listapps`.
//!
//! `--getglobalstate` prints one line ending in `(State = N)`: 0 off, 1 on,
//! 2 on and blocking every incoming connection. The words before it
//! changed over releases ("Firewall is enabled. (State = 2)" on older
//! macOS, "Firewall is blocking all non-essential incoming connections.
//! (State = 2)" on Sequoia), so the number decides.
//!
//! `--listapps` prints a count line, then per rule `N : <path>` and, on the
//! next line, `( Allow incoming connections )` or `( Block incoming
//! connections )`. Older releases start with `ALF: total number of apps =
//! N` and pad the parentheses; newer ones start with `Total number of apps
//! = N` and do not. Whitespace is free either way.

use meshd_domain::facts::{FirewallFact, FirewallRule};

/// `--getglobalstate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GlobalState {
    Off,
    On,
    /// On, and blocking every incoming connection whatever the rules say.
    BlockAll,
    /// Anything else, trimmed, kept as evidence.
    Unknown(String),
}

impl GlobalState {
    /// The state as a fact: on, and whether everything is blocked; `None`
    /// where unknown.
    pub fn enabled_and_block_all(&self) -> (Option<bool>, Option<bool>) {
        match self {
            GlobalState::Off => (Some(false), Some(false)),
            GlobalState::On => (Some(true), Some(false)),
            GlobalState::BlockAll => (Some(true), Some(true)),
            GlobalState::Unknown(_) => (None, None),
        }
    }
}

pub fn parse_global_state(text: &str) -> GlobalState {
    let trimmed = text.trim();
    let state = trimmed
        .rsplit_once("(State =")
        .and_then(|(_, rest)| rest.trim().strip_suffix(')'))
        .map(str::trim);
    match state {
        Some("0") => GlobalState::Off,
        Some("1") => GlobalState::On,
        Some("2") => GlobalState::BlockAll,
        _ => GlobalState::Unknown(trimmed.to_owned()),
    }
}

/// Why a `--listapps` output could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListAppsError {
    #[error("no `Total number of apps = N` line")]
    NoCount,
    #[error("says {said} apps but lists {listed}")]
    CountMismatch { said: usize, listed: usize },
}

/// Every rule `--listapps` lists, in order. The count line must be there
/// and agree with the rules found, so a truncated or reworded output is
/// an error rather than a shorter list.
pub fn parse_listapps(text: &str) -> Result<Vec<FirewallRule>, ListAppsError> {
    let mut said = None;
    let mut rules: Vec<FirewallRule> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(count) = count_line(line) {
            said = Some(count);
        } else if let Some(allowed) = state_line(line) {
            if let Some(rule) = rules.last_mut().filter(|r| r.allowed.is_none()) {
                rule.allowed = allowed;
            }
        } else if let Some(path) = rule_line(line) {
            rules.push(FirewallRule {
                path: path.to_owned(),
                allowed: None,
            });
        }
    }
    let said = said.ok_or(ListAppsError::NoCount)?;
    if said != rules.len() {
        return Err(ListAppsError::CountMismatch {
            said,
            listed: rules.len(),
        });
    }
    Ok(rules)
}

/// `ALF: total number of apps = 7` or `Total number of apps = 9`.
fn count_line(line: &str) -> Option<usize> {
    let line = line.strip_prefix("ALF:").map_or(line, str::trim_start);
    let rest = line
        .get(..22)
        .filter(|head| head.eq_ignore_ascii_case("total number of apps ="))
        .and_then(|_| line.get(22..))?;
    rest.trim().parse().ok()
}

/// `( Allow incoming connections )`: `Some(Some(true))`; a parenthesised
/// state this parser does not know: `Some(None)`.
fn state_line(line: &str) -> Option<Option<bool>> {
    let inner = line.strip_prefix('(')?.strip_suffix(')')?.trim();
    Some(
        if inner.eq_ignore_ascii_case("allow incoming connections") {
            Some(true)
        } else if inner.eq_ignore_ascii_case("block incoming connections") {
            Some(false)
        } else {
            None
        },
    )
}

/// `3 :  /usr/local/bin/meshd`.
fn rule_line(line: &str) -> Option<&str> {
    let (number, path) = line.split_once(':')?;
    let number = number.trim();
    let path = path.trim();
    (!number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) && !path.is_empty())
        .then_some(path)
}

/// The file name of meshd's binary, which identifies its rules.
pub const MESHD_BINARY_NAME: &str = "meshd";

/// The firewall fact from both outputs (`None` where one could not be
/// had), keeping only the rules for binaries named meshd, and the reasons
/// what could not be read stays unknown.
pub fn firewall_fact(
    global_state: Option<&str>,
    listapps: Option<&str>,
) -> (FirewallFact, Vec<String>) {
    let mut blind = Vec::new();
    let (enabled, block_all) = match global_state.map(parse_global_state) {
        Some(GlobalState::Unknown(text)) => {
            blind.push(format!(
                "socketfilterfw --getglobalstate: no (State = 0, 1 or 2) in {text:?}"
            ));
            (None, None)
        }
        Some(state) => state.enabled_and_block_all(),
        None => (None, None),
    };
    let meshd_rules = listapps.and_then(|text| match parse_listapps(text) {
        Ok(rules) => Some(
            rules
                .into_iter()
                .filter(|r| r.path.rsplit('/').next() == Some(MESHD_BINARY_NAME))
                .collect(),
        ),
        Err(error) => {
            blind.push(format!("socketfilterfw --listapps: {error}"));
            None
        }
    });
    (
        FirewallFact {
            enabled,
            block_all,
            meshd_rules,
        },
        blind,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_number_decides_whatever_the_words() {
        assert_eq!(
            parse_global_state("Firewall is disabled. (State = 0)\n"),
            GlobalState::Off
        );
        assert_eq!(
            parse_global_state("Firewall is enabled. (State = 1)\n"),
            GlobalState::On
        );
        assert_eq!(
            parse_global_state("Firewall is enabled. (State = 2)\n"),
            GlobalState::BlockAll
        );
        assert_eq!(
            parse_global_state(
                "Firewall is blocking all non-essential incoming connections. (State = 2)\n"
            ),
            GlobalState::BlockAll
        );
        for odd in [
            "",
            "Firewall is enabled.\n",
            "Firewall is enabled. (State = 7)",
            "socketfilterfw: permission denied",
        ] {
            assert!(
                matches!(parse_global_state(odd), GlobalState::Unknown(_)),
                "{odd:?}"
            );
        }
    }

    #[test]
    fn rules_and_their_states_in_both_layouts() {
        let old = "ALF: total number of apps = 2 \n\n1 :  /Applications/Foo.app \n \t ( Allow incoming connections ) \n\n2 :  /usr/local/bin/meshd \n \t ( Block incoming connections ) \n";
        assert_eq!(
            parse_listapps(old),
            Ok(vec![
                FirewallRule {
                    path: "/Applications/Foo.app".into(),
                    allowed: Some(true)
                },
                FirewallRule {
                    path: "/usr/local/bin/meshd".into(),
                    allowed: Some(false)
                },
            ])
        );
        let new = "Total number of apps = 1\n1 : /usr/local/bin/meshd\n             (Allow incoming connections)\n";
        assert_eq!(
            parse_listapps(new),
            Ok(vec![FirewallRule {
                path: "/usr/local/bin/meshd".into(),
                allowed: Some(true)
            }])
        );
        assert_eq!(parse_listapps("Total number of apps = 0\n"), Ok(Vec::new()));
    }

    #[test]
    fn a_rule_in_an_unknown_state_is_listed_without_one() {
        let text = "Total number of apps = 1\n1 : /usr/local/bin/meshd\n (Allow incoming connections with restrictions)\n";
        assert_eq!(
            parse_listapps(text),
            Ok(vec![FirewallRule {
                path: "/usr/local/bin/meshd".into(),
                allowed: None
            }])
        );
    }

    #[test]
    fn truncated_or_reworded_output_is_an_error_not_a_shorter_list() {
        assert_eq!(
            parse_listapps("1 : /usr/local/bin/meshd\n (Allow incoming connections)\n"),
            Err(ListAppsError::NoCount)
        );
        assert_eq!(
            parse_listapps(
                "Total number of apps = 3\n1 : /usr/local/bin/meshd\n (Allow incoming connections)\n"
            ),
            Err(ListAppsError::CountMismatch { said: 3, listed: 1 })
        );
        assert_eq!(
            parse_listapps("Total number of apps = lots\n"),
            Err(ListAppsError::NoCount)
        );
    }

    #[test]
    fn only_meshds_rules_are_kept_and_unknowns_are_named() {
        let listing = "Total number of apps = 3\n1 : /usr/sbin/smbd\n (Allow incoming connections)\n2 : /usr/local/bin/meshd\n (Block incoming connections)\n3 : /opt/meshd-tools/bin/meshdctl\n (Allow incoming connections)\n";
        let (fact, blind) =
            firewall_fact(Some("Firewall is enabled. (State = 1)\n"), Some(listing));
        assert_eq!(
            fact,
            FirewallFact {
                enabled: Some(true),
                block_all: Some(false),
                meshd_rules: Some(vec![FirewallRule {
                    path: "/usr/local/bin/meshd".into(),
                    allowed: Some(false)
                }]),
            }
        );
        assert!(blind.is_empty());
        let (fact, blind) = firewall_fact(Some("huh"), Some("garbage"));
        assert_eq!(fact, FirewallFact::default());
        assert_eq!(
            blind,
            [
                "socketfilterfw --getglobalstate: no (State = 0, 1 or 2) in \"huh\"",
                "socketfilterfw --listapps: no `Total number of apps = N` line",
            ]
        );
        assert_eq!(firewall_fact(None, None), (FirewallFact::default(), vec![]));
    }
}
