//! Who holds queue pairs on the RDMA devices, from the kernel's RDMA
//! resource tracking as `rdma -j resource show qp` (iproute2) prints it:
//! what the active RDMA probe's "idle" mode waits on. A queue pair the
//! kernel holds (the GSI queue pair of every port) has no `pid`; this
//! process's own do not count either. The `pid` the kernel shows is the
//! thread that created the queue pair (and `comm` that thread's name), not
//! its process: meshd's own are those whose thread is one of its own.

use std::time::Duration;

use serde::Deserialize;

use crate::command::{RunError, run_with_timeout};

/// How long `rdma resource show qp` may take.
pub const QUEUE_PAIRS_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the queue pairs could not be counted: "idle" then does not probe.
#[derive(Debug, thiserror::Error)]
pub enum QueuePairsError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("`rdma -j resource show qp` failed ({status}): {stderr}")]
    Failed { status: String, stderr: String },
    #[error("`rdma -j resource show qp` printed something that is not its JSON: {0}")]
    Parse(String),
}

#[derive(Debug, Deserialize)]
struct QueuePair {
    ifname: Option<String>,
    pid: Option<u64>,
}

/// The queue pairs other processes hold on `device` (on every device when
/// `None`), from the command's JSON output; `own_thread` says whether a
/// thread id is one of this process's.
pub fn parse_foreign_queue_pairs(
    json: &str,
    own_thread: impl Fn(u64) -> bool,
    device: Option<&str>,
) -> Result<usize, QueuePairsError> {
    let text = json.trim();
    // No RDMA device at all prints nothing.
    if text.is_empty() {
        return Ok(0);
    }
    let pairs: Vec<QueuePair> =
        serde_json::from_str(text).map_err(|err| QueuePairsError::Parse(err.to_string()))?;
    Ok(pairs
        .iter()
        .filter(|qp| device.is_none_or(|d| qp.ifname.as_deref() == Some(d)))
        .filter(|qp| qp.pid.is_some_and(|pid| pid != 0 && !own_thread(pid)))
        .count())
}

/// Runs `rdma -j resource show qp` and counts the queue pairs other
/// processes hold on `device`.
pub fn foreign_queue_pairs(device: Option<&str>) -> Result<usize, QueuePairsError> {
    let args = ["-j", "resource", "show", "qp"].map(str::to_owned);
    let out = run_with_timeout("rdma", &args, QUEUE_PAIRS_TIMEOUT)?;
    if !out.success {
        return Err(QueuePairsError::Failed {
            status: out.status,
            stderr: out.stderr.trim().to_owned(),
        });
    }
    parse_foreign_queue_pairs(&out.stdout, is_own_thread, device)
}

/// Whether thread `tid` belongs to this process.
fn is_own_thread(tid: u64) -> bool {
    std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `rdma -j resource show qp` (iproute2 6.1) printed in a
    /// Soft-RoCE VM with meshd probing: its queue pair, created by its
    /// probe thread (pid 355, "meshd-rdma-prob"), and the kernel's GSI
    /// queue pair (no pid)…
    const MESHD_ALONE: &str = r#"[{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":18,"rqpn":17,"type":"UC","state":"RTS","rq-psn":7075921,"sq-psn":16010967,"path-mig-state":"MIGRATED","pdn":2,"pid":355,"comm":"meshd-rdma-prob"},{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"}]
"#;
    /// … and the same with a job's queue pair on a second device.
    const SAMPLE: &str = r#"[{"ifindex":1,"ifname":"rxe0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"},{"ifindex":1,"ifname":"rxe0","port":1,"lqpn":17,"rqpn":18,"type":"UC","state":"RTS","rq-psn":5,"sq-psn":9,"pid":300,"comm":"meshd-rdma-prob"},{"ifindex":2,"ifname":"rxe1","port":1,"lqpn":19,"rqpn":20,"type":"RC","state":"RTS","rq-psn":1,"sq-psn":1,"path-mig-state":"MIGRATED","pid":4242,"comm":"python3"}]
"#;

    #[test]
    fn only_other_processes_queue_pairs_on_the_device_count() {
        let meshd_thread = |tid| tid == 300 || tid == 355;
        let none_own = |_| false;
        assert_eq!(
            parse_foreign_queue_pairs(MESHD_ALONE, meshd_thread, Some("rxe0")).unwrap(),
            0
        );
        assert_eq!(
            parse_foreign_queue_pairs(MESHD_ALONE, none_own, None).unwrap(),
            1
        );
        assert_eq!(
            parse_foreign_queue_pairs(SAMPLE, meshd_thread, None).unwrap(),
            1
        );
        assert_eq!(
            parse_foreign_queue_pairs(SAMPLE, meshd_thread, Some("rxe0")).unwrap(),
            0
        );
        assert_eq!(
            parse_foreign_queue_pairs(SAMPLE, meshd_thread, Some("rxe1")).unwrap(),
            1
        );
        assert_eq!(
            parse_foreign_queue_pairs(SAMPLE, none_own, None).unwrap(),
            2
        );
        assert_eq!(parse_foreign_queue_pairs("", none_own, None).unwrap(), 0);
        assert_eq!(
            parse_foreign_queue_pairs("[]\n", none_own, None).unwrap(),
            0
        );
    }

    #[test]
    fn this_process_threads_are_its_own() {
        assert!(is_own_thread(u64::from(std::process::id())));
        assert!(!is_own_thread(u64::from(u32::MAX)));
    }

    #[test]
    fn output_that_is_not_the_json_is_an_error_not_zero() {
        let err = parse_foreign_queue_pairs("Error: no such device", |_| false, None).unwrap_err();
        assert!(matches!(err, QueuePairsError::Parse(_)), "{err}");
        assert!(parse_foreign_queue_pairs(r#"{"lqpn":1}"#, |_| false, None).is_err());
    }
}
