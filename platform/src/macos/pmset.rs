//! `pmset -g`: the power settings in use.
//!
//! ```text
//! System-wide power settings:
//!  SleepDisabled        1
//! Currently in use:
//!  standby              1
//!  Sleep On Power Button 1
//!  autorestart          0
//!  disksleep            10
//!  sleep                1 (sleep prevented by sharingd, coreaudiod)
//! ```
//!
//! One setting per line, its name (which may hold spaces) then its value,
//! then sometimes a parenthesised note. Which lines appear depends on the
//! Mac: a MacBook has no `autorestart`, a Mac without `pmset disablesleep`
//! ever set has no `SleepDisabled`.

use meshd_domain::facts::PowerSettings;

/// The settings meshd judges; `None` when `text` names none of them (not
/// `pmset -g` output).
pub fn parse_pmset(text: &str) -> Option<PowerSettings> {
    let mut settings = PowerSettings::default();
    let mut seen = false;
    for line in text.lines() {
        let Some((name, value, note)) = setting(line) else {
            continue;
        };
        match name {
            "sleep" => {
                settings.sleep_minutes = value.parse().ok();
                if let Some(holders) = note.and_then(|n| n.strip_prefix("sleep prevented by ")) {
                    settings.sleep_prevented_by = holders
                        .split(',')
                        .map(str::trim)
                        .filter(|h| !h.is_empty())
                        .map(str::to_owned)
                        .collect();
                }
            }
            "disksleep" => settings.disk_sleep_minutes = value.parse().ok(),
            "autorestart" => settings.auto_restart = flag(value),
            "SleepDisabled" => settings.sleep_disabled = flag(value),
            _ => continue,
        }
        seen = true;
    }
    seen.then_some(settings)
}

/// " sleep                1 (sleep prevented by x)" → ("sleep", "1",
/// Some("sleep prevented by x")). Names are one word except "Sleep On
/// Power Button", which meshd does not read.
fn setting(line: &str) -> Option<(&str, &str, Option<&str>)> {
    let (head, note) = match line.split_once('(') {
        Some((head, rest)) => (head, Some(rest.trim_end().trim_end_matches(')').trim())),
        None => (line, None),
    };
    let mut words = head.split_whitespace();
    let name = words.next()?;
    let value = words.next()?;
    if words.next().is_some() {
        return None;
    }
    Some((name, value, note))
}

fn flag(value: &str) -> Option<bool> {
    match value {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_notes_and_missing_lines() {
        let settings = parse_pmset(
            "System-wide power settings:\n SleepDisabled\t\t1\nCurrently in use:\n \
             Sleep On Power Button 1\n disksleep            0\n \
             sleep                0 (sleep prevented by sharingd, powerd, caffeinate)\n \
             displaysleep         0 (display sleep prevented by caffeinate)\n",
        )
        .expect("pmset");
        assert_eq!(
            settings,
            PowerSettings {
                sleep_minutes: Some(0),
                disk_sleep_minutes: Some(0),
                auto_restart: None,
                sleep_disabled: Some(true),
                sleep_prevented_by: vec!["sharingd".into(), "powerd".into(), "caffeinate".into()],
            }
        );
    }

    #[test]
    fn unreadable_values_stay_unknown_and_other_text_is_none() {
        let settings = parse_pmset(" sleep x\n autorestart 2\n").expect("named");
        assert_eq!(
            (settings.sleep_minutes, settings.auto_restart),
            (None, None)
        );
        assert_eq!(parse_pmset("pmset: command not found\n"), None);
        assert_eq!(parse_pmset(""), None);
    }
}
