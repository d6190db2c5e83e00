//! Log output: human-readable lines by default, one JSON object per line
//! for log shippers. `RUST_LOG` overrides the level. Lines go to stderr,
//! or to a size-capped, rotated file ([`rotate`]) under launchd; repeated
//! warnings are thinned ([`Throttle`]).

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

/// Installs the global subscriber; `default_level` applies when `RUST_LOG`
/// is unset (e.g. "info"). With `file`, lines go there, rotated by size;
/// the error names the file when it cannot be opened.
pub fn init(format: LogFormat, default_level: &str, file: Option<&Path>) -> std::io::Result<()> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match file {
        Some(path) => {
            let log = RotatingFile::open(path).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot open the log file {}: {e}", path.display()),
                )
            })?;
            let builder = builder.with_ansi(false).with_writer(Mutex::new(log));
            match format {
                LogFormat::Human => builder.init(),
                LogFormat::Json => builder.json().flatten_event(true).init(),
            }
        }
        None => {
            // Colours only for a person at a terminal.
            let builder = builder
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr);
            match format {
                LogFormat::Human => builder.init(),
                LogFormat::Json => builder.json().flatten_event(true).init(),
            }
        }
    }
    Ok(())
}

pub mod rotate;
mod throttle;

use rotate::RotatingFile;
pub use throttle::{REPEAT_INTERVAL, Throttle};

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("log").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The shape of every throttled warning: written when admitted, with
    /// the count held back.
    fn warn_throttled(throttle: &mut Throttle<&'static str>, key: &'static str) {
        if let Some(suppressed) = throttle.admit(key, Instant::now()) {
            tracing::warn!(key, suppressed, "something keeps failing");
        }
    }

    #[test]
    fn ten_thousand_identical_warnings_in_a_second_write_a_bounded_number_of_lines() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let mut throttle = Throttle::new(REPEAT_INTERVAL);
        let started = Instant::now();
        for _ in 0..10_000 {
            warn_throttled(&mut throttle, "read-failed");
        }
        let took = started.elapsed();
        let text = String::from_utf8_lossy(&captured.0.lock().expect("log")).into_owned();
        let lines = text.lines().count();
        // One line per started interval of REPEAT_INTERVAL (10 s).
        let bound = 1 + usize::try_from(took.as_secs() / REPEAT_INTERVAL.as_secs()).unwrap_or(0);
        assert!(
            (1..=bound).contains(&lines),
            "{lines} lines in {took:?}:\n{text}"
        );
    }
}
