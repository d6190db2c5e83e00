//! The one lock that the tests which must not overlap take: whole meshes
//! whose verdicts are judged against deadlines, the network-namespace lab,
//! CPU hogs, and the Prometheus and Alertmanager meshes.
//!
//! `cargo test` runs the tests of one binary as threads of one process,
//! nextest runs each test as a process of its own, and two checkouts on one
//! machine may run their suites at the same time. An advisory `flock` on one
//! fixed path serialises all three: each holder opens the file itself, so
//! threads of one process exclude each other as processes do, and the kernel
//! releases the lock when its holder exits, however it ends (a panic, a
//! runner's timeout kill). nextest's `mesh` test group (.config/nextest.toml)
//! only saves a process slot that would otherwise sit waiting here.
//!
//! ```no_run
//! let _serial = meshd_test_lock::exclusive();
//! // ... start the mesh; it is stopped before `_serial` is dropped
//! ```

use std::fs::{File, OpenOptions, Permissions, TryLockError};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Machine-wide on purpose: not under the checkout, nor in a per-user
/// temporary directory (macOS's `$TMPDIR`), so that runs from different
/// checkouts and users meet on the same file.
pub const LOCK_PATH: &str = "/tmp/meshd-serial-tests.lock";

/// Held while a test that needs the machine to itself runs; dropping it
/// (closing the file) releases the lock.
#[derive(Debug)]
#[must_use = "the lock is released as soon as this is dropped"]
pub struct Exclusive {
    _file: File,
}

/// Waits until no other meshd test holds [`LOCK_PATH`], then holds it.
///
/// # Panics
/// When the lock file cannot be opened or locked: the test cannot know it
/// runs alone, so it must not run.
pub fn exclusive() -> Exclusive {
    Exclusive::at(Path::new(LOCK_PATH))
        .unwrap_or_else(|err| panic!("cannot take the serial-tests lock {LOCK_PATH}: {err}"))
}

impl Exclusive {
    /// Waits for, then holds, an exclusive `flock` on `path`, creating the
    /// file if there is none.
    pub fn at(path: &Path) -> io::Result<Self> {
        let file = open_or_create(path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                // Said once, so a test that seems stuck explains itself.
                eprintln!(
                    "waiting for {}: another meshd test (perhaps from another checkout) holds it",
                    path.display()
                );
                file.lock()?;
            }
            Err(TryLockError::Error(err)) => return Err(err),
        }
        Ok(Self { _file: file })
    }
}

/// Read-only is enough for `flock`, so a lock file that root created serves
/// a normal user and the other way round. An existing file is opened
/// without `O_CREAT`: with `fs.protected_regular` the kernel refuses
/// `O_CREAT` on another user's file in sticky `/tmp`, even to root.
fn open_or_create(path: &Path) -> io::Result<File> {
    match File::open(path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        opened => return opened,
    }
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(file) => {
            // Readable by every user whatever the umask.
            file.set_permissions(Permissions::from_mode(0o644))?;
            Ok(file)
        }
        // Another test created it between the two calls.
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => File::open(path),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn holders_in_threads_of_one_process_never_overlap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Arc::new(dir.path().join("serial.lock"));
        let inside = Arc::new(AtomicUsize::new(0));
        let most_inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (path, inside, most_inside) = (
                    Arc::clone(&path),
                    Arc::clone(&inside),
                    Arc::clone(&most_inside),
                );
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        let _held = Exclusive::at(&path).expect("lock");
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most_inside.fetch_max(now, Ordering::SeqCst);
                        // Long enough for the others to try to get in.
                        std::thread::sleep(Duration::from_millis(5));
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        assert_eq!(most_inside.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_dropped_holder_releases_the_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("serial.lock");
        let held = Exclusive::at(&path).expect("lock");
        let other = File::open(&path).expect("open");
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        drop(held);
        other.try_lock().expect("free once the holder is gone");
    }

    #[test]
    fn a_read_only_lock_file_still_locks_and_is_created_readable_by_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("serial.lock");
        drop(Exclusive::at(&path).expect("created"));
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        // As another user's file is to us: no write access needed.
        std::fs::set_permissions(&path, Permissions::from_mode(0o444)).expect("chmod");
        let _held = Exclusive::at(&path).expect("read-only file locks");
        let other = File::open(&path).expect("open");
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
    }
}
