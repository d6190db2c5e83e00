//! A real Prometheus and a real Alertmanager in the management namespace,
//! where they reach every node's management address, queried with their
//! own command-line clients (`promtool query`, `amtool`) run there too.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::command::{self, CommandError};
use crate::lab::{Lab, LabError};
use crate::plan::{ALERTMANAGER_PORT, MGMT_HOST, PROMETHEUS_PORT, alertmanager_url};

const CLIENT_LIMIT: Duration = Duration::from_secs(15);

/// The example Alertmanager configuration the repo ships.
const ALERTMANAGER_CONFIG: &str = include_str!("../../dashboards/alertmanager/alertmanager.yml");

fn prometheus_url() -> String {
    format!("http://{MGMT_HOST}:{PROMETHEUS_PORT}")
}

impl Lab {
    fn spawn_service(
        &mut self,
        name: &str,
        program: &str,
        args: &[String],
    ) -> Result<(), LabError> {
        let log = self.state_dir().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).map_err(|source| LabError::File {
            path: log.clone(),
            source,
        })?;
        let err = out.try_clone().map_err(|source| LabError::File {
            path: log.clone(),
            source,
        })?;
        let mgmt = self.plan.mgmt_namespace();
        let child = Command::new("ip")
            .args(["netns", "exec", &mgmt, program])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| CommandError::Spawn {
                command: format!("ip netns exec {mgmt} {program}"),
                source,
            })?;
        self.services.push(child);
        Ok(())
    }

    /// Starts Prometheus scraping every node's `/metrics` each second as job
    /// `meshd`, evaluating `rules` (the shipped rule file), and sending what
    /// fires to the lab's Alertmanager when `to_alertmanager` (else its
    /// alerts stay in Prometheus, and Alertmanager holds only meshd's own).
    pub fn start_prometheus(
        &mut self,
        rules: &Path,
        to_alertmanager: bool,
    ) -> Result<(), LabError> {
        // One static config per node, labelled with its id, as docs/DASHBOARDS.md
        // shows: MeshdDown names a node that never answered a scrape.
        let targets: String = self
            .plan
            .nodes
            .iter()
            .map(|n| {
                format!(
                    "      - targets: ['{}']\n        labels: {{meshd_node: '{}'}}\n",
                    n.metrics(),
                    n.id
                )
            })
            .collect();
        let alerting = if to_alertmanager {
            format!(
                "alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{MGMT_HOST}:{ALERTMANAGER_PORT}']\n"
            )
        } else {
            String::new()
        };
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - '{}'\n{alerting}\
             scrape_configs:\n  - job_name: meshd\n    static_configs:\n{targets}",
            rules.display(),
        );
        let file = self.state_dir().join("prometheus.yml");
        std::fs::write(&file, config).map_err(|source| LabError::File {
            path: file.clone(),
            source,
        })?;
        let data = self.state_dir().join("prometheus-data");
        self.spawn_service(
            "prometheus",
            "prometheus",
            &[
                format!("--config.file={}", file.display()),
                format!("--storage.tsdb.path={}", data.display()),
                format!("--web.listen-address={MGMT_HOST}:{PROMETHEUS_PORT}"),
                "--log.level=warn".to_owned(),
            ],
        )
    }

    /// Starts an Alertmanager with the repo's example configuration (its
    /// receiver only records; no cluster) where the nodes push when the lab
    /// was brought up with `Options::alertmanager`, and where Prometheus
    /// sends its rules' alerts.
    pub fn start_alertmanager(&mut self) -> Result<(), LabError> {
        let file = self.state_dir().join("alertmanager.yml");
        std::fs::write(&file, ALERTMANAGER_CONFIG).map_err(|source| LabError::File {
            path: file.clone(),
            source,
        })?;
        let data = self.state_dir().join("alertmanager-data");
        self.spawn_service(
            "alertmanager",
            "prometheus-alertmanager",
            &[
                format!("--config.file={}", file.display()),
                format!("--storage.path={}", data.display()),
                format!("--web.listen-address={MGMT_HOST}:{ALERTMANAGER_PORT}"),
                // No cluster: a lone Alertmanager must not gossip anywhere.
                "--cluster.listen-address=".to_owned(),
                // Its debug log has a line per alert it receives, firing or
                // resolved (`Received alert`): what `received_alerts` reads.
                "--log.level=debug".to_owned(),
            ],
        )
    }

    fn client(&self, program: &str, args: &[&str]) -> Result<Value, LabError> {
        let mgmt = self.plan.mgmt_namespace();
        let mut full = vec!["netns", "exec", &mgmt, program];
        full.extend_from_slice(args);
        let text = command::run("ip", &full, CLIENT_LIMIT)?;
        serde_json::from_str(&text).map_err(|source| LabError::BadStatus {
            node: "mgmt".to_owned(),
            source,
        })
    }

    /// The series of an instant PromQL query (`promtool query instant`).
    pub fn prometheus_query(&self, expr: &str) -> Result<Vec<Value>, LabError> {
        let answer = self.client(
            "promtool",
            &["query", "instant", "-o", "json", &prometheus_url(), expr],
        )?;
        Ok(answer.as_array().cloned().unwrap_or_default())
    }

    /// Every alert Alertmanager received so far, in order, from its debug
    /// log: each post of a firing alert and each resolve, even one that is
    /// followed by a firing post again before anyone could query the
    /// active alerts in between.
    pub fn received_alerts(&self) -> Result<Vec<Received>, LabError> {
        let path = self.state_dir().join("alertmanager.log");
        let log = std::fs::read_to_string(&path).map_err(|source| LabError::File {
            path: path.clone(),
            source,
        })?;
        Ok(log.lines().filter_map(Received::parse).collect())
    }

    /// The active alerts Alertmanager holds matching `matchers`
    /// (`amtool alert query`, e.g. `alertname=MeshLinkDown`).
    pub fn alertmanager_alerts(&self, matchers: &[&str]) -> Result<Vec<Value>, LabError> {
        let url = format!("--alertmanager.url={}", alertmanager_url());
        let mut args = vec!["alert", "query", "-o", "json", url.as_str()];
        args.extend_from_slice(matchers);
        let answer = self.client("amtool", &args)?;
        Ok(answer.as_array().cloned().unwrap_or_default())
    }
}

/// One alert as Alertmanager's dispatcher received it: its debug log line
/// `msg="Received alert" alert=NAME[FINGERPRINT][active|resolved]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub alertname: String,
    /// The first 7 hex digits of the alert's fingerprint (a hash of its
    /// labels: the same alert, whoever posts it).
    pub fingerprint: String,
    pub resolved: bool,
    /// The line's `ts=` as logged.
    pub at: String,
}

impl Received {
    fn parse(line: &str) -> Option<Self> {
        if !line.contains("msg=\"Received alert\"") {
            return None;
        }
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(key))
                .map(|v| v.trim_matches('"').to_owned())
        };
        let alert = field("alert=")?;
        let (alertname, rest) = alert.split_once('[')?;
        let (fingerprint, state) = rest.split_once("][")?;
        let resolved = match state.strip_suffix(']')? {
            "resolved" => true,
            "active" => false,
            _ => return None,
        };
        Some(Self {
            alertname: alertname.to_owned(),
            fingerprint: fingerprint.to_owned(),
            resolved,
            at: field("ts=").unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_received_alert_line_names_the_alert_its_fingerprint_and_state() {
        let line = r#"ts=2026-12-05T11:40:01.123Z caller=dispatch.go:163 level=debug component=dispatcher msg="Received alert" alert=MeshLinkDown[5f3a2b1][resolved]"#;
        assert_eq!(
            Received::parse(line),
            Some(Received {
                alertname: "MeshLinkDown".to_owned(),
                fingerprint: "5f3a2b1".to_owned(),
                resolved: true,
                at: "2026-12-05T11:40:01.123Z".to_owned(),
            })
        );
        assert_eq!(Received::parse("level=info msg=\"Listening\""), None);
    }
}
