//! The CPU time of other processes, as the chaos and cost benchmarks
//! measure it.

use std::time::{Duration, Instant};

use anyhow::Context;
use meshd_lab::command::{self, QUICK};
use meshd_platform::linux::procs::parse_stat;

/// The 1-minute load average.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The clock ticks `/proc/PID/stat` counts CPU time in.
fn ticks_per_second() -> anyhow::Result<f64> {
    command::run("getconf", &["CLK_TCK"], QUICK)?
        .trim()
        .parse()
        .context("CLK_TCK")
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read(&path).with_context(|| format!("reading {path}"))?;
    parse_stat(&stat)
        .with_context(|| format!("parsing {path}"))
        .map(|stat| stat.cpu_ticks)
}

/// How a process's CPU time over a window is measured, the same way for
/// every process of a run.
///
/// utime and stime in `/proc/PID/stat` come in whole clock ticks (10 ms at
/// 100 a second): a daemon using 0.5 % of a core gets about 30 a minute,
/// too coarse for the 5–10 % differences the cost bench is for. The
/// process's CPU-time clock (`clock_getcpuclockid`) counts the scheduler's
/// run time of all its threads, those that exited included, in
/// nanoseconds; it is used wherever the kernel gives it, the ticks only
/// where it does not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum CpuClock {
    /// The process's CPU-time clock, in ns.
    Process,
    /// utime + stime of the process, `hz` clock ticks a second.
    Ticks { hz: f64 },
}

impl CpuClock {
    /// The process clock where this kernel gives it (judged on this
    /// process), the ticks otherwise.
    pub(crate) fn detect() -> anyhow::Result<Self> {
        if process_cpu_ns(std::process::id()).is_ok() {
            Ok(Self::Process)
        } else {
            Ok(Self::Ticks {
                hz: ticks_per_second()?,
            })
        }
    }

    /// The output line saying how CPU was measured.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Process => {
                "CPU: the processes' CPU-time clocks (clock_getcpuclockid), ns precision"
            }
            Self::Ticks { .. } => {
                "CPU: utime+stime clock ticks (no process CPU-time clock), ±1 tick per process"
            }
        }
    }

    /// The CPU time process `pid` has used so far, in this clock's unit.
    pub(crate) fn sample(self, pid: u32) -> anyhow::Result<u64> {
        match self {
            Self::Process => process_cpu_ns(pid),
            Self::Ticks { .. } => cpu_ticks(pid),
        }
    }

    /// The CPU each of `pids` used over `window` (all sampled together,
    /// nothing else done in between), in % of one core.
    pub(crate) fn percent_over(self, pids: &[u32], window: Duration) -> anyhow::Result<Vec<f64>> {
        let before: Vec<u64> = pids
            .iter()
            .map(|&p| self.sample(p))
            .collect::<Result<_, _>>()?;
        let t0 = Instant::now();
        std::thread::sleep(window);
        let after: Vec<u64> = pids
            .iter()
            .map(|&p| self.sample(p))
            .collect::<Result<_, _>>()?;
        let wall = t0.elapsed().as_secs_f64();
        Ok(before
            .iter()
            .zip(after)
            .map(|(b, a)| self.seconds(a.saturating_sub(*b)) / wall * 100.0)
            .collect())
    }

    /// Seconds of CPU in `used` units of this clock.
    pub(crate) fn seconds(self, used: u64) -> f64 {
        match self {
            Self::Process => used as f64 / 1e9,
            Self::Ticks { hz } => used as f64 / hz,
        }
    }

    /// The heading of the column showing a window's `used` units.
    pub(crate) fn column(self) -> &'static str {
        match self {
            Self::Process => "CPU ms",
            Self::Ticks { .. } => "ticks",
        }
    }

    /// `used` units of this clock, for [`Self::column`].
    pub(crate) fn amount(self, used: u64) -> String {
        match self {
            Self::Process => format!("{:.1}", used as f64 / 1e6),
            Self::Ticks { .. } => used.to_string(),
        }
    }
}

/// The CPU time process `pid` has used so far, in ns, from its CPU-time
/// clock.
#[cfg(target_os = "linux")]
fn process_cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let process = nix::unistd::Pid::from_raw(
        i32::try_from(pid).with_context(|| format!("pid {pid} is out of range"))?,
    );
    let clock = nix::time::clock_getcpuclockid(process)
        .with_context(|| format!("no CPU-time clock for process {pid}"))?;
    let now = nix::time::clock_gettime(clock)
        .with_context(|| format!("reading the CPU-time clock of process {pid}"))?;
    let ns = i128::from(now.tv_sec()) * 1_000_000_000 + i128::from(now.tv_nsec());
    u64::try_from(ns).with_context(|| format!("process {pid}: CPU time {ns} ns"))
}

/// The lab runs on Linux only; elsewhere there is no other process's
/// CPU-time clock to read (macOS has no `clock_getcpuclockid`).
#[cfg(not(target_os = "linux"))]
fn process_cpu_ns(pid: u32) -> anyhow::Result<u64> {
    anyhow::bail!("no CPU-time clock for process {pid} on this OS")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn this_process_cpu_time_grows_while_it_works() {
        let clock = CpuClock::detect().unwrap();
        let pid = std::process::id();
        let before = clock.sample(pid).unwrap();
        // Work until the clock has counted some of it, however busy the
        // host is (the tick fallback counts in 10 ms steps).
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut x = 0_u64;
        let grew = loop {
            let slice = Instant::now();
            while slice.elapsed() < Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
            let used = clock.sample(pid).unwrap().saturating_sub(before);
            if used > 0 || Instant::now() > deadline {
                break used;
            }
        };
        assert!(grew > 0, "no CPU time counted in 20 s of work");
        assert!(clock.seconds(grew) > 0.0);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_process_that_is_not_there_is_an_error_naming_it() {
        // Above pid_max (at most 2^22): no such process.
        let pid = 1 << 23;
        let error = CpuClock::Process.sample(pid).unwrap_err();
        assert!(format!("{error:#}").contains(&pid.to_string()), "{error:#}");
        let error = process_cpu_ns(u32::MAX).unwrap_err();
        assert!(format!("{error:#}").contains("out of range"), "{error:#}");
    }
}
