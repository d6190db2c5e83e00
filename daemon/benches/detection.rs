//! Detection latency in the demo: from `cut A B` to the verdict "A-B down,
//! blamed on the link" on the first node and on every node. Real nodes in
//! this process (probers, reporters, verdict engines) behind the demo's
//! fault proxies, on loopback.
//!
//! `cargo bench -p meshd --bench detection` (options: `--nodes N`,
//! `--trials T`, `--base-port P`). Prints a table; asserts nothing.

use std::time::{Duration, Instant};

use meshd::demo::Demo;
use meshd::demo::plan::Plan;
use meshd_domain::{Blame, LinkState, MeshStatus, NodeState};

/// How often each node's published status is read: the resolution of the
/// figures.
const POLL: Duration = Duration::from_millis(5);
/// Give up on a trial after this long.
const PATIENCE: Duration = Duration::from_secs(10);
/// After each heal: let every node see the link up again and its loss
/// windows clear before the next cut.
const REST: Duration = Duration::from_secs(2);

struct Options {
    nodes: usize,
    trials: usize,
    base_port: u16,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        nodes: 4,
        trials: 30,
        base_port: 24_400,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match arg.as_str() {
            "--nodes" => options.nodes = value("--nodes")?,
            "--trials" => options.trials = value("--trials")?,
            "--base-port" => {
                options.base_port =
                    u16::try_from(value("--base-port")?).map_err(|e| e.to_string())?;
            }
            // cargo bench passes --bench; anything else is a mistake.
            "--bench" => {}
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

fn statuses(demo: &Demo) -> Vec<std::sync::Arc<MeshStatus>> {
    (0..demo.plan().nodes.len())
        .filter_map(|i| demo.node(i))
        .map(|n| n.state.current())
        .collect()
}

fn link_state(s: &MeshStatus, x: &str, y: &str) -> Option<(LinkState, Blame)> {
    s.links
        .iter()
        .find(|l| (l.a.node.as_str(), l.b.node.as_str()) == (x, y))
        .map(|l| (l.state, l.blame))
}

fn all_up(s: &MeshStatus) -> bool {
    s.quorum.has_quorum
        && s.nodes.iter().all(|n| n.state == NodeState::Up)
        && s.links.iter().all(|l| l.state == LinkState::Up)
}

async fn wait_all_up(demo: &Demo) -> Result<(), String> {
    let deadline = Instant::now() + PATIENCE * 3;
    while !statuses(demo).iter().all(|s| all_up(s)) {
        if Instant::now() > deadline {
            return Err("the mesh did not come up".into());
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Nearest-rank percentile of sorted figures.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

#[allow(clippy::print_stdout)]
async fn run(options: Options) -> Result<(), String> {
    let certs = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut plan = Plan::new(options.nodes, options.base_port, &certs.path().join("tls"))
        .map_err(|e| e.to_string())?;
    // Repeated cuts of the same cables would (rightly) be called flapping;
    // this measures the down verdict, so flap detection is off here.
    for node in &mut plan.nodes {
        node.config.thresholds.flap_changes = 100;
    }
    let mut demo = Demo::start(plan.clone(), "bench")
        .await
        .map_err(|e| e.to_string())?;
    wait_all_up(&demo).await?;
    tokio::time::sleep(REST).await;

    let ids: Vec<String> = plan.nodes.iter().map(|n| n.id.to_string()).collect();
    let pairs: Vec<(usize, usize)> = (0..ids.len())
        .flat_map(|i| (i + 1..ids.len()).map(move |j| (i, j)))
        .collect();
    let (mut first, mut every) = (Vec::new(), Vec::new());
    for trial in 0..options.trials {
        let (i, j) = pairs[trial % pairs.len()];
        let (x, y) = (ids[i].as_str(), ids[j].as_str());
        let reply = demo
            .execute(&format!("cut {x} {y}"))
            .await
            .reply
            .unwrap_or_default();
        if !reply.starts_with("ok") {
            return Err(reply);
        }
        let cut_at = Instant::now();
        let mut seen = vec![None; ids.len()];
        while seen.iter().any(Option::is_none) {
            if cut_at.elapsed() > PATIENCE {
                return Err(format!("trial {trial}: {x}-{y} not down everywhere"));
            }
            for (k, status) in statuses(&demo).iter().enumerate() {
                if seen[k].is_none()
                    && link_state(status, x, y) == Some((LinkState::Down, Blame::Link))
                {
                    seen[k] = Some(cut_at.elapsed());
                }
            }
            tokio::time::sleep(POLL).await;
        }
        let times: Vec<Duration> = seen.into_iter().flatten().collect();
        first.push(times.iter().copied().min().unwrap_or_default());
        every.push(times.iter().copied().max().unwrap_or_default());
        demo.execute(&format!("heal {x} {y}")).await;
        wait_all_up(&demo).await?;
        tokio::time::sleep(REST).await;
    }
    demo.stop().await;

    first.sort();
    every.sort();
    println!(
        "detection latency, cable cut -> link down (blame link), {} nodes, {} trials, poll {} ms",
        options.nodes,
        options.trials,
        POLL.as_millis()
    );
    println!("| verdict on | p50 | p90 | p99 | max |");
    println!("|---|---:|---:|---:|---:|");
    for (what, figures) in [("first node", &first), ("every node", &every)] {
        println!(
            "| {what} | {} | {} | {} | {} |",
            ms(percentile(figures, 50.0)),
            ms(percentile(figures, 90.0)),
            ms(percentile(figures, 99.0)),
            ms(figures[figures.len() - 1]),
        );
    }
    Ok(())
}

#[allow(clippy::print_stderr)]
fn main() -> std::process::ExitCode {
    let outcome = options().and_then(|options| {
        if options.trials == 0 {
            return Err("--trials must be at least 1".into());
        }
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(run(options))
    });
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("detection bench: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
