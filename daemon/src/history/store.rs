//! The incident history on disk: one redb file (ARCHITECTURE.md,
//! "History"). Blocking I/O, owned by the history's own thread; nothing
//! here runs on the runtime's workers.
//!
//! Incidents are stored by id (increasing with their start), encoded as the
//! wire's `Incident`, and read back through the same checks as a reply from
//! the network. Every batch is one transaction committed with fsync, so a
//! kill loses at most the batch being written. Caps: incidents that ended
//! longer ago than `max_age` go, then the oldest while the stored bytes are
//! over budget; the file is compacted when it grew past its cap anyway.

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use meshd_domain::history::{HistoryQuery, Incident};
use meshd_proto::convert::{decode_incident, encode_incident};
use redb::{
    CompactionMode, Database, DatabaseError, Durability, ReadableDatabase, ReadableTable,
    ReadableTableMetadata, TableDefinition, TableHandle,
};

const INCIDENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("incidents");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// `META` keys.
const FORMAT_KEY: &str = "format";
const NEXT_ID_KEY: &str = "next_id";
const STORED_BYTES_KEY: &str = "stored_bytes";
/// 1 once a run stopped cleanly, 0 while one runs.
const CLEAN_STOP_KEY: &str = "clean_stop";

/// This build's layout of the file; another is a foreign file.
const FORMAT: u64 = 1;

/// redb's page cache: the history is written in small batches and read
/// rarely, so a little is plenty (redb's default is a gibibyte).
const CACHE_BYTES: usize = 4 << 20;

/// The share of `max_bytes` the incidents' own bytes may fill: the rest is
/// the B-tree's pages, partly filled, and pages freed by the last commits
/// that redb reuses only once no reader needs them (BENCHMARKS.md,
/// "History", measured).
const PAYLOAD_SHARE_PERCENT: u64 = 40;

/// Incidents the start hands the grouping: the newest hold those still
/// open (several faults can be open at once) and the last ones that ended.
const RESUME_INCIDENTS: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path} is in use by another meshd (redb holds a lock on it)")]
    InUse { path: PathBuf },
    #[error("cannot create {dir}: {error}")]
    Directory { dir: PathBuf, error: std::io::Error },
    #[error("cannot open {path}: {error}")]
    Open { path: PathBuf, error: String },
    #[error("cannot move {path} aside: {error}")]
    MoveAside {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("history store: {0}")]
    Redb(String),
}

impl StoreError {
    fn redb(error: impl std::fmt::Display) -> Self {
        Self::Redb(error.to_string())
    }
}

/// What opening found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No file, or an empty one: a new history.
    New,
    /// A history this build wrote; whether its last run stopped cleanly.
    Existing { clean_stop: bool },
    /// The file was unreadable or someone else's: moved to `to`, and a new
    /// history started.
    MovedAside { to: PathBuf, why: String },
}

/// The caps of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub max_bytes: u64,
    pub max_age: Duration,
}

impl Caps {
    fn payload_budget(&self) -> u64 {
        self.max_bytes / 100 * PAYLOAD_SHARE_PERCENT
    }
}

/// What a batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Incidents stored for the first time.
    pub new_incidents: u64,
    /// Incidents dropped for the caps.
    pub pruned: u64,
    /// The file's size after the batch.
    pub file_bytes: u64,
}

#[derive(Debug)]
pub struct Store {
    db: Database,
    path: PathBuf,
    caps: Caps,
    next_id: u64,
    stored_bytes: u64,
}

impl Store {
    /// Opens the history at `path`, creating it and its directory. A file
    /// that is not a history of this build (garbage, truncated, another
    /// program's, a newer format) is renamed to `<name>.corrupt-<unix
    /// seconds>` and a new history is started: a history must never keep
    /// meshd from starting. A file another meshd holds is left alone.
    pub fn open(path: &Path, caps: Caps, now: SystemTime) -> Result<(Self, Found), StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The history names the mesh's nodes and what went wrong with
            // them: for meshd's user alone, as systemd's StateDirectory is.
            let mut builder = fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(dir).map_err(|error| StoreError::Directory {
                dir: dir.to_owned(),
                error,
            })?;
        }
        match Self::open_as_is(path, caps) {
            Ok(opened) => Ok(opened),
            Err(OpenFailure::InUse) => Err(StoreError::InUse {
                path: path.to_owned(),
            }),
            Err(OpenFailure::Unusable(why)) => {
                let to = aside_name(path, now);
                fs::rename(path, &to).map_err(|error| StoreError::MoveAside {
                    path: path.to_owned(),
                    error,
                })?;
                match Self::open_as_is(path, caps) {
                    Ok((store, _)) => Ok((store, Found::MovedAside { to, why })),
                    Err(OpenFailure::InUse) => Err(StoreError::InUse {
                        path: path.to_owned(),
                    }),
                    Err(OpenFailure::Unusable(error)) => Err(StoreError::Open {
                        path: path.to_owned(),
                        error,
                    }),
                }
            }
        }
    }

    fn open_as_is(path: &Path, caps: Caps) -> Result<(Self, Found), OpenFailure> {
        // redb checks every page's checksum on open, so an altered file is
        // refused here rather than trusted; a debug build of redb asserts
        // on some damage instead, which must not take meshd down either.
        let opened = catch_unwind(AssertUnwindSafe(|| {
            Database::builder()
                .set_cache_size(CACHE_BYTES)
                .set_check_integrity_on_open(true)
                .create(path)
        }));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch)) => {
                return Err(OpenFailure::InUse);
            }
            Ok(Err(error)) => return Err(OpenFailure::Unusable(error.to_string())),
            Err(_) => return Err(OpenFailure::Unusable("redb panicked reading it".to_owned())),
        };
        let checked = catch_unwind(AssertUnwindSafe(|| Self::check_layout(&db)));
        let clean_stop = match checked {
            Ok(Ok(clean_stop)) => clean_stop,
            Ok(Err(why)) => return Err(OpenFailure::Unusable(why)),
            Err(_) => return Err(OpenFailure::Unusable("redb panicked reading it".to_owned())),
        };
        let mut store = Self {
            db,
            path: path.to_owned(),
            caps,
            next_id: 1,
            stored_bytes: 0,
        };
        store
            .begin_run()
            .map_err(|e| OpenFailure::Unusable(e.to_string()))?;
        let found = match clean_stop {
            None => Found::New,
            Some(clean_stop) => Found::Existing { clean_stop },
        };
        Ok((store, found))
    }

    /// This build's layout, or why not: `None` for a new file, else
    /// whether its last run stopped cleanly.
    fn check_layout(db: &Database) -> Result<Option<bool>, String> {
        let read = db.begin_read().map_err(|e| e.to_string())?;
        let tables: Vec<String> = read
            .list_tables()
            .map_err(|e| e.to_string())?
            .map(|t| t.name().to_owned())
            .collect();
        if tables.is_empty() {
            // New, or a redb file with nothing in it: ours to use.
            return Ok(None);
        }
        if tables
            .iter()
            .any(|t| t != INCIDENTS.name() && t != META.name())
        {
            return Err(format!(
                "not a meshd history: it holds the tables {tables:?}"
            ));
        }
        let meta = read
            .open_table(META)
            .map_err(|e| format!("not a meshd history: {e}"))?;
        let format = meta
            .get(FORMAT_KEY)
            .map_err(|e| e.to_string())?
            .map(|v| v.value());
        if format != Some(FORMAT) {
            return Err(format!(
                "history format {format:?}, this build reads {FORMAT}"
            ));
        }
        // The incidents table must hold what it should, too.
        if tables.iter().any(|t| t == INCIDENTS.name()) {
            read.open_table(INCIDENTS)
                .map_err(|e| format!("not a meshd history: {e}"))?;
        }
        let clean = meta
            .get(CLEAN_STOP_KEY)
            .map_err(|e| e.to_string())?
            .is_some_and(|v| v.value() == 1);
        Ok(Some(clean))
    }

    /// Marks the run started (not stopped cleanly) and reads the counters.
    fn begin_run(&mut self) -> Result<(), StoreError> {
        let mut write = self.db.begin_write().map_err(StoreError::redb)?;
        write.set_quick_repair(true);
        {
            let mut meta = write.open_table(META).map_err(StoreError::redb)?;
            write_meta(&mut meta, FORMAT_KEY, FORMAT)?;
            write_meta(&mut meta, CLEAN_STOP_KEY, 0)?;
            self.next_id = read_meta(&meta, NEXT_ID_KEY)?.unwrap_or(1).max(1);
            self.stored_bytes = read_meta(&meta, STORED_BYTES_KEY)?.unwrap_or(0);
            write.open_table(INCIDENTS).map_err(StoreError::redb)?;
        }
        write.commit().map_err(StoreError::redb)?;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One past the largest incident id ever stored.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The newest incidents, for the grouping to carry on from; any it
    /// cannot read are skipped.
    pub fn latest(&self) -> Result<Vec<Incident>, StoreError> {
        let read = self.db.begin_read().map_err(StoreError::redb)?;
        let table = read.open_table(INCIDENTS).map_err(StoreError::redb)?;
        let mut found = Vec::new();
        for row in table.iter().map_err(StoreError::redb)?.rev() {
            let (_, value) = row.map_err(StoreError::redb)?;
            if let Ok(incident) = decode_incident(value.value()) {
                found.push(incident);
            }
            if found.len() >= RESUME_INCIDENTS {
                break;
            }
        }
        Ok(found)
    }

    /// Stores `incidents` (new or changed) and `next_id` in one durable
    /// transaction, then keeps the caps.
    pub fn write(
        &mut self,
        incidents: Vec<Incident>,
        next_id: u64,
        now: SystemTime,
    ) -> Result<Written, StoreError> {
        let mut written = Written::default();
        let mut write = self.db.begin_write().map_err(StoreError::redb)?;
        write.set_quick_repair(true);
        write
            .set_durability(Durability::Immediate)
            .map_err(StoreError::redb)?;
        let mut stored_bytes = self.stored_bytes;
        {
            let mut table = write.open_table(INCIDENTS).map_err(StoreError::redb)?;
            for incident in incidents {
                let id = incident.id;
                let bytes = encode_incident(incident);
                let old = table
                    .insert(id, bytes.as_slice())
                    .map_err(StoreError::redb)?
                    .map(|old| old.value().len() as u64);
                match old {
                    Some(old) => stored_bytes = stored_bytes.saturating_sub(old),
                    None => written.new_incidents += 1,
                }
                stored_bytes = stored_bytes.saturating_add(bytes.len() as u64);
            }
            let (pruned, after) = prune(&mut table, stored_bytes, self.caps, now)?;
            written.pruned = pruned;
            stored_bytes = after;
            let mut meta = write.open_table(META).map_err(StoreError::redb)?;
            write_meta(&mut meta, NEXT_ID_KEY, next_id)?;
            write_meta(&mut meta, STORED_BYTES_KEY, stored_bytes)?;
        }
        write.commit().map_err(StoreError::redb)?;
        self.stored_bytes = stored_bytes;
        self.next_id = next_id;
        written.file_bytes = self.file_bytes();
        if written.file_bytes > self.caps.max_bytes {
            self.shrink(now)?;
            written.file_bytes = self.file_bytes();
        }
        Ok(written)
    }

    /// The file grew past its cap (pages freed but not yet reused):
    /// compact it, and drop more of the oldest while it stays over.
    fn shrink(&mut self, now: SystemTime) -> Result<(), StoreError> {
        let mut budget = self.caps.payload_budget();
        for _ in 0..4 {
            while self
                .db
                .compact(CompactionMode::Maximum)
                .map_err(StoreError::redb)?
            {}
            if self.file_bytes() <= self.caps.max_bytes {
                return Ok(());
            }
            budget /= 2;
            let caps = Caps {
                max_bytes: budget * 100 / PAYLOAD_SHARE_PERCENT,
                ..self.caps
            };
            let mut write = self.db.begin_write().map_err(StoreError::redb)?;
            write.set_quick_repair(true);
            {
                let mut table = write.open_table(INCIDENTS).map_err(StoreError::redb)?;
                let (_, after) = prune(&mut table, self.stored_bytes, caps, now)?;
                self.stored_bytes = after;
                let mut meta = write.open_table(META).map_err(StoreError::redb)?;
                write_meta(&mut meta, STORED_BYTES_KEY, after)?;
            }
            write.commit().map_err(StoreError::redb)?;
        }
        Ok(())
    }

    /// Incidents `query` admits, newest first, at most `limit` (0: no
    /// limit); any it cannot read are skipped.
    pub fn query(
        &self,
        query: &HistoryQuery,
        now: SystemTime,
    ) -> Result<Vec<Incident>, StoreError> {
        let read = self.db.begin_read().map_err(StoreError::redb)?;
        let table = read.open_table(INCIDENTS).map_err(StoreError::redb)?;
        let mut found = Vec::new();
        for row in table.iter().map_err(StoreError::redb)?.rev() {
            let (_, value) = row.map_err(StoreError::redb)?;
            let Ok(incident) = decode_incident(value.value()) else {
                continue;
            };
            if query.admits(&incident, now) {
                found.push(incident);
                if query.limit > 0 && found.len() >= query.limit {
                    break;
                }
            }
        }
        // Newest first by start: ids follow starts on one node.
        found.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(b.id.cmp(&a.id)));
        Ok(found)
    }

    /// How many incidents are stored.
    pub fn incidents_stored(&self) -> Result<u64, StoreError> {
        let read = self.db.begin_read().map_err(StoreError::redb)?;
        let table = read.open_table(INCIDENTS).map_err(StoreError::redb)?;
        table.len().map_err(StoreError::redb)
    }

    /// Marks the run stopped cleanly, durably.
    pub fn close(self) -> Result<(), StoreError> {
        let write = self.db.begin_write().map_err(StoreError::redb)?;
        {
            let mut meta = write.open_table(META).map_err(StoreError::redb)?;
            write_meta(&mut meta, CLEAN_STOP_KEY, 1)?;
        }
        write.commit().map_err(StoreError::redb)?;
        Ok(())
    }

    /// The file's size on disk now.
    pub fn file_bytes(&self) -> u64 {
        fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }
}

enum OpenFailure {
    /// Another process holds it.
    InUse,
    /// Not a history this build can use, and why.
    Unusable(String),
}

/// `history.redb` → `history.redb.corrupt-1800000000`.
pub fn aside_name(path: &Path, now: SystemTime) -> PathBuf {
    let seconds = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(".corrupt-{seconds}"));
    path.with_file_name(name)
}

fn read_meta(
    meta: &redb::Table<'_, &'static str, u64>,
    key: &str,
) -> Result<Option<u64>, StoreError> {
    Ok(meta.get(key).map_err(StoreError::redb)?.map(|v| v.value()))
}

fn write_meta(
    meta: &mut redb::Table<'_, &'static str, u64>,
    key: &str,
    value: u64,
) -> Result<(), StoreError> {
    meta.insert(key, value).map_err(StoreError::redb)?;
    Ok(())
}

/// Drops, oldest first, incidents that ended before `now - max_age`, then
/// incidents while the stored bytes exceed the payload budget. The open
/// incident is never the oldest for long; it goes only when it alone is
/// over the budget. Returns how many went and the bytes left.
fn prune(
    table: &mut redb::Table<'_, u64, &'static [u8]>,
    mut stored_bytes: u64,
    caps: Caps,
    now: SystemTime,
) -> Result<(u64, u64), StoreError> {
    let oldest_kept = now
        .checked_sub(caps.max_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let budget = caps.payload_budget();
    let mut pruned = 0;
    loop {
        let (id, len, too_old) = {
            let first = table.first().map_err(StoreError::redb)?;
            let Some((key, value)) = first else { break };
            let bytes = value.value();
            let too_old = match decode_incident(bytes) {
                Ok(incident) => incident.ended_at.is_some_and(|end| end < oldest_kept),
                // An entry this build cannot read is no use to anyone.
                Err(_) => true,
            };
            (key.value(), bytes.len() as u64, too_old)
        };
        if !too_old && stored_bytes <= budget {
            break;
        }
        table.remove(id).map_err(StoreError::redb)?;
        stored_bytes = stored_bytes.saturating_sub(len);
        pruned += 1;
    }
    Ok((pruned, stored_bytes))
}

#[cfg(test)]
mod tests;
