//! A JACCL rank, emulated over the lab's cables (`lab rank`, a hidden
//! subcommand of the lab's own binary; `job.rs` starts one per node).
//!
//! A real MLX job over Thunderbolt RDMA (`mlx.launch --backend jaccl`)
//! exchanges data with every peer rank all the time; when a peer dies or
//! stops, Apple's UC queue pairs give no error completion, so every other
//! rank polls its completion queue forever at 100 % of a core. This
//! emulator does the same with tiny UDP datagrams: every `1/rate` s it
//! sends one datagram to each peer on the cable between the two nodes and
//! takes in what has arrived, sleeping in between (a few percent of a core
//! at most). When any peer has been silent longer than `--silence-ms`, it
//! busy-spins in a tight non-blocking receive loop (no sleep at all) until
//! every peer is heard again; its sends go on at the same pace, as a real
//! rank's posted work requests do, so a peer that comes back finds the
//! others talking and the whole job calms down.
//!
//! A step (the job's progress) completes when every peer has been heard
//! since the last one, as a collective completes when every peer's part
//! has arrived: a silent peer stops the steps of every other rank.
//!
//! The rank sends only to the peers' cable addresses it is given, from its
//! own cable addresses, and both must be lab cable addresses
//! ([`plan::is_cable_address`]); it sets no environment of its own (the
//! launcher gives it MLX's, see `job.rs`). Every [`REPORT_EVERY`] it
//! writes what it did to `--status` (JSON, replaced atomically), and it
//! logs each change between paced and spinning on stderr. When the
//! directory of its status file is gone (the lab was removed under it), it
//! exits.

use std::fmt;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::plan;

/// The UDP port every rank of a job binds on each of its cable addresses.
pub const DEFAULT_PORT: u16 = 7450;
/// Datagrams a second to each peer: modest, like a job between steps.
pub const DEFAULT_RATE: u32 = 200;
/// How long a peer may be silent before the rank spins.
pub const DEFAULT_SILENCE_MS: u64 = 500;
/// The most datagrams a second to one peer.
pub const MAX_RATE: u32 = 10_000;
/// The rank must hear a peer at least this many times per silence
/// threshold, or a peer that talks at the pace would look silent.
const TICKS_PER_SILENCE: u64 = 4;
/// How often the status file is written.
pub const REPORT_EVERY: Duration = Duration::from_millis(250);
/// Every datagram starts with this.
const MAGIC: [u8; 4] = *b"JCCL";
/// magic, the sender's rank (u16), 2 spare bytes, a sequence number (u64).
pub const DATAGRAM_LEN: usize = 16;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RankError {
    #[error("a peer is RANK,LOCAL,REMOTE (e.g. 1,10.77.12.1,10.77.12.2), not {0:?}")]
    BadPeer(String),
    #[error("a job has 2 to {max} ranks, not {0}", max = plan::MAX_NODES)]
    World(usize),
    #[error("rank {rank} is not below the world size {world}")]
    Rank { rank: usize, world: usize },
    #[error("rank {rank} of {world} needs exactly one --peer for each other rank; got {got:?}")]
    Peers {
        rank: usize,
        world: usize,
        got: Vec<usize>,
    },
    #[error("{0} is not a lab cable address (10.77.0.0/16): a rank sends nowhere else")]
    NotCable(Ipv4Addr),
    #[error("peer {0}: its local and remote addresses are the same")]
    SameAddress(usize),
    #[error(
        "--rate {rate} with --silence-ms {silence_ms}: 1 to {MAX_RATE} a second, and at least {TICKS_PER_SILENCE} per silence threshold"
    )]
    Rate { rate: u32, silence_ms: u64 },
    #[error("--port must not be 0")]
    Port,
    #[error("cannot bind {address}: {detail}")]
    Bind {
        address: SocketAddrV4,
        detail: String,
    },
    #[error("{path}: {detail}")]
    Status { path: PathBuf, detail: String },
}

/// One peer rank: where this rank talks to it from, and where to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub rank: usize,
    /// This rank's address on the cable to the peer.
    pub local: Ipv4Addr,
    /// The peer's address on that cable.
    pub remote: Ipv4Addr,
}

impl FromStr for Peer {
    type Err = RankError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || RankError::BadPeer(text.to_owned());
        let mut parts = text.split(',').map(str::trim);
        let (Some(rank), Some(local), Some(remote), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Self {
            rank: rank.parse().map_err(|_| bad())?,
            local: local.parse().map_err(|_| bad())?,
            remote: remote.parse().map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{},{}", self.rank, self.local, self.remote)
    }
}

/// `lab rank …`: what one rank is told by its launcher.
#[derive(Debug, Clone, clap::Args)]
pub struct RankArgs {
    /// This rank (0-based).
    #[arg(long)]
    pub rank: usize,
    /// The number of ranks in the job.
    #[arg(long)]
    pub world: usize,
    /// Each other rank: RANK,LOCAL,REMOTE, this rank's and the peer's
    /// addresses on the cable between their nodes.
    #[arg(long = "peer", value_name = "RANK,LOCAL,REMOTE")]
    pub peers: Vec<Peer>,
    /// The UDP port bound on every local cable address and sent to on
    /// every peer's.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Datagrams a second to each peer.
    #[arg(long, default_value_t = DEFAULT_RATE)]
    pub rate: u32,
    /// A peer silent this long makes the rank spin.
    #[arg(long, default_value_t = DEFAULT_SILENCE_MS)]
    pub silence_ms: u64,
    /// Where to write what the rank did (JSON), every 250 ms.
    #[arg(long)]
    pub status: Option<PathBuf>,
}

/// A rank's checked configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankConfig {
    pub rank: usize,
    pub world: usize,
    /// Sorted by rank.
    pub peers: Vec<Peer>,
    pub port: u16,
    pub rate: u32,
    pub silence: Duration,
    pub status: Option<PathBuf>,
}

impl RankConfig {
    pub fn from_args(args: &RankArgs) -> Result<Self, RankError> {
        let (rank, world) = (args.rank, args.world);
        if !(plan::MIN_NODES..=plan::MAX_NODES).contains(&world) {
            return Err(RankError::World(world));
        }
        if rank >= world {
            return Err(RankError::Rank { rank, world });
        }
        let mut peers = args.peers.clone();
        peers.sort_by_key(|p| p.rank);
        let got: Vec<usize> = peers.iter().map(|p| p.rank).collect();
        let wanted: Vec<usize> = (0..world).filter(|&r| r != rank).collect();
        if got != wanted {
            return Err(RankError::Peers { rank, world, got });
        }
        for peer in &peers {
            for address in [peer.local, peer.remote] {
                if !plan::is_cable_address(address) {
                    return Err(RankError::NotCable(address));
                }
            }
            if peer.local == peer.remote {
                return Err(RankError::SameAddress(peer.rank));
            }
        }
        let silence_ms = args.silence_ms;
        let enough = u64::from(args.rate).saturating_mul(silence_ms)
            >= TICKS_PER_SILENCE.saturating_mul(1000);
        if !(1..=MAX_RATE).contains(&args.rate) || !enough {
            return Err(RankError::Rate {
                rate: args.rate,
                silence_ms,
            });
        }
        if args.port == 0 {
            return Err(RankError::Port);
        }
        Ok(Self {
            rank,
            world,
            peers,
            port: args.port,
            rate: args.rate,
            silence: Duration::from_millis(silence_ms),
            status: args.status.clone(),
        })
    }

    /// The arguments of `lab rank` that give this configuration.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--rank".to_owned(),
            self.rank.to_string(),
            "--world".to_owned(),
            self.world.to_string(),
        ];
        for peer in &self.peers {
            args.push("--peer".to_owned());
            args.push(peer.to_string());
        }
        args.extend([
            "--port".to_owned(),
            self.port.to_string(),
            "--rate".to_owned(),
            self.rate.to_string(),
            "--silence-ms".to_owned(),
            self.silence.as_millis().to_string(),
        ]);
        if let Some(path) = &self.status {
            args.push("--status".to_owned());
            args.push(path.to_string_lossy().into_owned());
        }
        args
    }

    /// The time between two sends to the same peer.
    pub fn interval(&self) -> Duration {
        Duration::from_secs(1) / self.rate.max(1)
    }
}

/// What the rank does between datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every peer heard lately: paced exchange, asleep in between.
    Paced,
    /// A peer silent too long: a tight receive loop at 100 % of a core.
    Spinning,
}

/// The rank's judgement of its peers, with time passed in: who was heard
/// when, the steps completed, and whether to spin.
#[derive(Debug, Clone)]
pub struct Progress {
    silence: Duration,
    /// By peer index; the start counts as heard, so a peer has
    /// `silence` to show up.
    last_heard: Vec<Instant>,
    heard_since_step: Vec<bool>,
    steps: u64,
    mode: Mode,
    spins: u64,
}

impl Progress {
    pub fn new(peers: usize, silence: Duration, now: Instant) -> Self {
        Self {
            silence,
            last_heard: vec![now; peers],
            heard_since_step: vec![false; peers],
            steps: 0,
            mode: Mode::Paced,
            spins: 0,
        }
    }

    /// Peer `peer` was heard at `now`; a step completes when every peer
    /// has been heard since the last.
    pub fn heard(&mut self, peer: usize, now: Instant) {
        let (Some(last), Some(since)) = (
            self.last_heard.get_mut(peer),
            self.heard_since_step.get_mut(peer),
        ) else {
            return;
        };
        *last = (*last).max(now);
        *since = true;
        if self.heard_since_step.iter().all(|&h| h) {
            self.steps += 1;
            self.heard_since_step.fill(false);
        }
    }

    /// Judges the mode at `now`: spinning while any peer has been silent
    /// longer than the threshold, paced once every peer is heard again.
    /// The new mode when it changed.
    pub fn tick(&mut self, now: Instant) -> Option<Mode> {
        let mode = if self.silent_peers(now).is_empty() {
            Mode::Paced
        } else {
            Mode::Spinning
        };
        if mode == self.mode {
            return None;
        }
        if mode == Mode::Spinning {
            self.spins += 1;
        }
        self.mode = mode;
        Some(mode)
    }

    /// The peers silent longer than the threshold at `now`.
    pub fn silent_peers(&self, now: Instant) -> Vec<usize> {
        (0..self.last_heard.len())
            .filter(|&p| self.silent_for(p, now) > self.silence)
            .collect()
    }

    pub fn silent_for(&self, peer: usize, now: Instant) -> Duration {
        self.last_heard
            .get(peer)
            .map_or(Duration::ZERO, |&t| now.saturating_duration_since(t))
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// How many times the rank started spinning.
    pub fn spins(&self) -> u64 {
        self.spins
    }
}

/// One datagram from rank `rank`.
pub fn encode(rank: usize, seq: u64) -> [u8; DATAGRAM_LEN] {
    let mut out = [0; DATAGRAM_LEN];
    out[..4].copy_from_slice(&MAGIC);
    let rank = u16::try_from(rank).unwrap_or(u16::MAX);
    out[4..6].copy_from_slice(&rank.to_be_bytes());
    out[8..].copy_from_slice(&seq.to_be_bytes());
    out
}

/// The sender's rank and sequence number of a datagram of ours.
pub fn decode(bytes: &[u8]) -> Option<(usize, u64)> {
    if bytes.len() != DATAGRAM_LEN || bytes[..4] != MAGIC {
        return None;
    }
    let rank = u16::from_be_bytes([bytes[4], bytes[5]]);
    let mut seq = [0; 8];
    seq.copy_from_slice(&bytes[8..]);
    Some((usize::from(rank), u64::from_be_bytes(seq)))
}

/// What a rank writes to its status file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankReport {
    pub rank: usize,
    pub world: usize,
    pub pid: u32,
    pub mode: Mode,
    /// Steps completed: every peer heard once more.
    pub steps: u64,
    /// How many times it started spinning.
    pub spins: u64,
    /// Datagrams that came from anyone but a peer at its address.
    pub strays: u64,
    pub peers: Vec<PeerReport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerReport {
    pub rank: usize,
    pub local: Ipv4Addr,
    pub remote: Ipv4Addr,
    pub sent: u64,
    /// Sends the kernel refused (a pulled cable: no route).
    pub send_errors: u64,
    pub received: u64,
    pub silent_ms: u64,
}

/// The sockets and counters of a running rank.
#[derive(Debug)]
struct Rank {
    config: RankConfig,
    sockets: Vec<UdpSocket>,
    targets: Vec<SocketAddr>,
    progress: Progress,
    seq: u64,
    sent: Vec<u64>,
    send_errors: Vec<u64>,
    received: Vec<u64>,
    strays: u64,
    started: Instant,
}

impl Rank {
    fn bind(config: RankConfig, now: Instant) -> Result<Self, RankError> {
        let mut sockets = Vec::new();
        for peer in &config.peers {
            let address = SocketAddrV4::new(peer.local, config.port);
            let bind_error = |e: std::io::Error| RankError::Bind {
                address,
                detail: e.to_string(),
            };
            let socket = UdpSocket::bind(address).map_err(bind_error)?;
            socket.set_nonblocking(true).map_err(bind_error)?;
            sockets.push(socket);
        }
        let targets = config
            .peers
            .iter()
            .map(|p| SocketAddr::V4(SocketAddrV4::new(p.remote, config.port)))
            .collect();
        let peers = config.peers.len();
        Ok(Self {
            progress: Progress::new(peers, config.silence, now),
            config,
            sockets,
            targets,
            seq: 0,
            sent: vec![0; peers],
            send_errors: vec![0; peers],
            received: vec![0; peers],
            strays: 0,
            started: now,
        })
    }

    /// One datagram to every peer.
    fn send_all(&mut self) {
        self.seq += 1;
        let datagram = encode(self.config.rank, self.seq);
        for (i, (socket, target)) in self.sockets.iter().zip(&self.targets).enumerate() {
            match socket.send_to(&datagram, target) {
                Ok(_) => self.sent[i] += 1,
                Err(_) => self.send_errors[i] += 1,
            }
        }
    }

    /// Takes in everything that has arrived, without waiting.
    fn drain(&mut self, now: Instant) {
        let mut buf = [0u8; 64];
        for i in 0..self.sockets.len() {
            loop {
                match self.sockets[i].recv_from(&mut buf) {
                    Ok((len, from)) => {
                        let peer = self.config.peers[i];
                        let ours = decode(&buf[..len]).is_some_and(|(rank, _)| rank == peer.rank);
                        if ours && from == self.targets[i] {
                            self.received[i] += 1;
                            self.progress.heard(i, now);
                        } else {
                            self.strays += 1;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    // WouldBlock: nothing more; anything else (an ICMP
                    // error queued on the socket) is left for the next turn.
                    Err(_) => break,
                }
            }
        }
    }

    fn report(&self, now: Instant) -> RankReport {
        RankReport {
            rank: self.config.rank,
            world: self.config.world,
            pid: std::process::id(),
            mode: self.progress.mode(),
            steps: self.progress.steps(),
            spins: self.progress.spins(),
            strays: self.strays,
            peers: self
                .config
                .peers
                .iter()
                .enumerate()
                .map(|(i, p)| PeerReport {
                    rank: p.rank,
                    local: p.local,
                    remote: p.remote,
                    sent: self.sent[i],
                    send_errors: self.send_errors[i],
                    received: self.received[i],
                    silent_ms: u64::try_from(self.progress.silent_for(i, now).as_millis())
                        .unwrap_or(u64::MAX),
                })
                .collect(),
        }
    }

    #[allow(clippy::print_stderr)]
    fn log_change(&self, mode: Mode, now: Instant) {
        let at = now.duration_since(self.started).as_secs_f64();
        let rank = self.config.rank;
        match mode {
            Mode::Spinning => {
                let silent: Vec<String> = self
                    .progress
                    .silent_peers(now)
                    .into_iter()
                    .map(|i| {
                        let p = self.config.peers[i];
                        format!(
                            "rank {} at {} silent {} ms",
                            p.rank,
                            p.remote,
                            self.progress.silent_for(i, now).as_millis()
                        )
                    })
                    .collect();
                eprintln!("rank {rank} +{at:.3}s: spinning: {}", silent.join(", "));
            }
            Mode::Paced => eprintln!(
                "rank {rank} +{at:.3}s: every peer heard again: paced ({} steps)",
                self.progress.steps()
            ),
        }
    }
}

/// Writes `report` to `path` through a temporary file and a rename, so a
/// reader never sees half of it.
pub fn write_report(path: &Path, report: &RankReport) -> Result<(), RankError> {
    let error = |e: std::io::Error| RankError::Status {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let text = serde_json::to_string(report).map_err(|e| RankError::Status {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).map_err(error)?;
    std::fs::rename(&tmp, path).map_err(error)
}

/// Runs a rank until it is killed, or until its status file's directory
/// is gone.
#[allow(clippy::print_stderr)]
pub fn run(args: &RankArgs) -> Result<(), RankError> {
    let config = RankConfig::from_args(args)?;
    let interval = config.interval();
    let status = config.status.clone();
    let start = Instant::now();
    let mut rank = Rank::bind(config, start)?;
    eprintln!(
        "rank {} of {}: pid {}, {} peers, {} datagrams/s each, spins after {} ms of silence",
        rank.config.rank,
        rank.config.world,
        std::process::id(),
        rank.config.peers.len(),
        rank.config.rate,
        rank.config.silence.as_millis()
    );
    let mut next_send = start;
    let mut next_report = start;
    loop {
        let now = Instant::now();
        if now >= next_send {
            rank.send_all();
            next_send += interval;
            // After a stop (SIGSTOP, a starved CPU) the pace starts again
            // from now instead of sending the missed datagrams in a burst.
            if next_send < now {
                next_send = now + interval;
            }
        }
        rank.drain(now);
        if let Some(mode) = rank.progress.tick(now) {
            rank.log_change(mode, now);
        }
        if now >= next_report {
            next_report = now + REPORT_EVERY;
            if let Some(path) = &status {
                let gone = path.parent().is_some_and(|dir| !dir.exists());
                if gone {
                    eprintln!(
                        "rank {}: {} is gone (the lab was removed): exiting",
                        rank.config.rank,
                        path.display()
                    );
                    return Ok(());
                }
                if let Err(err) = write_report(path, &rank.report(now)) {
                    eprintln!("rank {}: {err}", rank.config.rank);
                }
            }
        }
        match rank.progress.mode() {
            Mode::Paced => std::thread::sleep(next_send.saturating_duration_since(Instant::now())),
            // A JACCL rank polling a completion queue that never completes.
            Mode::Spinning => std::hint::spin_loop(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: RankArgs,
    }

    fn parse(args: &[&str]) -> Result<RankConfig, String> {
        let cli = Cli::try_parse_from(std::iter::once("rank").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        RankConfig::from_args(&cli.args).map_err(|e| e.to_string())
    }

    #[test]
    fn a_peer_is_rank_local_remote() {
        let peer: Peer = "1,10.77.12.1,10.77.12.2".parse().unwrap();
        assert_eq!(
            peer,
            Peer {
                rank: 1,
                local: Ipv4Addr::new(10, 77, 12, 1),
                remote: Ipv4Addr::new(10, 77, 12, 2),
            }
        );
        assert_eq!(peer.to_string(), "1,10.77.12.1,10.77.12.2");
        for bad in [
            "1,10.77.12.1",
            "x,10.77.12.1,10.77.12.2",
            "1,a,b",
            "1,2,3,4",
        ] {
            assert!(bad.parse::<Peer>().is_err(), "{bad}");
        }
    }

    #[test]
    fn arguments_parse_and_come_back_the_same() {
        let config = parse(&[
            "--rank",
            "1",
            "--world",
            "3",
            "--peer",
            "2,10.77.23.1,10.77.23.2",
            "--peer",
            "0,10.77.12.2,10.77.12.1",
            "--status",
            "/run/meshlab/x/job-job/rank-1.json",
        ])
        .unwrap();
        assert_eq!(config.rank, 1);
        assert_eq!(config.world, 3);
        assert_eq!(config.port, DEFAULT_PORT);
        assert_eq!(config.rate, DEFAULT_RATE);
        assert_eq!(config.silence, Duration::from_millis(DEFAULT_SILENCE_MS));
        assert_eq!(
            config.peers.iter().map(|p| p.rank).collect::<Vec<_>>(),
            [0, 2],
            "sorted by rank"
        );
        assert_eq!(config.interval(), Duration::from_millis(5));
        let args = config.to_args();
        let again = parse(&args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        assert_eq!(again, config);
    }

    #[test]
    fn bad_arguments_are_refused() {
        let peer01 = ["--peer", "1,10.77.12.1,10.77.12.2"];
        let with = |extra: &[&str]| {
            let mut args = vec!["--rank", "0", "--world", "2"];
            args.extend_from_slice(&peer01);
            args.extend_from_slice(extra);
            parse(&args)
        };
        assert!(with(&[]).is_ok());
        assert!(with(&["--rate", "0"]).unwrap_err().contains("--rate 0"));
        assert!(with(&["--rate", "10001"]).is_err());
        // 5 a second is one datagram per 200 ms: fewer than 4 per 500 ms.
        assert!(with(&["--rate", "5"]).is_err());
        assert!(with(&["--rate", "8"]).is_ok());
        assert!(with(&["--port", "0"]).is_err());
        let err = parse(&["--rank", "2", "--world", "2"]).unwrap_err();
        assert!(err.contains("rank 2 is not below"), "{err}");
        let err = parse(&[
            "--rank",
            "0",
            "--world",
            "3",
            "--peer",
            "1,10.77.12.1,10.77.12.2",
        ])
        .unwrap_err();
        assert!(err.contains("exactly one --peer"), "{err}");
        let err = parse(&[
            "--rank",
            "0",
            "--world",
            "2",
            "--peer",
            "0,10.77.12.1,10.77.12.2",
        ])
        .unwrap_err();
        assert!(err.contains("exactly one --peer"), "itself: {err}");
        let err = parse(&[
            "--rank",
            "0",
            "--world",
            "2",
            "--peer",
            "1,10.77.12.1,8.8.8.8",
        ])
        .unwrap_err();
        assert!(err.contains("8.8.8.8 is not a lab cable address"), "{err}");
        let err = parse(&[
            "--rank",
            "0",
            "--world",
            "2",
            "--peer",
            "1,10.77.12.1,10.77.12.1",
        ])
        .unwrap_err();
        assert!(err.contains("the same"), "{err}");
        assert!(parse(&["--rank", "0", "--world", "1"]).is_err());
        assert!(parse(&["--rank", "0", "--world", "9"]).is_err());
    }

    #[test]
    fn a_silent_peer_makes_the_rank_spin_until_every_peer_is_heard_again() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut p = Progress::new(2, Duration::from_millis(500), t0);
        assert_eq!(p.tick(ms(400)), None, "both have 500 ms to show up");
        assert_eq!(p.mode(), Mode::Paced);
        for t in (10..=1000).step_by(10) {
            p.heard(0, ms(t));
            p.heard(1, ms(t));
            assert_eq!(p.tick(ms(t)), None);
        }
        assert_eq!(p.steps(), 100);
        // Peer 1 stops at 1000 ms; peer 0 goes on.
        for t in (1010..=1500).step_by(10) {
            p.heard(0, ms(t));
            assert_eq!(p.tick(ms(t)), None, "silent 500 ms is not yet too long");
        }
        p.heard(0, ms(1510));
        assert_eq!(p.tick(ms(1510)), Some(Mode::Spinning));
        assert_eq!(p.silent_peers(ms(1510)), [1]);
        assert_eq!(p.steps(), 100, "peer 0 alone completes no step");
        for t in (1520..=5000).step_by(10) {
            p.heard(0, ms(t));
            assert_eq!(p.tick(ms(t)), None);
        }
        assert_eq!(p.mode(), Mode::Spinning);
        assert_eq!(p.steps(), 100);
        // Peer 1 is back.
        p.heard(1, ms(5005));
        assert_eq!(p.steps(), 101);
        assert_eq!(p.tick(ms(5005)), Some(Mode::Paced));
        assert_eq!(p.spins(), 1);
        // Both silent: spinning once more, counted once.
        assert_eq!(p.tick(ms(5600)), Some(Mode::Spinning));
        assert_eq!(p.tick(ms(9000)), None);
        assert_eq!(p.spins(), 2);
        assert_eq!(p.silent_for(0, ms(9000)), Duration::from_millis(4000));
    }

    #[test]
    fn an_old_datagram_never_moves_a_peer_back_in_time() {
        let t0 = Instant::now();
        let mut p = Progress::new(1, Duration::from_millis(500), t0);
        p.heard(0, t0 + Duration::from_millis(900));
        p.heard(0, t0 + Duration::from_millis(100));
        assert_eq!(p.tick(t0 + Duration::from_millis(1300)), None);
        assert_eq!(p.steps(), 2, "with one peer every datagram is a step");
        p.heard(7, t0);
        assert_eq!(p.steps(), 2, "an unknown peer is ignored");
    }

    #[test]
    fn datagrams_carry_the_rank_and_a_sequence_number() {
        let d = encode(3, 77);
        assert_eq!(d.len(), DATAGRAM_LEN);
        assert_eq!(decode(&d), Some((3, 77)));
        assert_eq!(decode(&d[..15]), None);
        let mut other = d;
        other[0] = b'X';
        assert_eq!(decode(&other), None);
    }

    #[test]
    fn a_report_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank-0.json");
        let report = RankReport {
            rank: 0,
            world: 2,
            pid: 1,
            mode: Mode::Spinning,
            steps: 5,
            spins: 1,
            strays: 0,
            peers: vec![PeerReport {
                rank: 1,
                local: Ipv4Addr::new(10, 77, 12, 1),
                remote: Ipv4Addr::new(10, 77, 12, 2),
                sent: 9,
                send_errors: 0,
                received: 5,
                silent_ms: 700,
            }],
        };
        write_report(&path, &report).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"mode\":\"spinning\""), "{text}");
        let back: RankReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
