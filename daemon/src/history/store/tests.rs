use std::time::{Duration, SystemTime};

use meshd_domain::EventKind;
use meshd_domain::fixtures::{id, wall};
use meshd_domain::history::{Entry, EntryKind, HistoryQuery, Incident};

use super::*;

const DAY: Duration = Duration::from_secs(24 * 3600);

fn caps(max_bytes: u64) -> Caps {
    Caps {
        max_bytes,
        max_age: 30 * DAY,
    }
}

/// A cut and its page, as a busy night records them: four entries.
fn cut(id_: u64, at: SystemTime) -> Incident {
    let entry = |offset: u64, kind: EntryKind, summary: &str| Entry {
        at: at + Duration::from_millis(offset),
        kind,
        subject: "studio-1/en2 <-> studio-2/en3".into(),
        summary: format!("link studio-1/en2 <-> studio-2/en3 {summary}"),
        nodes: vec![id("studio-1"), id("studio-2")],
    };
    Incident {
        id: id_,
        observer: id("studio-1"),
        started_at: at,
        ended_at: Some(at + Duration::from_secs(4)),
        entries: vec![
            entry(
                0,
                EntryKind::Event(EventKind::LinkDown),
                "is down: no reply for 600ms on either end",
            ),
            entry(900, EntryKind::PageSent, "paged: MeshLinkDown"),
            entry(
                4000,
                EntryKind::Event(EventKind::LinkRecovered),
                "is up again",
            ),
            entry(4500, EntryKind::PageResolved, "page resolved: MeshLinkDown"),
        ],
        entries_left_out: 0,
        open_problems: vec![],
    }
}

fn all(store: &Store, now: SystemTime) -> Vec<Incident> {
    store
        .query(
            &HistoryQuery {
                since: Some(SystemTime::UNIX_EPOCH),
                ..Default::default()
            },
            now,
        )
        .expect("query")
}

#[test]
fn incidents_survive_a_reopen_and_the_stop_is_remembered() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state/history.redb");
    let (mut store, found) = Store::open(&path, caps(8 << 20), wall(0)).expect("open");
    assert_eq!(found, Found::New);
    let written = store
        .write(vec![cut(1, wall(10)), cut(2, wall(20))], 3, wall(30))
        .expect("write");
    assert_eq!(written.new_incidents, 2);
    // A changed incident replaces its earlier version.
    let written = store
        .write(vec![cut(2, wall(21))], 3, wall(30))
        .expect("write");
    assert_eq!(written.new_incidents, 0);
    drop(store); // as a kill would: no clean stop
    let (store, found) = Store::open(&path, caps(8 << 20), wall(40)).expect("reopen");
    assert_eq!(found, Found::Existing { clean_stop: false });
    assert_eq!(store.next_id(), 3);
    let found = all(&store, wall(40));
    assert_eq!(
        found.iter().map(|i| i.id).collect::<Vec<_>>(),
        [2, 1],
        "newest first"
    );
    assert_eq!(found[0].started_at, wall(21));
    assert_eq!(store.latest().expect("latest").len(), 2);
    store.close().expect("close");
    let (_, found) = Store::open(&path, caps(8 << 20), wall(50)).expect("reopen");
    assert_eq!(found, Found::Existing { clean_stop: true });
}

#[test]
fn incidents_older_than_the_age_cap_go_first() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("history.redb");
    let (mut store, _) = Store::open(&path, caps(8 << 20), wall(0)).expect("open");
    let now = wall(0) + 40 * DAY;
    let mut open = cut(3, wall(0) + Duration::from_secs(60));
    open.ended_at = None;
    store
        .write(vec![cut(1, wall(0)), cut(2, now - DAY), open], 4, now)
        .expect("write");
    let kept: Vec<u64> = all(&store, now).iter().map(|i| i.id).collect();
    // The first ended 40 days ago and goes; the one still open started
    // as long ago but has not ended, and stays.
    assert_eq!(kept, [2, 3]);
}

#[test]
fn a_week_at_ten_incidents_a_minute_stays_under_the_size_cap() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("history.redb");
    let cap: u64 = 4 << 20;
    let start = wall(0);
    let (mut store, _) = Store::open(&path, caps(cap), start).expect("open");
    let mut largest = 0;
    let mut next_id = 1;
    // A batch every five minutes (the writer's are smaller and more
    // frequent; the caps are kept after each batch either way).
    for minute in (0..7 * 24 * 60u64).step_by(5) {
        let at = start + Duration::from_secs(minute * 60);
        let batch: Vec<Incident> = (0..50)
            .map(|i| {
                next_id += 1;
                cut(next_id - 1, at + Duration::from_secs(i * 6))
            })
            .collect();
        let written = store.write(batch, next_id, at).expect("write");
        largest = largest.max(written.file_bytes);
        assert!(
            written.file_bytes <= cap,
            "minute {minute}: {} bytes, cap {cap}",
            written.file_bytes
        );
    }
    let now = start + 7 * DAY;
    let kept = all(&store, now);
    assert!(kept.len() > 1000, "{} kept", kept.len());
    assert_eq!(kept[0].id, next_id - 1, "the newest is kept");
    let oldest = kept.last().map(|i| i.id).unwrap_or_default();
    assert!(oldest > 1, "some were dropped");
    assert_eq!(
        kept.len() as u64,
        next_id - oldest,
        "only the oldest went: the ids kept have no holes"
    );
    eprintln!(
        "a week at 10/min: largest file {largest} bytes under a cap of {cap}; {} incidents kept",
        kept.len()
    );
}

#[test]
fn a_garbage_file_is_moved_aside_and_a_new_history_starts() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("history.redb");
    let garbage: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &garbage).expect("write garbage");
    let (mut store, found) = Store::open(&path, caps(8 << 20), wall(1)).expect("open");
    let Found::MovedAside { to, why } = found else {
        panic!("not moved aside: {found:?}");
    };
    assert_eq!(
        to,
        dir.path()
            .join(format!("history.redb.corrupt-{}", 1_800_000_001))
    );
    assert_eq!(std::fs::read(&to).expect("aside"), garbage, "{why}");
    store
        .write(vec![cut(1, wall(2))], 2, wall(3))
        .expect("the new history works");
    assert_eq!(all(&store, wall(4)).len(), 1);
}

#[test]
fn a_truncated_history_is_moved_aside_or_read_never_a_failed_start() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("history.redb");
    let (mut store, _) = Store::open(&path, caps(8 << 20), wall(0)).expect("open");
    let batch: Vec<Incident> = (1..200).map(|i| cut(i, wall(i))).collect();
    store.write(batch, 200, wall(300)).expect("write");
    store.close().expect("close");
    let length = std::fs::metadata(&path).expect("file").len();
    for keep in [length / 2, 4096, 100, 1] {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open file");
        file.set_len(keep).expect("truncate");
        drop(file);
        let (mut store, found) =
            Store::open(&path, caps(8 << 20), wall(400 + keep)).expect("opens");
        assert!(
            matches!(found, Found::MovedAside { .. }),
            "a file cut to {keep} of {length} bytes: {found:?}"
        );
        store
            .write(vec![cut(1, wall(2))], 2, wall(3))
            .expect("the new history works");
        store.close().expect("close");
        let again = std::fs::metadata(&path).expect("file").len();
        assert!(again > 0);
    }
}

#[test]
fn another_programs_redb_file_is_moved_aside() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("history.redb");
    {
        let db = Database::create(&path).expect("create");
        let write = db.begin_write().expect("write");
        {
            let other: TableDefinition<&str, &str> = TableDefinition::new("settings");
            let mut table = write.open_table(other).expect("table");
            table.insert("theme", "dark").expect("insert");
        }
        write.commit().expect("commit");
    }
    let (_, found) = Store::open(&path, caps(8 << 20), wall(1)).expect("open");
    assert!(
        matches!(found, Found::MovedAside { ref why, .. } if why.contains("settings")),
        "{found:?}"
    );
}

#[test]
fn a_history_another_meshd_holds_is_left_alone() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("history.redb");
    let (_held, _) = Store::open(&path, caps(8 << 20), wall(0)).expect("open");
    let second = Store::open(&path, caps(8 << 20), wall(1));
    assert!(
        matches!(second, Err(StoreError::InUse { .. })),
        "{second:?}"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["history.redb"]);
}

#[test]
fn an_unreadable_entry_is_skipped_and_pruned() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("history.redb");
    let (mut store, _) = Store::open(&path, caps(8 << 20), wall(0)).expect("open");
    {
        let write = store.db.begin_write().expect("write");
        {
            let mut table = write.open_table(INCIDENTS).expect("table");
            table
                .insert(1, b"\xff\xffnot an incident".as_slice())
                .expect("insert");
        }
        write.commit().expect("commit");
    }
    store
        .write(vec![cut(2, wall(5))], 3, wall(6))
        .expect("write");
    assert_eq!(
        all(&store, wall(7))
            .iter()
            .map(|i| i.id)
            .collect::<Vec<_>>(),
        [2]
    );
    assert_eq!(
        store.incidents_stored().expect("count"),
        1,
        "the bad entry was pruned"
    );
}
