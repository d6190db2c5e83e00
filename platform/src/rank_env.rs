//! Which distributed job a process is a rank of, from what MLX's launcher
//! puts in its environment at exec: `MLX_RANK`, and for JACCL
//! `MLX_JACCL_COORDINATOR` (rank 0's `ip:port`, the same for every rank of
//! a job) with `MLX_IBV_DEVICES` (the path of a JSON n×n matrix: row i
//! names rank i's RDMA device towards each rank, `null` on the diagonal),
//! or for the TCP ring `MLX_HOSTFILE` (the path of a JSON list, one entry
//! of `ip:port` addresses per rank). A launcher that sets them inside the
//! rank after it started (exo does, with `os.environ`) leaves nothing here
//! to read: such ranks are found by name only. The variables and a reader
//! of the files they name come in, so it is tested without processes.

use meshd_domain::jobs::{JobBackend, MAX_JOB_TEXT, MAX_RANKS, RankIdentity};
use serde_json::Value;

/// The variables read, and nothing else of a process's environment.
pub const MLX_VARIABLES: [&str; 5] = [
    "MLX_RANK",
    "MLX_JACCL_COORDINATOR",
    "MLX_IBV_DEVICES",
    "MLX_HOSTFILE",
    "MLX_WORLD_SIZE",
];

/// The largest device matrix or ring hostfile read, in bytes: an 8-rank
/// matrix is a few hundred.
pub const MAX_RANK_FILE_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RankEnvError {
    #[error("{variable}={value:?} is not {what}")]
    Variable {
        variable: &'static str,
        value: String,
        what: &'static str,
    },
    #[error("{variable} names {path:?}, {problem}")]
    File {
        variable: &'static str,
        path: String,
        problem: String,
    },
}

/// The rank `variable` (one of [`MLX_VARIABLES`]) and `read` (a file's text,
/// at most [`MAX_RANK_FILE_BYTES`], or why not) describe; `Ok(None)` for a
/// process that is no MLX rank.
pub fn rank_identity(
    variable: impl Fn(&str) -> Option<String>,
    read: impl Fn(&str) -> Result<String, String>,
) -> Result<Option<RankIdentity>, RankEnvError> {
    let Some(rank_text) = variable("MLX_RANK") else {
        return Ok(None);
    };
    let rank = number("MLX_RANK", &rank_text, "a rank number (0 to 64)")?;
    let stated_world = variable("MLX_WORLD_SIZE")
        .map(|w| number("MLX_WORLD_SIZE", &w, "a world size (up to 64)"))
        .transpose()?;
    let (backend, job, file_variable) = match (
        variable("MLX_JACCL_COORDINATOR"),
        variable("MLX_IBV_DEVICES"),
        variable("MLX_HOSTFILE"),
    ) {
        (Some(coordinator), Some(devices), _) => (
            JobBackend::Jaccl,
            Some(coordinator),
            ("MLX_IBV_DEVICES", devices),
        ),
        (_, _, Some(hostfile)) => (JobBackend::Ring, None, ("MLX_HOSTFILE", hostfile)),
        // MLX_RANK alone (a single-host run, or a launcher this build does
        // not know): no job to place it in.
        _ => return Ok(None),
    };
    let (variable_name, path) = file_variable;
    let file_error = |problem: String| RankEnvError::File {
        variable: variable_name,
        path: path.clone(),
        problem,
    };
    let entries = match read(&path) {
        Ok(text) => Some(rows(&text).map_err(file_error)?),
        // A file removed after the launch still leaves the job and rank.
        Err(_) if job.is_some() => None,
        Err(why) => return Err(file_error(why)),
    };
    let world = entries
        .as_ref()
        .map(|e| u32::try_from(e.len()).unwrap_or(u32::MAX))
        .or(stated_world);
    if let Some(world) = world
        && rank >= world
    {
        return Err(RankEnvError::Variable {
            variable: "MLX_RANK",
            value: rank_text,
            what: "a rank of the job's world",
        });
    }
    let entries = entries.unwrap_or_default();
    let row = usize::try_from(rank).ok().and_then(|r| entries.get(r));
    let (job, devices) = match backend {
        JobBackend::Jaccl => {
            let job = job.unwrap_or_default();
            bounded("MLX_JACCL_COORDINATOR", &job)?;
            let devices = row.map_or_else(Vec::new, |cells| {
                cells.iter().map(|c| c.first().cloned()).collect()
            });
            (job, devices)
        }
        JobBackend::Ring => {
            let first = entries
                .first()
                .and_then(|cells| cells.first())
                .and_then(|names| names.first())
                .ok_or_else(|| file_error("a ring hostfile without rank 0's address".to_owned()))?;
            (format!("ring {first}"), Vec::new())
        }
    };
    Ok(Some(RankIdentity {
        job,
        backend,
        rank,
        world,
        devices,
    }))
}

fn number(variable: &'static str, value: &str, what: &'static str) -> Result<u32, RankEnvError> {
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| usize::try_from(*n).is_ok_and(|n| n <= MAX_RANKS))
        .ok_or_else(|| RankEnvError::Variable {
            variable,
            value: value.chars().take(MAX_JOB_TEXT).collect(),
            what,
        })
}

fn bounded(variable: &'static str, value: &str) -> Result<(), RankEnvError> {
    if value.is_empty() || value.len() > MAX_JOB_TEXT || value.chars().any(char::is_control) {
        return Err(RankEnvError::Variable {
            variable,
            value: value.chars().take(MAX_JOB_TEXT).collect(),
            what: "a job id (1 to 128 printable characters)",
        });
    }
    Ok(())
}

/// The file's entries, one per rank, each a list of names (a device matrix
/// row's cells, or a ring rank's addresses): `null` is an empty list.
fn rows(text: &str) -> Result<Vec<Vec<Vec<String>>>, String> {
    if text.len() > MAX_RANK_FILE_BYTES {
        return Err(format!("{} bytes, over {MAX_RANK_FILE_BYTES}", text.len()));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Array(ranks) = value else {
        return Err("not a JSON list".to_owned());
    };
    if ranks.is_empty() || ranks.len() > MAX_RANKS {
        return Err(format!("{} ranks; 1 to {MAX_RANKS} expected", ranks.len()));
    }
    ranks
        .iter()
        .enumerate()
        .map(|(i, entry)| match entry {
            Value::Array(cells) => cells
                .iter()
                .map(names)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("entry {i}: not a list of names")),
            single => names(single)
                .map(|n| vec![n])
                .ok_or_else(|| format!("entry {i}: not a name or a list")),
        })
        .collect()
}

/// A cell: `null`, a name, or a list of names (several cables to one rank).
fn names(cell: &Value) -> Option<Vec<String>> {
    let name = |v: &Value| {
        v.as_str()
            .filter(|s| !s.is_empty() && s.len() <= MAX_JOB_TEXT)
            .map(str::to_owned)
    };
    match cell {
        Value::Null => Some(Vec::new()),
        Value::String(_) => name(cell).map(|n| vec![n]),
        Value::Array(list) => list.iter().map(name).collect(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A 2-node JACCL device matrix as exo logged it for its ranks.
    const EXO_MATRIX: &str = r#"[[null, "rdma_en4"], ["rdma_en5", null]]"#;

    fn identity(
        vars: &[(&str, &str)],
        files: &[(&str, &str)],
    ) -> Result<Option<RankIdentity>, RankEnvError> {
        let vars: BTreeMap<&str, &str> = vars.iter().copied().collect();
        let files: BTreeMap<&str, &str> = files.iter().copied().collect();
        rank_identity(
            |name| vars.get(name).map(|v| (*v).to_owned()),
            |path| {
                files
                    .get(path)
                    .map(|t| (*t).to_owned())
                    .ok_or_else(|| "No such file or directory".to_owned())
            },
        )
    }

    #[test]
    fn a_jaccl_rank_is_its_coordinator_rank_world_and_devices() {
        let found = identity(
            &[
                ("MLX_RANK", "1"),
                ("MLX_JACCL_COORDINATOR", "192.168.0.10:32323"),
                ("MLX_IBV_DEVICES", "/tmp/devices.json"),
            ],
            &[("/tmp/devices.json", EXO_MATRIX)],
        );
        assert_eq!(
            found,
            Ok(Some(RankIdentity {
                job: "192.168.0.10:32323".to_owned(),
                backend: JobBackend::Jaccl,
                rank: 1,
                world: Some(2),
                devices: vec![Some("rdma_en5".to_owned()), None],
            }))
        );
    }

    #[test]
    fn a_removed_device_file_leaves_the_job_and_rank_but_no_world() {
        let vars = [
            ("MLX_RANK", "0"),
            ("MLX_JACCL_COORDINATOR", "10.0.0.1:5000"),
            ("MLX_IBV_DEVICES", "/gone.json"),
        ];
        let found = identity(&vars, &[]).expect("read").expect("a rank");
        assert_eq!((found.rank, found.world), (0, None));
        assert!(found.devices.is_empty());
        let stated = [&vars[..], &[("MLX_WORLD_SIZE", "4")]].concat();
        let found = identity(&stated, &[]).expect("read").expect("a rank");
        assert_eq!(found.world, Some(4));
    }

    #[test]
    fn a_ring_rank_is_named_after_rank_0s_address() {
        let hostfile = r#"[["10.0.1.1:5000"], ["10.0.1.2:5000"], ["10.0.1.3:5000"]]"#;
        let found = identity(
            &[("MLX_RANK", "2"), ("MLX_HOSTFILE", "/h.json")],
            &[("/h.json", hostfile)],
        )
        .expect("read")
        .expect("a rank");
        assert_eq!(found.job, "ring 10.0.1.1:5000");
        assert_eq!(
            (found.backend, found.rank, found.world),
            (JobBackend::Ring, 2, Some(3))
        );
    }

    #[test]
    fn processes_without_a_job_are_no_ranks() {
        assert_eq!(identity(&[], &[]), Ok(None));
        assert_eq!(identity(&[("MLX_RANK", "0")], &[]), Ok(None));
    }

    #[test]
    fn bad_variables_and_files_are_named_never_guessed() {
        let jaccl = |rank: &str| {
            identity(
                &[
                    ("MLX_RANK", rank),
                    ("MLX_JACCL_COORDINATOR", "10.0.0.1:5000"),
                    ("MLX_IBV_DEVICES", "/d.json"),
                ],
                &[("/d.json", EXO_MATRIX)],
            )
        };
        assert_eq!(
            jaccl("x").unwrap_err().to_string(),
            "MLX_RANK=\"x\" is not a rank number (0 to 64)"
        );
        assert_eq!(
            jaccl("2").unwrap_err().to_string(),
            "MLX_RANK=\"2\" is not a rank of the job's world"
        );
        let with_file = |text: &str| {
            identity(
                &[
                    ("MLX_RANK", "0"),
                    ("MLX_JACCL_COORDINATOR", "10.0.0.1:5000"),
                    ("MLX_IBV_DEVICES", "/d.json"),
                ],
                &[("/d.json", text)],
            )
            .unwrap_err()
            .to_string()
        };
        assert_eq!(
            with_file("{"),
            "MLX_IBV_DEVICES names \"/d.json\", not JSON: EOF while parsing an object at line 1 column 1"
        );
        assert_eq!(
            with_file("[]"),
            "MLX_IBV_DEVICES names \"/d.json\", 0 ranks; 1 to 64 expected"
        );
        assert_eq!(
            with_file("[[null, 7]]"),
            "MLX_IBV_DEVICES names \"/d.json\", entry 0: not a list of names"
        );
        let huge = format!("[{}]", vec!["null"; 70_000].join(","));
        assert!(with_file(&huge).contains("bytes, over 65536"));
        let ring = identity(&[("MLX_RANK", "0"), ("MLX_HOSTFILE", "/missing")], &[]);
        assert_eq!(
            ring.unwrap_err().to_string(),
            "MLX_HOSTFILE names \"/missing\", No such file or directory"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_environment_and_file_is_an_answer_never_a_panic(
            rank in "\\PC{0,8}",
            coordinator in "\\PC{0,140}",
            file in "\\PC{0,300}",
        ) {
            let _ = identity(
                &[
                    ("MLX_RANK", &rank),
                    ("MLX_JACCL_COORDINATOR", &coordinator),
                    ("MLX_IBV_DEVICES", "/f"),
                ],
                &[("/f", &file)],
            );
        }
    }
}
