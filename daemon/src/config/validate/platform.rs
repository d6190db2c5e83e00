//! The `[platform]` section: how often host facts are gathered and the RDMA
//! device names a node may be configured with.

use std::time::Duration;

use super::super::Config;
use super::super::error::Problem;
use super::{check_duration, s};

const FACTS_INTERVAL_RANGE: (Duration, Duration) = (s(5), s(3600));
/// rdma-core's IBV_SYSFS_NAME_MAX is 64 bytes with the terminator.
const MAX_RDMA_DEVICE_LEN: usize = 63;

pub(super) fn check_platform(c: &Config, p: &mut Vec<Problem>) {
    check_duration(
        p,
        "platform.facts_interval",
        c.platform.facts_interval,
        FACTS_INTERVAL_RANGE,
    );
    if let Some(dir) = &c.platform.replay_dir
        && !dir.is_dir()
    {
        p.push(Problem::new(
            "platform.replay_dir",
            format!(
                "{} is not a directory; give a bundle directory written by `meshctl bundle`, or leave it out to read this host",
                dir.display()
            ),
        ));
    }
}

pub(super) fn check_rdma_device(device: &str, key: &str, p: &mut Vec<Problem>) {
    let ok = !device.is_empty()
        && device.len() <= MAX_RDMA_DEVICE_LEN
        && device
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    if !ok {
        p.push(Problem::new(
            key,
            format!(
                "{device:?} is not an RDMA device name; use 1 to {MAX_RDMA_DEVICE_LEN} letters, digits, '_', '-' or '.', like \"rdma_en2\""
            ),
        ));
    }
}
