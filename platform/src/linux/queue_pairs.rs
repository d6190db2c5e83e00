//! Who holds queue pairs on the RDMA devices, from the kernel's RDMA
//! resource tracking as `rdma -j resource show qp` (iproute2) prints it:
//! what the active RDMA probe's "idle" mode waits on. A queue pair the
//! kernel holds (the GSI queue pair of every port) has no `pid`; this
//! process's own do not count either.

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
/// `None`), from the command's JSON output.
pub fn parse_foreign_queue_pairs(
    json: &str,
    own_pid: u32,
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
        .filter(|qp| {
            qp.pid
                .is_some_and(|pid| pid != 0 && pid != u64::from(own_pid))
        })
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
    parse_foreign_queue_pairs(&out.stdout, std::process::id(), device)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape iproute2's `rdma -j resource show qp` prints: the GSI queue
    /// pair of the kernel (no pid), meshd's own, and a job's.
    const SAMPLE: &str = r#"[{"ifindex":1,"ifname":"rxe0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"},{"ifindex":1,"ifname":"rxe0","port":1,"lqpn":17,"rqpn":18,"type":"UC","state":"RTS","rq-psn":5,"sq-psn":9,"pid":300,"comm":"meshd"},{"ifindex":2,"ifname":"rxe1","port":1,"lqpn":19,"rqpn":20,"type":"RC","state":"RTS","rq-psn":1,"sq-psn":1,"path-mig-state":"MIGRATED","pid":4242,"comm":"python3"}]
"#;

    #[test]
    fn only_other_processes_queue_pairs_on_the_device_count() {
        assert_eq!(parse_foreign_queue_pairs(SAMPLE, 300, None).unwrap(), 1);
        assert_eq!(
            parse_foreign_queue_pairs(SAMPLE, 300, Some("rxe0")).unwrap(),
            0
        );
        assert_eq!(
            parse_foreign_queue_pairs(SAMPLE, 300, Some("rxe1")).unwrap(),
            1
        );
        assert_eq!(parse_foreign_queue_pairs(SAMPLE, 1, None).unwrap(), 2);
        assert_eq!(parse_foreign_queue_pairs("", 1, None).unwrap(), 0);
        assert_eq!(parse_foreign_queue_pairs("[]\n", 1, None).unwrap(), 0);
    }

    #[test]
    fn output_that_is_not_the_json_is_an_error_not_zero() {
        let err = parse_foreign_queue_pairs("Error: no such device", 1, None).unwrap_err();
        assert!(matches!(err, QueuePairsError::Parse(_)), "{err}");
        assert!(parse_foreign_queue_pairs(r#"{"lqpn":1}"#, 1, None).is_err());
    }
}
