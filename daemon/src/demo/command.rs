//! The demo's command language, one command a line. Pure: the parser is
//! given the node names and returns node indices, so an unknown node or a
//! bad number is an error here, before anything is touched.

use std::time::Duration;

/// Longer than any probe timeout meshd accepts (10 s): more delay than this
/// is indistinguishable from a cut.
pub const MAX_SLOW_MILLIS: u64 = 10_000;

/// A parsed command; nodes are indices into the plan's node list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Cut(usize, usize),
    HealLink(usize, usize),
    Slow(usize, usize, Duration),
    Lossy(usize, usize, u8),
    Kill(usize),
    Revive(usize),
    Partition(Vec<Vec<usize>>),
    HealAll,
    Help,
    Quit,
}

/// One line per command, for `help` and the start banner.
pub const USAGE: &[(&str, &str)] = &[
    ("cut A B", "the cable A-B drops everything"),
    ("heal A B", "the cable A-B works again"),
    (
        "slow A B MILLIS",
        "adds MILLIS to every round trip on A-B (0 to 10000)",
    ),
    (
        "lossy A B PERCENT",
        "drops PERCENT of the probes on A-B (0 to 100)",
    ),
    ("kill A", "stops node A"),
    ("revive A", "starts node A again (a new incarnation)"),
    (
        "partition A,B C,D",
        "splits the management network between the groups",
    ),
    (
        "heal",
        "every cable and the network work again, killed nodes revive",
    ),
    ("help", "this list"),
    ("quit", "stops every node and exits"),
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("unknown command {0:?}; type help for the list")]
    UnknownCommand(String),
    #[error("wrong number of arguments; usage: {0}")]
    Usage(&'static str),
    #[error("unknown node {name:?}; the nodes are {known}")]
    UnknownNode { name: String, known: String },
    #[error("{0} and {0} are the same node; a cable joins two different nodes")]
    SameNode(String),
    #[error("{value:?} is not a {what}; use a whole number from 0 to {max}")]
    BadNumber {
        value: String,
        what: &'static str,
        max: u64,
    },
    #[error("partition needs at least two groups, like: partition a,b c,d")]
    OneGroup,
    #[error("empty node name in group {0:?}; separate names with a single comma")]
    EmptyName(String),
    #[error("node {0} is in more than one group")]
    Repeated(String),
}

/// Parses one line. A blank line or a `#` comment is `Ok(None)`.
pub fn parse(line: &str, nodes: &[&str]) -> Result<Option<Command>, CommandError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&verb, args)) = words.split_first() else {
        return Ok(None);
    };
    if verb.starts_with('#') {
        return Ok(None);
    }
    let node = |name: &str| resolve(name, nodes);
    let pair = |usage: &'static str| -> Result<(usize, usize), CommandError> {
        let [a, b, ..] = args else {
            return Err(CommandError::Usage(usage));
        };
        let (i, j) = (node(a)?, node(b)?);
        if i == j {
            return Err(CommandError::SameNode(nodes[i].to_owned()));
        }
        Ok((i, j))
    };
    let arity = |n: usize, usage: &'static str| {
        if args.len() == n {
            Ok(())
        } else {
            Err(CommandError::Usage(usage))
        }
    };
    let command = match verb.to_ascii_lowercase().as_str() {
        "cut" => {
            arity(2, "cut A B")?;
            let (a, b) = pair("cut A B")?;
            Command::Cut(a, b)
        }
        "heal" if args.is_empty() => Command::HealAll,
        "heal" => {
            arity(2, "heal A B, or heal alone for everything")?;
            let (a, b) = pair("heal A B")?;
            Command::HealLink(a, b)
        }
        "slow" => {
            arity(3, "slow A B MILLIS")?;
            let (a, b) = pair("slow A B MILLIS")?;
            let ms = number(args[2], "delay in milliseconds", MAX_SLOW_MILLIS)?;
            Command::Slow(a, b, Duration::from_millis(ms))
        }
        "lossy" => {
            arity(3, "lossy A B PERCENT")?;
            let (a, b) = pair("lossy A B PERCENT")?;
            let percent = number(args[2], "loss percentage", 100)?;
            Command::Lossy(a, b, u8::try_from(percent).unwrap_or(100))
        }
        "kill" => {
            arity(1, "kill A")?;
            Command::Kill(node(args[0])?)
        }
        "revive" => {
            arity(1, "revive A")?;
            Command::Revive(node(args[0])?)
        }
        "partition" => Command::Partition(groups(args, nodes)?),
        "help" => {
            arity(0, "help")?;
            Command::Help
        }
        "quit" | "exit" => {
            arity(0, "quit")?;
            Command::Quit
        }
        _ => return Err(CommandError::UnknownCommand(verb.to_owned())),
    };
    Ok(Some(command))
}

fn resolve(name: &str, nodes: &[&str]) -> Result<usize, CommandError> {
    nodes
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
        .ok_or_else(|| CommandError::UnknownNode {
            name: name.to_owned(),
            known: nodes.join(", "),
        })
}

fn number(value: &str, what: &'static str, max: u64) -> Result<u64, CommandError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| *n <= max)
        .ok_or_else(|| CommandError::BadNumber {
            value: value.to_owned(),
            what,
            max,
        })
}

fn groups(args: &[&str], nodes: &[&str]) -> Result<Vec<Vec<usize>>, CommandError> {
    if args.len() < 2 {
        return Err(CommandError::OneGroup);
    }
    let mut seen = vec![false; nodes.len()];
    let mut groups = Vec::with_capacity(args.len());
    for arg in args {
        let mut group = Vec::new();
        for name in arg.split(',') {
            if name.is_empty() {
                return Err(CommandError::EmptyName((*arg).to_owned()));
            }
            let i = resolve(name, nodes)?;
            if std::mem::replace(&mut seen[i], true) {
                return Err(CommandError::Repeated(nodes[i].to_owned()));
            }
            group.push(i);
        }
        groups.push(group);
    }
    Ok(groups)
}

/// The whole command list on one line, as `help` answers.
pub fn help_line() -> String {
    let names: Vec<&str> = USAGE.iter().map(|(usage, _)| *usage).collect();
    format!("commands: {}", names.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &[&str] = &["a", "b", "c", "d"];

    fn ok(line: &str) -> Command {
        parse(line, NODES)
            .unwrap_or_else(|e| panic!("{line:?}: {e}"))
            .unwrap_or_else(|| panic!("{line:?}: no command"))
    }

    fn err(line: &str) -> String {
        parse(line, NODES)
            .expect_err(&format!("{line:?} must be refused"))
            .to_string()
    }

    #[test]
    fn accepts_every_command() {
        assert_eq!(ok("cut a b"), Command::Cut(0, 1));
        assert_eq!(ok("  heal   c  D "), Command::HealLink(2, 3));
        assert_eq!(
            ok("slow a d 250"),
            Command::Slow(0, 3, Duration::from_millis(250))
        );
        assert_eq!(ok("lossy b c 30"), Command::Lossy(1, 2, 30));
        assert_eq!(ok("lossy b c 0"), Command::Lossy(1, 2, 0));
        assert_eq!(ok("lossy b c 100"), Command::Lossy(1, 2, 100));
        assert_eq!(ok("kill c"), Command::Kill(2));
        assert_eq!(ok("REVIVE C"), Command::Revive(2));
        assert_eq!(
            ok("partition a,b c,d"),
            Command::Partition(vec![vec![0, 1], vec![2, 3]])
        );
        assert_eq!(
            ok("partition a b"),
            Command::Partition(vec![vec![0], vec![1]])
        );
        assert_eq!(ok("heal"), Command::HealAll);
        assert_eq!(ok("help"), Command::Help);
        assert_eq!(ok("quit"), Command::Quit);
    }

    #[test]
    fn blank_lines_and_comments_are_nothing() {
        assert_eq!(parse("", NODES), Ok(None));
        assert_eq!(parse("   \t", NODES), Ok(None));
        assert_eq!(parse("# cut a b", NODES), Ok(None));
    }

    #[test]
    fn refuses_malformed_commands_naming_the_problem() {
        let cases: &[(&str, &str)] = &[
            ("explode a b", "unknown command \"explode\""),
            ("cut a", "usage: cut A B"),
            ("cut a b c", "usage: cut A B"),
            ("cut a z", "unknown node \"z\"; the nodes are a, b, c, d"),
            ("cut b b", "same node"),
            ("heal a", "usage: heal A B"),
            ("slow a b", "usage: slow A B MILLIS"),
            ("slow a b fast", "\"fast\" is not a delay in milliseconds"),
            ("slow a b -5", "\"-5\" is not a delay"),
            ("slow a b 10001", "0 to 10000"),
            ("lossy a b 101", "\"101\" is not a loss percentage"),
            ("lossy a b 2.5", "\"2.5\" is not a loss percentage"),
            ("lossy x b 5", "unknown node \"x\""),
            ("kill", "usage: kill A"),
            ("kill a b", "usage: kill A"),
            ("kill q", "unknown node \"q\""),
            ("revive", "usage: revive A"),
            ("partition a,b", "at least two groups"),
            ("partition", "at least two groups"),
            ("partition a,,b c", "empty node name in group \"a,,b\""),
            ("partition a,b b,c", "node b is in more than one group"),
            ("partition a,e c", "unknown node \"e\""),
            ("help me", "usage: help"),
            ("quit now", "usage: quit"),
        ];
        for (line, expected) in cases {
            let message = err(line);
            assert!(
                message.contains(expected),
                "{line:?}: {message:?} does not mention {expected:?}"
            );
        }
    }

    #[test]
    fn help_names_every_command() {
        let help = help_line();
        for verb in [
            "cut",
            "heal",
            "slow",
            "lossy",
            "kill",
            "revive",
            "partition",
            "quit",
        ] {
            assert!(help.contains(verb), "{help}");
        }
        assert!(!help.contains('\n'));
    }
}
