//! Job ranks in the reports and jobs in the status. A peer's ranks are
//! checked like everything else it sends: bounded counts and texts, known
//! enums, rank numbers inside their world.

use meshd_domain::jobs::{JobRank, JobView, MAX_JOB_TEXT, MAX_RANKS, RankView};

use super::{
    Result, WireError, at_most, bounded, each, job_backend, job_backend_wire, node_id, non_empty,
    process_state, process_state_wire, rank_condition, rank_condition_wire, time, timestamp,
};
use crate::wire;

/// A job id or name: 1 to [`MAX_JOB_TEXT`] characters, none a control one.
fn job_text(field: &str, text: String) -> Result<String> {
    let text = bounded(field, text, MAX_JOB_TEXT)?;
    if text.is_empty() {
        return Err(WireError::new(field, "empty"));
    }
    if text.chars().any(char::is_control) {
        return Err(WireError::new(field, "holds a control character"));
    }
    Ok(text)
}

/// A world size: 0 on the wire is unknown.
fn world(raw: u32) -> Result<Option<u32>> {
    let max = u32::try_from(MAX_RANKS).unwrap_or(u32::MAX);
    if raw > max {
        return Err(WireError::new("world", format!("{raw}; at most {max}")));
    }
    Ok((raw != 0).then_some(raw))
}

/// A rank number inside `world` (or inside the largest world, unknown).
fn rank_in(world: Option<u32>, rank: u32) -> Result<u32> {
    let size = world.unwrap_or_else(|| u32::try_from(MAX_RANKS).unwrap_or(u32::MAX));
    if rank >= size {
        return Err(WireError::new(
            "rank",
            format!("{rank} is outside a world of {size}"),
        ));
    }
    Ok(rank)
}

pub fn ranks_to_wire(ranks: Vec<JobRank>) -> wire::JobRankList {
    wire::JobRankList {
        ranks: ranks.into_iter().take(MAX_RANKS).map(Into::into).collect(),
    }
}

pub fn ranks_from_wire(list: wire::JobRankList) -> Result<Vec<JobRank>> {
    at_most("jobs.ranks", &list.ranks, MAX_RANKS)?;
    each("jobs.ranks", list.ranks, JobRank::try_from)
}

impl From<JobRank> for wire::JobRank {
    fn from(r: JobRank) -> Self {
        Self {
            job: r.job,
            backend: job_backend_wire(r.backend),
            rank: r.rank,
            world: r.world.unwrap_or(0),
            pid: r.pid,
            started: r.started,
            name: r.name,
            state: process_state_wire(r.state),
            busy: r.busy,
            devices: r
                .devices
                .into_iter()
                .map(|name| wire::JobDevice { name })
                .collect(),
        }
    }
}

impl TryFrom<wire::JobRank> for JobRank {
    type Error = WireError;
    fn try_from(r: wire::JobRank) -> Result<Self> {
        let world = world(r.world)?;
        at_most("devices", &r.devices, MAX_RANKS)?;
        Ok(Self {
            job: job_text("job", r.job)?,
            backend: job_backend("backend", r.backend)?,
            rank: rank_in(world, r.rank)?,
            world,
            pid: r.pid,
            started: r.started,
            name: job_text("name", r.name)?,
            state: process_state("state", r.state)?,
            busy: r.busy,
            devices: each("devices", r.devices, |d| {
                d.name.map(|n| job_text("name", n)).transpose()
            })?,
        })
    }
}

impl From<JobView> for wire::JobView {
    fn from(j: JobView) -> Self {
        Self {
            job: j.job,
            backend: job_backend_wire(j.backend),
            world: j.world.unwrap_or(0),
            ranks: j
                .ranks
                .into_iter()
                .map(|r| wire::RankView {
                    rank: r.rank,
                    node: r.node.to_string(),
                    pid: r.pid,
                    name: r.name,
                    condition: rank_condition_wire(r.condition),
                    busy: r.busy,
                })
                .collect(),
            hung: j.hung.unwrap_or_default(),
            since: timestamp(j.since),
        }
    }
}

impl TryFrom<wire::JobView> for JobView {
    type Error = WireError;
    fn try_from(j: wire::JobView) -> Result<Self> {
        at_most("ranks", &j.ranks, MAX_RANKS)?;
        let world = world(j.world)?;
        Ok(Self {
            job: job_text("job", j.job)?,
            backend: job_backend("backend", j.backend)?,
            world,
            ranks: each("ranks", j.ranks, |r| {
                Ok(RankView {
                    rank: rank_in(world, r.rank)?,
                    node: node_id("node", r.node)?,
                    pid: r.pid,
                    name: job_text("name", r.name)?,
                    condition: rank_condition("condition", r.condition)?,
                    busy: r.busy,
                })
            })?,
            hung: non_empty(bounded("hung", j.hung, crate::limits::MAX_SUMMARY_BYTES)?),
            since: time("since", j.since)?,
        })
    }
}
