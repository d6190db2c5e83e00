//! `meshctl jobs`: every distributed job the mesh's nodes run, rank by rank,
//! and why a job hangs when it does.

use std::fmt::Write as _;
use std::time::SystemTime;

use meshd_domain::MeshStatus;
use meshd_domain::jobs::{JobView, RankView};
use serde::Serialize;

use crate::client::{self, Target};
use crate::layout::{hanging, table};
use crate::outcome::{Failure, emit};

/// Prints the jobs; `Ok(true)` when none is hung.
pub async fn run(target: &Target, json: bool) -> Result<bool, Failure> {
    let status = client::status(target).await?;
    if json {
        let doc = JobsDocument {
            node: status.node.id.as_str(),
            jobs: status.jobs.iter().map(JobJson::from).collect(),
        };
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| Failure::Refused(format!("cannot encode the jobs as JSON: {e}")))?;
        emit(&format!("{text}\n"))?;
    } else {
        emit(&render(&status, SystemTime::now()))?;
    }
    Ok(status.jobs.iter().all(|j| j.hung.is_none()))
}

#[derive(Debug, Serialize)]
struct JobsDocument<'a> {
    /// The node that answered.
    node: &'a str,
    jobs: Vec<JobJson<'a>>,
}

/// One job in `meshctl jobs --json` and `meshctl status --json`. Fields are
/// only ever added.
#[derive(Debug, Serialize)]
pub struct JobJson<'a> {
    job: &'a str,
    backend: &'static str,
    /// `null` when no rank's environment says.
    world: Option<u32>,
    /// Why it hangs; `null` while it does not.
    hung: Option<&'a str>,
    since: String,
    ranks: Vec<RankJson<'a>>,
}

#[derive(Debug, Serialize)]
struct RankJson<'a> {
    rank: u32,
    node: &'a str,
    pid: u32,
    name: &'a str,
    /// live, stopped, gone, restarted or unheard.
    condition: &'static str,
    /// Burning a core or more: spinning, when its job waits.
    busy: bool,
}

impl<'a> From<&'a JobView> for JobJson<'a> {
    fn from(j: &'a JobView) -> Self {
        Self {
            job: &j.job,
            backend: j.backend.as_str(),
            world: j.world,
            hung: j.hung.as_deref(),
            since: crate::status::rfc3339(j.since),
            ranks: j
                .ranks
                .iter()
                .map(|r: &'a RankView| RankJson {
                    rank: r.rank,
                    node: r.node.as_str(),
                    pid: r.pid,
                    name: &r.name,
                    condition: r.condition.as_str(),
                    busy: r.busy,
                })
                .collect(),
        }
    }
}

pub fn render(status: &MeshStatus, now: SystemTime) -> String {
    let mut out = String::new();
    if status.jobs.is_empty() {
        let _ = writeln!(
            out,
            "no jobs: no process on a node {} hears was started with MLX's launch variables \
             (MLX_RANK with MLX_JACCL_COORDINATOR, or MLX_HOSTFILE)",
            status.node.id
        );
        return out;
    }
    for (i, job) in status.jobs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let world = job
            .world
            .map_or_else(|| "world unknown".to_owned(), |w| format!("{w} ranks"));
        let _ = writeln!(
            out,
            "job {} ({}, {world}), seen for {}",
            job.job,
            job.backend,
            crate::status::ago(now, job.since)
        );
        match &job.hung {
            Some(why) => hanging(&mut out, "  HUNG: ", why),
            None => {
                let _ = writeln!(out, "  running");
            }
        }
        let mut rows = vec![
            ["RANK", "NODE", "PID", "PROCESS", "CONDITION", "CPU"]
                .map(str::to_owned)
                .to_vec(),
        ];
        rows.extend(job.ranks.iter().map(|r| {
            vec![
                r.rank.to_string(),
                r.node.to_string(),
                r.pid.to_string(),
                r.name.clone(),
                r.condition.to_string(),
                if r.busy { "spinning" } else { "" }.to_owned(),
            ]
        }));
        table(&mut out, &rows);
    }
    out
}

#[cfg(test)]
mod tests {
    use meshd_domain::fixtures::{empty_status, id, wall};
    use meshd_domain::jobs::{JobBackend, RankCondition};

    use super::*;

    fn status(jobs: Vec<JobView>) -> MeshStatus {
        MeshStatus {
            jobs,
            ..empty_status("a", wall(100))
        }
    }

    fn hung_job() -> JobView {
        let rank = |rank, node: &str, condition, busy| RankView {
            rank,
            node: id(node),
            pid: 100 + rank,
            name: "python3".to_owned(),
            condition,
            busy,
        };
        JobView {
            job: "10.78.0.1:7430".to_owned(),
            backend: JobBackend::Jaccl,
            world: Some(2),
            ranks: vec![
                rank(0, "a", RankCondition::Live, true),
                rank(1, "b", RankCondition::Stopped, false),
            ],
            hung: Some("job 10.78.0.1:7430 hangs: rank 1 (pid 101) on b is stopped".to_owned()),
            since: wall(40),
        }
    }

    #[test]
    fn a_hung_job_shows_why_and_each_rank() {
        let text = render(&status(vec![hung_job()]), wall(100));
        assert!(
            text.starts_with("job 10.78.0.1:7430 (jaccl, 2 ranks), seen for 1m"),
            "{text}"
        );
        assert!(
            text.contains("HUNG: job 10.78.0.1:7430 hangs: rank 1 (pid 101) on b is stopped"),
            "{text}"
        );
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with(char::is_numeric))
            .collect();
        assert_eq!(rows.len(), 2, "{text}");
        assert!(
            rows[0].contains("live") && rows[0].contains("spinning"),
            "{text}"
        );
        assert!(
            rows[1].contains("stopped") && !rows[1].contains("spinning"),
            "{text}"
        );
        assert!(
            text.lines()
                .all(|l| l.chars().count() <= crate::layout::WIDTH),
            "{text}"
        );
    }

    #[test]
    fn no_job_says_what_was_looked_for() {
        let text = render(&status(vec![]), wall(100));
        assert!(
            text.starts_with("no jobs: no process on a node a hears"),
            "{text}"
        );
    }

    #[test]
    fn json_names_every_rank_and_the_reason() {
        let job = hung_job();
        let value = serde_json::to_value(JobJson::from(&job)).expect("json");
        assert_eq!(value["world"], 2);
        assert_eq!(value["backend"], "jaccl");
        assert_eq!(value["ranks"][1]["condition"], "stopped");
        assert_eq!(value["ranks"][0]["busy"], true);
        assert!(
            value["hung"]
                .as_str()
                .is_some_and(|h| h.contains("on b is stopped"))
        );
        let mut running = job;
        running.hung = None;
        running.world = None;
        let value = serde_json::to_value(JobJson::from(&running)).expect("json");
        assert!(value["hung"].is_null() && value["world"].is_null());
    }
}
