//! meshd's `/metrics`, fetched from inside a node's namespace by this
//! binary's hidden `fetch-metrics` helper.

use std::io::{Read, Write};
use std::net::TcpStream;

use anyhow::Context;
use meshd_lab::Lab;
use meshd_lab::command::QUICK;

/// The gauge `meshd_link_rtt_p50_seconds{peer, iface}` in seconds: exact
/// over meshd's last 10 s of probes; None when absent or NaN.
pub(crate) fn rtt_p50(metrics: &str, peer: &str) -> Option<f64> {
    let series = format!("meshd_link_rtt_p50_seconds{{peer=\"{peer}\"");
    metrics
        .lines()
        .find(|l| {
            l.strip_prefix(&series)
                .is_some_and(|rest| rest.starts_with(',') || rest.starts_with('}'))
        })?
        .rsplit(' ')
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

/// From the node's own namespace, at the management address its metrics
/// listen on (the lab binds no port to every address).
pub(crate) fn fetch_metrics(lab: &Lab, id: &str) -> anyhow::Result<String> {
    let me = std::env::current_exe()?;
    let addr = lab.plan.node(id)?.metrics();
    Ok(lab.exec(id, &me.to_string_lossy(), &["fetch-metrics", &addr])?)
}

#[allow(clippy::print_stdout)]
pub(crate) fn fetch(addr: &str) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(QUICK))?;
    stream.set_write_timeout(Some(QUICK))?;
    stream.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let body = raw.split_once("\r\n\r\n").context("HTTP response")?.1;
    print!("{body}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::percentile;

    #[test]
    fn the_p50_gauge_is_read_per_peer() {
        let metrics = "# TYPE meshd_link_rtt_p50_seconds gauge
meshd_link_rtt_p50_seconds{peer=\"b\",iface=\"veth0\"} 0.0000545
meshd_link_rtt_p50_seconds{peer=\"bb\",iface=\"veth1\"} 0.1
meshd_link_rtt_p99_seconds{peer=\"b\",iface=\"veth0\"} 0.00009
meshd_link_rtt_p50_seconds{peer=\"c\",iface=\"\"} NaN
";
        assert_eq!(rtt_p50(metrics, "b"), Some(0.000_054_5));
        assert_eq!(rtt_p50(metrics, "bb"), Some(0.1));
        assert_eq!(rtt_p50(metrics, "c"), None);
        assert_eq!(rtt_p50(metrics, "d"), None);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 99.0), 4.0);
    }
}
