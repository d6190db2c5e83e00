//! A daemon that stops and goes on again, over and over: SIGSTOP, a wait,
//! SIGCONT, the rest of the period, from a thread of the lab's own. Long
//! stops every second or two are a busy host's stalls (a node swapping, a
//! runaway job taking the cores); short stops every tick are timers that run
//! late by tens to a couple hundred milliseconds. SIGSTOP cycles work the
//! same under cgroup v1 and v2 and need no cgroup at all, unlike a CPU quota.
//!
//! The daemon is always left running: ending the driver (or dropping it, or
//! the driver's thread ending on an error) continues the process.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

#[derive(Debug, thiserror::Error)]
pub enum StallError {
    #[error(
        "a stall must stop the daemon for part of each period: stopped {stopped:?} of every {every:?}"
    )]
    Pattern { stopped: Duration, every: Duration },
    #[error("cannot send {signal} to meshd (pid {pid}): {source}")]
    Signal {
        pid: u32,
        signal: Signal,
        source: nix::Error,
    },
    #[error("cannot start the stall driver's thread: {0}")]
    Spawn(std::io::Error),
    #[error("the stall driver of pid {0} panicked")]
    Panicked(u32),
}

/// Stopped `stopped` out of every `every`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallPattern {
    pub stopped: Duration,
    pub every: Duration,
}

impl StallPattern {
    pub fn new(stopped: Duration, every: Duration) -> Result<Self, StallError> {
        if stopped.is_zero() || stopped >= every {
            return Err(StallError::Pattern { stopped, every });
        }
        Ok(Self { stopped, every })
    }
}

/// What a driver did, when it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StallReport {
    /// Stop–continue cycles completed.
    pub cycles: u64,
    /// The longest the process stayed stopped (the driver's own wake-ups
    /// run late on a busy host too).
    pub longest_stop: Duration,
}

/// A running stall driver; ends (and continues the process) on
/// [`Stall::end`] or drop.
#[derive(Debug)]
pub struct Stall {
    pid: u32,
    pattern: StallPattern,
    /// Dropping it wakes the driver, which continues the process and ends.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<Result<StallReport, StallError>>>,
}

impl Stall {
    /// Starts stopping process `pid` as `pattern` says, from now on.
    pub fn start(pid: u32, pattern: StallPattern) -> Result<Self, StallError> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("stall-{pid}"))
            .spawn(move || drive(pid, pattern, &stopped))
            .map_err(StallError::Spawn)?;
        Ok(Self {
            pid,
            pattern,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn pattern(&self) -> StallPattern {
        self.pattern
    }

    /// Stops the driver; the process runs on. What it did, or why it ended
    /// early (the process exited, say).
    pub fn end(mut self) -> Result<StallReport, StallError> {
        self.join()
    }

    fn join(&mut self) -> Result<StallReport, StallError> {
        drop(self.stop.take());
        let Some(thread) = self.thread.take() else {
            return Ok(StallReport::default());
        };
        let ended = thread.join().map_err(|_| StallError::Panicked(self.pid))?;
        // The driver continues the process on every way out, but a panic
        // (or a CONT that failed) must not leave it stopped: once more.
        let _ = kill(Pid::from_raw(pid_t(self.pid)), Signal::SIGCONT);
        ended
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

fn pid_t(pid: u32) -> i32 {
    i32::try_from(pid).unwrap_or(i32::MAX)
}

fn send(pid: u32, signal: Signal) -> Result<(), StallError> {
    kill(Pid::from_raw(pid_t(pid)), signal).map_err(|source| StallError::Signal {
        pid,
        signal,
        source,
    })
}

/// Continues the process however the driver's loop ends (an error, a
/// panic): a stalled daemon must never outlive its fault.
struct ContinueOnExit(u32);

impl Drop for ContinueOnExit {
    fn drop(&mut self) {
        let _ = send(self.0, Signal::SIGCONT);
    }
}

/// Whether the owner asked the driver to end while it waited `wait`.
fn asked_to_end(stop: &mpsc::Receiver<()>, wait: Duration) -> bool {
    !matches!(stop.recv_timeout(wait), Err(RecvTimeoutError::Timeout))
}

fn drive(
    pid: u32,
    pattern: StallPattern,
    stop: &mpsc::Receiver<()>,
) -> Result<StallReport, StallError> {
    let _continue = ContinueOnExit(pid);
    let mut report = StallReport::default();
    // Cycles start on a fixed grid, so a late wake-up of this thread does
    // not stretch the period.
    let origin = Instant::now();
    loop {
        send(pid, Signal::SIGSTOP)?;
        let stopped_at = Instant::now();
        let ending = asked_to_end(stop, pattern.stopped);
        send(pid, Signal::SIGCONT)?;
        report.longest_stop = report.longest_stop.max(stopped_at.elapsed());
        report.cycles += 1;
        if ending {
            return Ok(report);
        }
        let next = origin + pattern.every * u32::try_from(report.cycles).unwrap_or(u32::MAX);
        if asked_to_end(stop, next.saturating_duration_since(Instant::now())) {
            return Ok(report);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pid: u32) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let (_, tail) = stat.rsplit_once(") ").expect("comm");
        tail.chars().next().expect("state")
    }

    #[test]
    fn a_pattern_stops_for_part_of_its_period() {
        let ms = Duration::from_millis;
        assert!(StallPattern::new(ms(40), ms(100)).is_ok());
        assert!(StallPattern::new(ms(100), ms(100)).is_err());
        assert!(StallPattern::new(ms(0), ms(100)).is_err());
    }

    #[test]
    fn the_driver_stops_and_continues_a_process_and_leaves_it_running() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        let pattern =
            StallPattern::new(Duration::from_millis(300), Duration::from_millis(400)).unwrap();
        let stall = Stall::start(pid, pattern).expect("driver");
        // Stopped for most of each period: seen stopped within a second.
        let started = Instant::now();
        while state(pid) != 'T' {
            assert!(started.elapsed() < Duration::from_secs(5), "never stopped");
            std::thread::sleep(Duration::from_millis(10));
        }
        let report = stall.end().expect("ended cleanly");
        assert!(report.cycles >= 1, "{report:?}");
        assert_ne!(state(pid), 'T', "left running");
        child.kill().expect("kill");
        child.wait().expect("wait");
    }

    #[test]
    fn a_driver_whose_process_is_gone_ends_with_the_reason() {
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let pid = child.id();
        child.wait().expect("reaped");
        let pattern =
            StallPattern::new(Duration::from_millis(10), Duration::from_millis(20)).unwrap();
        let err = Stall::start(pid, pattern)
            .expect("driver")
            .end()
            .unwrap_err();
        assert!(matches!(err, StallError::Signal { .. }), "{err}");
    }
}
