//! The RocksDB store behind the durable tier (the `durable` feature).

use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rocksdb::{
    compaction_filter::Decision, ColumnFamilyDescriptor, Options, ReadOptions, WriteBatch,
    WriteOptions, DB,
};

use super::codec::{Record, RecordState};
use super::group::{Delay, GroupCommit};
use super::journal::{self, Journal};
use super::live_done;
use super::{fp_key, StateOp};
use crate::clock::Clock;
use crate::config::{ClaimMarkers, FailurePolicy, SyncPolicy};
use crate::error::{Error, StoreError};
use crate::hot::{DurableDone, DurableLookup, Fp, Stored};
use crate::prefilter::{bloom_hash, Prefilter, PINNED};

mod dlq;
pub(crate) use dlq::{
    message_key as dlq_message_key, scan_letters, scan_options as dlq_scan_options,
};

/// The database format this build writes: stored under [`FORMAT_KEY`].
use super::FORMAT_VERSION;

thread_local! {
    /// Set while this thread runs [`failing_closed`]'s closure.
    static FAILING_CLOSED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's claims reading the durable tier failing closed,
/// whatever their namespace's failure policy: a durable read that fails makes the
/// claim fail with the store's error instead of deciding from the hot tier alone. A
/// dead-letter replay claims so: after a restart the hot tier does not know a key
/// done on disk, and under `FailOpen` a failed read would let the replay acquire it
/// and apply it again. Only a failed read looks at the flag, so claims pay nothing
/// for it.
pub(crate) fn failing_closed<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the flag back as it was, on a panic too.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            FAILING_CLOSED.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(FAILING_CLOSED.with(|c| c.replace(true)));
    f()
}
const FORMAT_KEY: &[u8] = b"idem/format";
const SEED_KEY: &[u8] = b"idem/seed";
/// Prefix of the keys (in the default column family) under which each namespace's
/// settings are stored: [`NsSettings`].
const SETTINGS_PREFIX: &[u8] = b"idem/ns/";

/// What a namespace was configured with, as the last engine on the database stored
/// it: for tools that open the database without the application's configuration
/// (`idem dlq`), so that what they write lasts as the application's records do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NsSettings {
    pub(crate) ttl_ms: u64,
    pub(crate) lease_ms: u64,
    pub(crate) retention_ms: u64,
    pub(crate) max_key_len: u64,
}

impl NsSettings {
    const VERSION: u8 = 1;

    fn encode(&self) -> [u8; 33] {
        let mut b = [0u8; 33];
        b[0] = Self::VERSION;
        for (i, v) in [
            self.ttl_ms,
            self.lease_ms,
            self.retention_ms,
            self.max_key_len,
        ]
        .into_iter()
        .enumerate()
        {
            b[1 + 8 * i..9 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// `None` for bytes of another length or version.
    fn decode(b: &[u8]) -> Option<NsSettings> {
        if b.len() != 33 || b[0] != Self::VERSION {
            return None;
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[1 + 8 * i..9 + 8 * i]);
            u64::from_le_bytes(w)
        };
        Some(NsSettings {
            ttl_ms: word(0),
            lease_ms: word(1),
            retention_ms: word(2),
            max_key_len: word(3),
        })
    }
}

fn settings_key(ns: &str) -> Vec<u8> {
    [SETTINGS_PREFIX, ns.as_bytes()].concat()
}

/// The settings stored for namespace `ns` in the database at `path` (read-only; the
/// database may be open in an engine meanwhile): `None` if there are none (a
/// database written before they were stored), an error if they cannot be read.
pub(crate) fn stored_settings(path: &Path, ns: &str) -> Result<Option<NsSettings>, Error> {
    let db = DB::open_for_read_only(&Options::default(), path, false)
        .map_err(|e| store_err("open read-only", e))?;
    read_settings(&db, ns)
}

/// The settings stored for namespace `ns` in `db`, as [`stored_settings`] reads them.
pub(crate) fn read_settings(db: &DB, ns: &str) -> Result<Option<NsSettings>, Error> {
    match db.get(settings_key(ns)).map_err(|e| store_err("read", e))? {
        None => Ok(None),
        Some(b) => NsSettings::decode(&b).map(Some).ok_or_else(|| {
            Error::Store(StoreError::new(
                "read",
                format!(
                    "the stored settings of namespace {ns:?} are damaged or of a newer version"
                ),
            ))
        }),
    }
}

fn done_cf(ns: &str) -> String {
    format!("done:{ns}")
}

fn claims_cf(ns: &str) -> String {
    format!("claims:{ns}")
}

/// The names of a namespace's column families, made once: a point read or a
/// completion on the claim path looks its column families up by name, and building
/// the names there with `format!` (allocation included) cost about a sixth of a
/// read's instructions (BENCHMARKS.md, 2026-12-02, "the column families' names").
#[derive(Debug, Clone)]
pub(crate) struct Families {
    done: String,
    claims: String,
}

impl Families {
    pub(crate) fn of(ns: &str) -> Self {
        Families {
            done: done_cf(ns),
            claims: claims_cf(ns),
        }
    }
}

fn state_cf(family: &str) -> String {
    format!("state:{family}")
}

/// The memtable of a done column family: a hash of skip lists keyed by the first 8
/// bytes of the fingerprint (uniform), so a point read of a record still in memory is
/// a bucket look-up and a few nodes, instead of a descent through one skip list of up
/// to a million records (a cache miss per level). Iterating a done column family then
/// needs `total_order_seek` (the prefilter rebuild sets it).
fn done_cf_options(opts: &mut Options) {
    opts.set_prefix_extractor(rocksdb::SliceTransform::create_fixed_prefix(8));
    opts.set_memtable_factory(rocksdb::MemtableFactory::HashSkipList {
        // About the records a 64 MiB write buffer holds.
        bucket_count: 1 << 20,
        height: 4,
        branching_factor: 4,
    });
    // A Bloom filter over each memtable's prefixes (the fingerprint's first 8 bytes):
    // a point read of a key a memtable does not hold (a new key the prefilter let
    // through, every new key without a prefilter, a record already flushed) skips
    // that memtable's bucket array, a cache miss into 8 MiB, for a probe of a
    // filter a fiftieth of the write buffer's size (1.3 MiB at 64 MiB, about 13 bits
    // an entry). Measured in W3 (BENCHMARKS.md, 2026-12-02 afternoon): claims that
    // read an absent key p50 0.71-0.73 us against 0.94-1.16 us.
    opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
    // Bloom filters in the SST files (10 bits a key, held by the table readers): a
    // point read probes only the files that may hold the key, where it would otherwise
    // search the index and a data block of every level's candidate. They hold the
    // 8-byte prefixes only: the fingerprint's first 8 bytes are as selective as the
    // whole key, and a whole-key filter beside the prefix extractor would store both
    // (20 bits a key). Reads of present keys (past the hot TTL, after a restart) took
    // half the time in W5 (BENCHMARKS.md).
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    table.set_whole_key_filtering(false);
    opts.set_block_based_table_factory(&table);
}

/// The most write-ahead log RocksDB keeps, per done column family, before it
/// flushes the column families that hold its oldest file (`Store::open`): about one
/// done memtable's worth (a 64 MiB write buffer). The unit tests use a smaller one,
/// to reach it quickly.
const MAX_TOTAL_WAL_BYTES: u64 = if cfg!(test) { 1 << 20 } else { 64 << 20 };

/// The size of a done column family's memtable Bloom filter, as a share of its
/// write buffer (see `done_cf_options`).
const MEMTABLE_BLOOM_RATIO: f64 = 0.02;

impl Drop for Store {
    /// Drops the column families of an open that was refused after it added them
    /// (nothing but that open wrote them), best effort: a family left behind only
    /// lists its namespace as unconfigured at later opens. (A database the refused
    /// open created goes as a whole, once it has closed: see [`NewDatabase`].)
    fn drop(&mut self) {
        let added = std::mem::take(self.added_families.get_mut());
        if self.created.0.get_mut().is_some() {
            return;
        }
        for name in added {
            if let Err(e) = self.db.drop_cf(&name) {
                tracing::warn!(
                    family = %name,
                    error = %e,
                    "a refused open could not remove the column family it added"
                );
            }
        }
    }
}

/// What opening found, beyond the open database.
#[derive(Debug, Default)]
pub(crate) struct OpenReport {
    /// Namespaces with data in the database that the configuration does not name.
    pub(crate) unconfigured: Vec<String>,
    /// Whether the database was created by this open.
    pub(crate) created: bool,
}

/// A testing hook's failure: while `on` is set, `operation` fails as a failing disk
/// would ("the disk refuses {refuses}").
fn injected(on: &AtomicBool, operation: &'static str, refuses: &str) -> Result<(), Error> {
    if on.load(Ordering::SeqCst) {
        return Err(Error::Store(StoreError::new(
            operation,
            format!("injected failure: the disk refuses {refuses}"),
        )));
    }
    Ok(())
}

/// The open database.
pub(crate) struct Store {
    db: DB,
    path: PathBuf,
    seed: u64,
    /// The column families this open added (a new namespace's, a new state
    /// family), until the engine's open can no longer be refused
    /// ([`Store::keep_what_the_open_made`]): a store dropped before then drops them
    /// again, so that a refused open leaves no namespace behind.
    added_families: parking_lot::Mutex<Vec<String>>,
    /// The done column families opened (configured namespaces' and others').
    done_families: Vec<String>,
    /// Testing hook: make every write fail as a failing disk would.
    fail_writes: AtomicBool,
    /// Testing hook: make every point read of a done record fail.
    fail_reads: AtomicBool,
    /// Testing hook: journal markers are left in place when their claims end, as a
    /// crash between a completion's write and the marker's clearing leaves them.
    keep_journal: AtomicBool,
    /// Testing hook: completion writes wait while this is set ...
    hold_completions: AtomicBool,
    /// ... and this counts the writes waiting.
    held_completions: std::sync::atomic::AtomicUsize,
    /// Testing hook: completion writes panic while this is set.
    panic_completions: AtomicBool,
    /// Testing hook: syncs of the write-ahead log fail while this is set.
    fail_syncs: AtomicBool,
    /// Periodic syncs of the write-ahead log that failed (no caller hears of them).
    periodic_sync_failures: AtomicU64,
    /// Fsyncs of the write-ahead log that failed since the open. Any is sticky, since
    /// a later fsync that works does not bring back pages the system dropped (see
    /// [`Store::sync_on_request`]); and a synced write during which the count moved
    /// is not acknowledged as synced (see [`Store::write_batch`]).
    wal_sync_failures: AtomicU64,
    /// Held across each fsync of the write-ahead log, so that one that fails has
    /// noted it before a later one can report its own success.
    wal_sync: parking_lot::Mutex<()>,
    /// Set when the engine is dropped: its periodic WAL sync has stopped, so writes
    /// made afterwards through handles and guards that outlive it sync themselves.
    closed: AtomicBool,
    /// Options of every point read and write, built once: each `Default` is a C++
    /// allocation through the FFI, and the claim path reads and writes per message.
    point_read: ReadOptions,
    write_nosync: WriteOptions,
    write_sync: WriteOptions,
    /// Shares fsyncs between completions under `SyncPolicy::Always` (group commit,
    /// on unless the engine's commit delay is zero; then RocksDB syncs each write
    /// group itself).
    group: Option<GroupCommit>,
    /// The latest time each configured namespace has read (ms), which its retention
    /// filter does not pass (see `FilterClock`).
    seen_ms: HashMap<String, std::sync::Arc<AtomicU64>>,
    /// Namespace settings (key, value) that differ from those stored, written by
    /// [`Store::write_settings`].
    settings_changed: parking_lot::Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
    /// The consumer state families this engine declared.
    state_families: Vec<String>,
    /// The options the database was opened with, kept for RocksDB's counters when
    /// they were asked for (`EngineBuilder::store_statistics`).
    statistics: Option<Options>,
    /// The stamp to write once the engine's open can no longer be refused
    /// ([`Store::keep_what_the_open_made`]): a refused open leaves the stamp file
    /// as it was.
    stamp_due: parking_lot::Mutex<Option<super::stamp::Stamp>>,
    /// A database this open created, removed again when the store is dropped
    /// before the engine's open can no longer be refused. After `db`, so that it
    /// drops once the database has closed (fields drop in order).
    created: UndoCreation,
    /// This process's hold on the directory, given up after `db` has closed and a
    /// refused open's new database is gone (fields drop in order).
    _dir: DirClaim,
}

/// A directory, by identity: device and inode where the platform has them (any
/// spelling of a path to it, a symbolic link or a bind mount included), its
/// canonical path elsewhere.
#[cfg(unix)]
type DirId = (u64, u64);
#[cfg(not(unix))]
type DirId = PathBuf;

#[cfg(unix)]
fn dir_id(path: &Path) -> Option<DirId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn dir_id(path: &Path) -> Option<DirId> {
    std::fs::canonicalize(path).ok()
}

/// The directories this process has open read-write. RocksDB refuses a second open
/// of a directory only by its LOCK file: across processes that holds, but within one
/// it compares path strings (`d`, `d/.` and a link to `d` differ) and then takes a
/// POSIX lock, which a process never refuses itself. A second handle would replay
/// and delete the first one's logs, and its close would drop the first one's lock.
static OPEN_DIRS: parking_lot::Mutex<Vec<DirId>> = parking_lot::Mutex::new(Vec::new());

/// One entry of [`OPEN_DIRS`], removed when dropped; and, on Unix, an exclusive
/// `flock` on the directory that other processes' opens of this build respect. The
/// lock outlives the database's own (its LOCK file, given up as the database
/// closes), so that a refused open's removal of a database it created ([`NewDatabase`])
/// runs while no other process can open the directory. Dropped, it lets go of the
/// lock first ([`unlock_dir`]), then of the entry.
struct DirClaim(Option<DirId>, Option<std::fs::File>);

impl DirClaim {
    /// Claims `path` for this process, creating it if missing (as the open would),
    /// or [`Error::AlreadyOpen`] if a store of this process has it open.
    /// A path that is not a directory (a file there, or under it) is an
    /// [`Error::Store`] saying so, before anything is opened or made. Also returns
    /// the directories it made itself (`path` and missing parents, deepest first),
    /// for a refused open to remove again.
    fn take(path: &Path) -> Result<(DirClaim, Vec<PathBuf>), Error> {
        let not_a_dir = |why: String| {
            Error::Store(StoreError::new(
                "open",
                format!("the database path {} {why}", path.display()),
            ))
        };
        let mut made = Vec::new();
        match std::fs::metadata(path) {
            Ok(m) if !m.is_dir() => return Err(not_a_dir("is not a directory".to_owned())),
            Ok(_) => {}
            Err(_) => {
                // With its parents, as RocksDB's open would make them, one at a time:
                // the directories this makes are those whose own creation succeeded.
                // A name found already there is not this open's, even where the path
                // reached it through a directory this made (`made/../kept`), or
                // another open made it meanwhile. (Failing here leaves the error to
                // that open, which reports it; but for a file in the way, which this
                // says.)
                let missing: Vec<&Path> = path
                    .ancestors()
                    .take_while(|d| {
                        !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err()
                    })
                    .collect();
                for dir in missing.iter().rev() {
                    match std::fs::create_dir(dir) {
                        Ok(()) => made.push(dir.to_path_buf()),
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => {
                        }
                        Err(e)
                            if e.kind() == std::io::ErrorKind::NotADirectory
                                || e.kind() == std::io::ErrorKind::AlreadyExists =>
                        {
                            return Err(not_a_dir(format!("cannot be made: {e}")));
                        }
                        Err(_) => break,
                    }
                }
                // Deepest first, the order they are removed in.
                made.reverse();
            }
        }
        let Some(id) = dir_id(path) else {
            return Ok((DirClaim(None, None), made));
        };
        let mut open = OPEN_DIRS.lock();
        if open.contains(&id) {
            return Err(Error::AlreadyOpen {
                path: path.to_path_buf(),
            });
        }
        let locked = lock_dir(path)?;
        open.push(id);
        // (A copy on Unix, a clone of the path elsewhere.)
        Ok((DirClaim(open.last().cloned(), locked), made))
    }
}

/// An exclusive `flock` on the directory `path`, held while the handle is open, or
/// [`Error::AlreadyOpen`] if another process holds it. Best effort otherwise: a
/// directory that cannot be opened, or a file system without `flock`, leaves the
/// refusal to RocksDB's own lock.
#[cfg(unix)]
#[allow(unsafe_code)]
fn lock_dir(path: &Path) -> Result<Option<std::fs::File>, Error> {
    use std::os::unix::io::AsRawFd;
    let Ok(dir) = std::fs::File::open(path) else {
        return Ok(None);
    };
    // SAFETY: `flock` on a descriptor this function owns; it touches no memory.
    if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(dir));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EWOULDBLOCK) => Err(Error::AlreadyOpen {
            path: path.to_path_buf(),
        }),
        _ => Ok(None),
    }
}

#[cfg(not(unix))]
fn lock_dir(_path: &Path) -> Result<Option<std::fs::File>, Error> {
    Ok(None)
}

/// Lets go of the `flock` that [`lock_dir`] took on `dir`, before its descriptor
/// closes. Closing alone would not: the lock belongs to the open file, which a child
/// this process forks meanwhile (any thread's spawn, between its fork and its exec)
/// holds a copy of, so that a reopen of the directory right after the close would be
/// refused as [`Error::AlreadyOpen`] by this process's own former lock.
#[cfg(unix)]
#[allow(unsafe_code)]
fn unlock_dir(dir: &std::fs::File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: `flock` on a descriptor `dir` owns; it touches no memory. A failure
    // leaves the lock to the descriptor's close, as before.
    unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_UN) };
}

#[cfg(not(unix))]
fn unlock_dir(_dir: &std::fs::File) {}

impl Drop for DirClaim {
    fn drop(&mut self) {
        if let Some(dir) = self.1.take() {
            unlock_dir(&dir);
        }
        if let Some(id) = self.0.take() {
            let mut open = OPEN_DIRS.lock();
            if let Some(i) = open.iter().position(|d| *d == id) {
                open.swap_remove(i);
            }
        }
    }
}

/// A database this open created, and what was there before it: until the engine's
/// open can no longer be refused ([`Store::keep_what_the_open_made`]), a store
/// dropped removes, once its database has closed ([`UndoCreation`]), every file the
/// open made, as if it had never run, so that a later open does not find a database (and its random seed)
/// that no engine ever used. Only what the open made goes: the entries the directory
/// held before (files of the user's, say) are left as they were, a `LOG` RocksDB
/// moved aside is put back, and the directories made for the database go only if
/// they are empty.
struct NewDatabase {
    path: PathBuf,
    /// The names the directory held before the database was created.
    before: BTreeSet<std::ffi::OsString>,
    /// The directories the open made (the database's and missing parents), deepest
    /// first.
    made_dirs: Vec<PathBuf>,
}

impl NewDatabase {
    /// Notes what `path` holds before a database is created there; `None` if it
    /// cannot be listed (then nothing would be removed: the open fails anyway, or
    /// nothing could tell what it made).
    fn note(path: &Path, made_dirs: Vec<PathBuf>) -> Option<NewDatabase> {
        let before = std::fs::read_dir(path)
            .ok()?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()
            .ok()?;
        Some(NewDatabase {
            path: path.to_path_buf(),
            before,
            made_dirs,
        })
    }

    /// Removes what the open made, best effort (a file that cannot be removed is
    /// logged and left).
    fn undo(&self) {
        let Ok(listed) = std::fs::read_dir(&self.path) else {
            return;
        };
        let mut made: Vec<std::ffi::OsString> = listed
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| !self.before.contains(n))
            .collect();
        // CURRENT first: without it no later open sees a database here, even one
        // that looks while the other files go (it finds files and refuses instead).
        made.sort_by_key(|n| n != "CURRENT");
        // A LOG that was there before was moved aside by RocksDB (to LOG.old.<time>),
        // and the LOG there now is the open's own: the old one goes back.
        let log_moved: Vec<&std::ffi::OsString> = made
            .iter()
            .filter(|n| n.to_string_lossy().starts_with("LOG.old."))
            .collect();
        let put_back = match log_moved[..] {
            [moved] if self.before.contains(std::ffi::OsStr::new("LOG")) => Some(moved.clone()),
            _ => None,
        };
        for name in &made {
            if Some(name) == put_back.as_ref() {
                continue;
            }
            let file = self.path.join(name);
            // Only files: RocksDB makes no directory here, and one made meanwhile
            // is not the open's to remove.
            let is_dir = std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_dir());
            if is_dir {
                continue;
            }
            if let Err(e) = std::fs::remove_file(&file) {
                tracing::warn!(
                    file = %file.display(),
                    error = %e,
                    "a refused open could not remove a file of the database it created"
                );
            }
        }
        if let Some(moved) = put_back {
            let log = self.path.join("LOG");
            if let Err(e) = std::fs::rename(self.path.join(&moved), &log) {
                tracing::warn!(
                    file = %log.display(),
                    error = %e,
                    "a refused open could not put back the LOG it moved aside"
                );
            }
        }
        for dir in &self.made_dirs {
            // Empty, or it is not only the open's: then it stays.
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}

/// The [`NewDatabase`] a store removes when it drops (once its database has closed),
/// if its open is refused.
struct UndoCreation(parking_lot::Mutex<Option<NewDatabase>>);

impl Drop for UndoCreation {
    fn drop(&mut self) {
        if let Some(new) = self.0.get_mut().take() {
            #[cfg(test)]
            run_test_hook(&BEFORE_UNDO);
            new.undo();
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn store_err(op: &'static str, e: rocksdb::Error) -> Error {
    Error::Store(StoreError::new(op, e.into_string()))
}

/// The retention filter's clock: the engine's, read on RocksDB's compaction threads,
/// where a panic would abort the process. A reading that panics keeps the record
/// instead, and the clock is then left alone for a second (its records kept), so that
/// a failing clock costs a compaction one panic a second, not one a record.
///
/// A reading is never taken past the latest time its namespace has read (`seen`,
/// see [`DurableNs::note_time`]): a namespace's time never goes back, so a record
/// the filter drops is expired for the namespace from then on, even if the clock
/// ran ahead of the namespace while it was idle and then stepped back.
struct FilterClock {
    clock: std::sync::Arc<dyn Clock>,
    seen: std::sync::Arc<AtomicU64>,
    failing: AtomicBool,
    failed_at: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl FilterClock {
    fn new(clock: std::sync::Arc<dyn Clock>, seen: std::sync::Arc<AtomicU64>) -> FilterClock {
        FilterClock {
            clock,
            seen,
            failing: AtomicBool::new(false),
            failed_at: parking_lot::Mutex::new(None),
        }
    }

    /// Now, but no later than the namespace has seen; `None` while the clock fails
    /// or before the namespace has read it.
    fn now_ms(&self) -> Option<u64> {
        const PAUSE: std::time::Duration = std::time::Duration::from_secs(1);
        if self.failing.load(Ordering::Relaxed)
            && self.failed_at.lock().is_some_and(|t| t.elapsed() < PAUSE)
        {
            return None;
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::clock::read_capped(&*self.clock)
        })) {
            Ok(ms) => {
                self.failing.store(false, Ordering::Relaxed);
                match self.seen.load(Ordering::Acquire) {
                    0 => None,
                    seen => Some(ms.min(seen)),
                }
            }
            Err(_) => {
                tracing::warn!("the clock panicked in the retention filter; records are kept");
                *self.failed_at.lock() = Some(std::time::Instant::now());
                self.failing.store(true, Ordering::Relaxed);
                None
            }
        }
    }
}

impl Store {
    /// Opens (creating if missing) the database at `path` for the given namespaces
    /// (name and settings, stored if they changed) and consumer state families.
    /// `seed` is used only when the database is new; an existing database keeps its
    /// own.
    ///
    /// The column families the configuration adds are made last, so that no
    /// refusal here leaves one in an existing database; a refusal here of an open
    /// that created the database removes it (once it has closed). Until the
    /// engine's open calls [`Store::keep_what_the_open_made`], dropping the store
    /// undoes the same: the added families are dropped, a created database is
    /// removed, and the stamp is not written.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        path: &Path,
        namespaces: &[(String, NsSettings)],
        state_families: &[String],
        clock: std::sync::Arc<dyn Clock>,
        seed: u64,
        seed_fixed: bool,
        commit_delay: Option<std::time::Duration>,
        statistics: bool,
    ) -> Result<(Store, OpenReport), Error> {
        let (dir, made_dirs) = DirClaim::take(path)?;
        super::check_rocksdb_files(path)?;
        let mut report = OpenReport::default();
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        // The open adds no column family: the ones this configuration adds are made
        // last, once nothing in this function can refuse the open (below).
        db_opts.create_missing_column_families(false);
        db_opts.set_max_background_jobs(2);
        // The done column families use a hash memtable (below), which takes its writes
        // one at a time: RocksDB's write group leader inserts for the whole group.
        db_opts.set_allow_concurrent_memtable_write(false);
        if statistics {
            db_opts.enable_statistics();
            db_opts.set_statistics_level(rocksdb::statistics::StatsLevel::ExceptHistogramOrTimers);
        }

        let existing: BTreeSet<String> = match DB::list_cf(&db_opts, path) {
            Ok(cfs) => cfs.into_iter().collect(),
            // No database to list: a new one is made, unless the directory holds
            // data files. Then the database lost its CURRENT file (a partial copy or
            // restore), and RocksDB would start a new one over them and delete them.
            Err(e) if holds_data_files(path) => {
                return Err(Error::Store(StoreError::new(
                    "open",
                    format!(
                        "{} holds database files but no readable database ({}); \
                         nothing was opened or changed",
                        path.display(),
                        e.into_string()
                    ),
                )))
            }
            Err(_) => BTreeSet::new(),
        };
        report.created = existing.is_empty();
        // A journal left beside the database is checked before anything changes: one
        // of another version or namespace now, one of another database (its seed) as
        // soon as the seed is known, always before the open could add a column
        // family or write settings.
        let check_journals = |seed: Option<u64>| -> Result<(), Error> {
            for (name, _) in namespaces {
                super::journal::check_header(path, name, seed)?;
            }
            Ok(())
        };
        // (A new database takes `seed`: a journal of any other is foreign.)
        check_journals(report.created.then_some(seed))?;
        if !report.created {
            let ours = existing.iter().all(|c| c == "default" || c.contains(':'));
            if !ours {
                return Err(Error::IncompatibleFormat {
                    path: path.to_path_buf(),
                    found: None,
                    supported: FORMAT_VERSION,
                });
            }
        }

        // An existing database is checked before the read-write open below could
        // write a manifest, add column families or run this build's compaction
        // filter over records it cannot read: another version, another seed, a
        // foreign journal or a database that is not ours is refused with nothing
        // written. Its stamp says which version and seed it is; without one, a
        // read-only look at RocksDB's own metadata does (it takes no lock and
        // writes nothing, but replays the write-ahead log). A database without
        // our metadata is adopted only if it holds nothing at all (one created by
        // an open that crashed before writing the metadata).
        let mut adopt_empty = false;
        // A database of this version whose seed is `stored`: a fixed seed must be
        // the same, and the journals must be of that seed.
        let check_seed = |stored: u64| -> Result<(), Error> {
            if seed_fixed && stored != seed {
                return Err(fixed_seed_differs());
            }
            check_journals(Some(stored))
        };
        let stamp = if report.created {
            None
        } else {
            super::stamp::read(path)
        };
        // A stamp that would refuse the database is not taken at its word: the
        // read-only look below decides (a stamp can be stale, beside files restored
        // without their IDENTITY, say), so a refusal costs time and never refuses a
        // good database for good.
        let believed = stamp.is_some_and(|st| {
            check_format(path, &st.format.to_le_bytes()).is_ok() && check_seed(st.seed).is_ok()
        });
        if !believed && !report.created {
            let foreign = || Error::IncompatibleFormat {
                path: path.to_path_buf(),
                found: None,
                supported: FORMAT_VERSION,
            };
            let db = DB::open_for_read_only(&Options::default(), path, false)
                .map_err(|e| store_err("open", e))?;
            let format = db.get(FORMAT_KEY).map_err(|e| store_err("open", e))?;
            let stored_seed = db.get(SEED_KEY).map_err(|e| store_err("open", e))?;
            match (format, stored_seed) {
                (Some(f), Some(s)) => {
                    check_format(path, &f)?;
                    check_seed(seed_of(path, &s)?)?;
                }
                (Some(f), None) => {
                    check_format(path, &f)?;
                    return Err(foreign());
                }
                (None, _) => {
                    drop(db);
                    let names: Vec<&String> = existing.iter().filter(|c| *c != "default").collect();
                    let all = DB::open_cf_for_read_only(&Options::default(), path, names, false)
                        .map_err(|e| store_err("open", e))?;
                    if !holds_nothing(&all, &existing)? {
                        return Err(foreign());
                    }
                    adopt_empty = true;
                    // The seed it will take: a journal of any other is foreign.
                    check_journals(Some(seed))?;
                }
            }
        }

        let mut wanted: BTreeSet<String> = BTreeSet::new();
        for (name, _) in namespaces {
            wanted.insert(done_cf(name));
            wanted.insert(claims_cf(name));
            wanted.insert(dlq::cf_name(name));
        }
        for f in state_families {
            wanted.insert(state_cf(f));
        }
        for cf in &existing {
            if let Some(ns) = cf.strip_prefix("done:") {
                if !namespaces.iter().any(|(n, _)| n == ns) {
                    report.unconfigured.push(ns.to_owned());
                }
            }
        }

        let mut descriptors = Vec::new();
        // The families this open adds, with their options, made once nothing else
        // here can refuse the open.
        let mut to_add = Vec::new();
        let mut seen_ms = HashMap::new();
        for name in existing.union(&wanted) {
            if name == "default" {
                continue;
            }
            let mut cf_opts = Options::default();
            if let Some(ns) = name.strip_prefix("done:") {
                done_cf_options(&mut cf_opts);
                // No compaction until the engine has set up its prefilters
                // (`Store::start_compactions`): after a crash, the files the log's
                // replay wrote would otherwise be compacted at once, taking the cores
                // the prefilter's rebuild scans on (W5 after a SIGKILL, BENCHMARKS.md).
                cf_opts.set_disable_auto_compactions(true);
                if namespaces.iter().any(|(n, _)| n == ns) {
                    let seen = std::sync::Arc::new(AtomicU64::new(0));
                    seen_ms.insert(ns.to_owned(), seen.clone());
                    let clock = FilterClock::new(clock.clone(), seen);
                    cf_opts.set_compaction_filter("idem-retention", move |_level, _key, value| {
                        match Record::decode(value) {
                            Ok(r) => match clock.now_ms() {
                                Some(now) if r.expires_ms <= now => Decision::Remove,
                                _ => Decision::Keep,
                            },
                            // Corrupt records are kept: they are reported on read, never
                            // dropped silently.
                            Err(_) => Decision::Keep,
                        }
                    });
                }
            }
            if existing.contains(name) {
                descriptors.push(ColumnFamilyDescriptor::new(name.clone(), cf_opts));
            } else {
                to_add.push((name.clone(), cf_opts));
            }
        }

        let done_families: Vec<String> = existing
            .union(&wanted)
            .filter(|n| n.starts_with("done:"))
            .cloned()
            .collect();
        // A bound on the write-ahead log an open after a crash replays. RocksDB keeps a
        // log file until every column family with writes in it has flushed them, and
        // the claim markers' family rarely fills its memtable: without the bound, a
        // crash after a long run left every log since the start to replay (W5: 32
        // files, 450 MB, 1.4 s of the open). Past it, RocksDB flushes the families
        // that hold the oldest log. A done memtable's worth for each namespace, so
        // that namespaces writing at once do not flush each other's memtables early.
        db_opts.set_max_total_wal_size(
            MAX_TOTAL_WAL_BYTES.saturating_mul(done_families.len().max(1) as u64),
        );
        // What the directory held before a new database is made in it, so that an
        // open refused from here on removes what it made. Declared before `db`, so
        // that on a refusal here it drops after the database has closed; set only
        // once the database is open (a refusal of the open itself is undone below,
        // but for another process holding the directory, which must lose nothing).
        let noted = if report.created {
            NewDatabase::note(path, made_dirs)
        } else {
            None
        };
        let created;
        #[cfg(test)]
        let descriptors = {
            let mut descriptors = descriptors;
            if FAIL_NEXT_ROCKSDB_OPEN.with(|f| f.replace(false)) {
                // A family the database does not hold: RocksDB's own open refuses it
                // once it has made its files.
                descriptors.push(ColumnFamilyDescriptor::new(
                    "idem-test:missing",
                    Options::default(),
                ));
            }
            descriptors
        };
        let mut db = match DB::open_cf_descriptors(&db_opts, path, descriptors) {
            Ok(db) => db,
            Err(e) => {
                let msg = e.into_string();
                if lock_held_elsewhere(&msg) {
                    return Err(Error::AlreadyOpen {
                        path: path.to_path_buf(),
                    });
                }
                // RocksDB's own open failed (it could not write a file, say), and may
                // have left what it made (its LOCK and LOG, a new database's first
                // files) in the directory: those go, as a refused open's would. Only
                // while this process holds the directory's `flock`, so that no other
                // open of this build can have made anything there meanwhile; and not
                // when another holds RocksDB's lock (above), whose files they are.
                if let (Some(new), Some(_)) = (noted, &dir.1) {
                    new.undo();
                }
                return Err(Error::Store(StoreError::new("open", msg)));
            }
        };
        created = UndoCreation(parking_lot::Mutex::new(noted));

        let format = db.get(FORMAT_KEY).map_err(|e| store_err("open", e))?;
        let stored_seed = db.get(SEED_KEY).map_err(|e| store_err("open", e))?;
        let seed = match (format, stored_seed) {
            // Also adopted: our column families with nothing in any of them, left by
            // an open that crashed after creating them and before writing the
            // metadata.
            (None, None) if report.created || adopt_empty => {
                let mut batch = WriteBatch::default();
                batch.put(FORMAT_KEY, FORMAT_VERSION.to_le_bytes());
                batch.put(SEED_KEY, seed.to_le_bytes());
                let mut wo = WriteOptions::default();
                wo.set_sync(true);
                #[cfg(test)]
                if FAIL_NEXT_METADATA_WRITE.with(|f| f.replace(false)) {
                    return Err(injected_open_failure("open"));
                }
                db.write_opt(batch, &wo).map_err(|e| store_err("open", e))?;
                seed
            }
            (Some(f), Some(s)) => {
                check_format(path, &f)?;
                let stored = seed_of(path, &s)?;
                check_seed(stored)?;
                stored
            }
            _ => {
                return Err(Error::IncompatibleFormat {
                    path: path.to_path_buf(),
                    found: None,
                    supported: FORMAT_VERSION,
                })
            }
        };
        // (A new or adopted database's journals were checked against `seed` above.)
        // The stamp, if missing or stale, is written once the engine's open can no
        // longer be refused ([`Store::keep_what_the_open_made`]).
        let ours = super::stamp::identity(path).map(|identity| super::stamp::Stamp {
            format: FORMAT_VERSION,
            seed,
            identity,
        });
        let stamp_due = ours.filter(|o| stamp != Some(*o));
        // Each namespace's settings, to be written only when they changed (an
        // unchanged open writes nothing: a saved prefilter is good only at an
        // unchanged sequence number), and only once nothing else can refuse the open
        // ([`Store::write_settings`]): a refused open must leave the settings the
        // dead-letter tools read as they were.
        let mut settings_changed = Vec::new();
        for (name, settings) in namespaces {
            let key = settings_key(name);
            let bytes = settings.encode();
            if db.get(&key).map_err(|e| store_err("open", e))?.as_deref() != Some(&bytes[..]) {
                settings_changed.push((key, bytes.to_vec()));
            }
        }
        // Last, the column families this configuration adds (a new namespace's, a
        // new state family): nothing above can refuse the open with them made. Made
        // here rather than by RocksDB's open, so that a refusal above (another seed
        // or version in the metadata than the stamp said, a failed read) leaves an
        // existing database without them; one that cannot be made drops those made
        // before it. Later refusals, the engine's, drop them in `Store`'s drop.
        let mut added_families: Vec<String> = Vec::with_capacity(to_add.len());
        for (name, cf_opts) in &to_add {
            if let Err(e) = db.create_cf(name, cf_opts) {
                for made in added_families.iter().rev() {
                    if let Err(e) = db.drop_cf(made) {
                        tracing::warn!(
                            family = %made,
                            error = %e,
                            "a refused open could not remove the column family it added"
                        );
                    }
                }
                return Err(store_err("open", e));
            }
            added_families.push(name.clone());
        }
        Ok((
            Store {
                db,
                path: path.to_path_buf(),
                seed,
                added_families: parking_lot::Mutex::new(added_families),
                done_families,
                fail_writes: AtomicBool::new(false),
                group: match commit_delay {
                    None => Some(GroupCommit::new(Delay::Adaptive)),
                    Some(d) if d.is_zero() => None,
                    Some(d) => Some(GroupCommit::new(Delay::Fixed(d))),
                },
                hold_completions: AtomicBool::new(false),
                panic_completions: AtomicBool::new(false),
                fail_syncs: AtomicBool::new(false),
                periodic_sync_failures: AtomicU64::new(0),
                wal_sync_failures: AtomicU64::new(0),
                wal_sync: parking_lot::Mutex::new(()),
                closed: AtomicBool::new(false),
                fail_reads: AtomicBool::new(false),
                keep_journal: AtomicBool::new(false),
                held_completions: std::sync::atomic::AtomicUsize::new(0),
                point_read: ReadOptions::default(),
                write_nosync: WriteOptions::default(),
                write_sync: {
                    let mut wo = WriteOptions::default();
                    wo.set_sync(true);
                    wo
                },
                settings_changed: parking_lot::Mutex::new(settings_changed),
                seen_ms,
                state_families: state_families.to_vec(),
                statistics: statistics.then_some(db_opts),
                stamp_due: parking_lot::Mutex::new(stamp_due),
                created,
                _dir: dir,
            },
            report,
        ))
    }

    /// Keeps what this open made, the engine's open being past every step that
    /// could refuse it: the database, if it created it, and the column families it
    /// added; and writes the database's stamp if it was missing or stale (without
    /// it the next open is checked the slow way, so a failure to write it costs
    /// time, not safety). Until then a store dropped removes them again.
    pub(crate) fn keep_what_the_open_made(&self) {
        self.added_families.lock().clear();
        *self.created.0.lock() = None;
        if let Some(ours) = self.stamp_due.lock().take() {
            if let Err(e) = super::stamp::write(&self.path, ours) {
                tracing::warn!(error = %e, "could not write the database's stamp");
            }
        }
    }

    /// Stores the configured namespaces' settings that changed (TTL, lease,
    /// retention, longest key: what [`crate::stored_config`] reads), once the
    /// engine's open has passed every check that could refuse it.
    pub(crate) fn write_settings(&self) -> Result<(), Error> {
        let mut changed = self.settings_changed.lock();
        if changed.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        for (key, bytes) in changed.iter() {
            batch.put(key, bytes);
        }
        #[cfg(test)]
        if FAIL_NEXT_SETTINGS_WRITE.with(|f| f.replace(false)) {
            return Err(injected_open_failure("open"));
        }
        // Synced: the open's other writes are synced before this one, and the
        // dead-letter tools may read the settings before anything else syncs.
        self.db
            .write_opt(batch, &self.write_sync)
            .map_err(|e| store_err("open", e))?;
        changed.clear();
        Ok(())
    }

    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// The sequence number of the last write to the database: any write moves it.
    pub(crate) fn latest_sequence(&self) -> u64 {
        self.db.latest_sequence_number()
    }

    /// Where a namespace's prefilter is saved at a clean shutdown.
    pub(crate) fn prefilter_file(&self, ns: &str) -> PathBuf {
        let hex: String = ns.bytes().map(|b| format!("{b:02x}")).collect();
        self.path.join(format!("idem-prefilter-{hex}.bin"))
    }

    pub(crate) fn set_fail_writes(&self, fail: bool) {
        self.fail_writes.store(fail, Ordering::SeqCst);
    }

    pub(crate) fn set_keep_journal(&self, keep: bool) {
        self.keep_journal.store(keep, Ordering::SeqCst);
    }

    pub(crate) fn set_fail_reads(&self, fail: bool) {
        self.fail_reads.store(fail, Ordering::SeqCst);
    }

    /// Testing hook: writes bytes that do not decode as the record of `fp` in
    /// namespace `ns`: its done record, or with `claim` its claim marker.
    pub(crate) fn corrupt_record(&self, ns: &str, fp: u128, claim: bool) -> Result<(), Error> {
        let family = if claim { claims_cf(ns) } else { done_cf(ns) };
        self.db
            .put_cf(self.cf(&family)?, fp_key(fp), b"garbage")
            .map_err(|e| store_err("write", e))
    }

    pub(crate) fn set_hold_completions(&self, hold: bool) {
        self.hold_completions.store(hold, Ordering::SeqCst);
    }

    pub(crate) fn set_fail_syncs(&self, fail: bool) {
        self.fail_syncs.store(fail, Ordering::SeqCst);
    }

    pub(crate) fn set_panic_completions(&self, panic: bool) {
        self.panic_completions.store(panic, Ordering::SeqCst);
    }

    pub(crate) fn held_completions(&self) -> usize {
        self.held_completions.load(Ordering::SeqCst)
    }

    /// Testing hook: waits while completions are held.
    fn wait_if_held(&self) {
        if self.panic_completions.load(Ordering::Relaxed) {
            panic!("a completion write panicked (testing hook)");
        }
        if self.hold_completions.load(Ordering::Relaxed) {
            self.held_completions.fetch_add(1, Ordering::SeqCst);
            while self.hold_completions.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            self.held_completions.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily, Error> {
        self.db.cf_handle(name).ok_or_else(|| {
            Error::Store(StoreError::new(
                "column family",
                format!("{name} is missing"),
            ))
        })
    }

    /// The completed record of `fp` in namespace `ns`, if any (expired or not: the
    /// caller judges retention against its clock).
    pub(crate) fn get_done(
        &self,
        ns: &str,
        fams: &Families,
        fp: u128,
    ) -> Result<Option<Record>, Error> {
        self.get_record(ns, &fams.done, fp)
    }

    /// Reads `fp`'s claim marker in RocksDB (`None` if it has none there).
    pub(crate) fn get_claim(
        &self,
        ns: &str,
        fams: &Families,
        fp: u128,
    ) -> Result<Option<Record>, Error> {
        self.get_record(ns, &fams.claims, fp)
    }

    fn get_record(&self, ns: &str, family: &str, fp: u128) -> Result<Option<Record>, Error> {
        injected(&self.fail_reads, "read", "reads")?;
        let cf = self.cf(family)?;
        let Some(bytes) = self
            .db
            .get_pinned_cf_opt(cf, fp_key(fp), &self.point_read)
            .map_err(|e| store_err("read", e))?
        else {
            return Ok(None);
        };
        Record::decode(&bytes)
            .map(Some)
            .map_err(|reason| Error::CorruptRecord {
                namespace: ns.to_owned(),
                fingerprint: fp,
                reason: reason.to_string(),
            })
    }

    fn check_writable(&self) -> Result<(), Error> {
        injected(&self.fail_writes, "write", "writes")
    }

    /// Writes claim markers (no fsync: they only serve orphan reporting).
    pub(crate) fn put_claims(
        &self,
        fams: &Families,
        claims: &[(u128, Record)],
    ) -> Result<(), Error> {
        self.check_writable()?;
        let cf = self.cf(&fams.claims)?;
        let mut batch = WriteBatch::default();
        for (fp, rec) in claims {
            batch.put_cf(cf, fp_key(*fp), rec.encode());
        }
        self.db
            .write_opt(batch, &self.write_nosync)
            .map_err(|e| store_err("write claim", e))
    }

    /// Deletes claim markers (released claims).
    pub(crate) fn delete_claims(&self, fams: &Families, fps: &[u128]) -> Result<(), Error> {
        self.check_writable()?;
        let cf = self.cf(&fams.claims)?;
        let mut batch = WriteBatch::default();
        for fp in fps {
            batch.delete_cf(cf, fp_key(*fp));
        }
        self.db
            .write_opt(batch, &self.write_nosync)
            .map_err(|e| store_err("delete claim", e))
    }

    /// Stores completions atomically: each done record, the removal of its claim
    /// marker (unless `unwritten_marker[i]` says it never reached the store), and
    /// the consumer's state changes, in one write. `Ok(Some(e))`: the write was
    /// applied (every reader sees it) but the group commit's fsync after it failed
    /// with `e`.
    pub(crate) fn write_completions(
        &self,
        ns: &str,
        fams: &Families,
        done: &[(u128, Record)],
        unwritten_marker: &[bool],
        state: &[(String, StateOp)],
        sync: bool,
    ) -> Result<Option<Error>, Error> {
        self.wait_if_held();
        self.check_writable()?;
        let done_h = self.cf(&fams.done)?;
        let claims_h = self.cf(&fams.claims)?;
        let mut batch = WriteBatch::default();
        for (i, (fp, rec)) in done.iter().enumerate() {
            batch.put_cf(done_h, fp_key(*fp), rec.encode());
            if !unwritten_marker.get(i).copied().unwrap_or(false) {
                batch.delete_cf(claims_h, fp_key(*fp));
            }
        }
        for (family, op) in state {
            match op {
                StateOp::Put(k, v) => batch.put_cf(self.cf(&state_cf(family))?, k, v),
                StateOp::Delete(k) => batch.delete_cf(self.cf(&state_cf(family))?, k),
                StateOp::DeadLetter(k, v) => batch.put_cf(self.cf(&dlq::cf_name(ns))?, k, v),
            }
        }
        self.write_batch(batch, sync, "write completion")
    }

    /// Writes `batch`, fsynced before it returns if `sync` (through the group commit
    /// when it is on, so that concurrent writers share the fsync). `Ok(Some(e))`:
    /// applied, but the group commit's fsync failed with `e` (RocksDB's own synced
    /// write applies nothing when its fsync fails: an error), or another fsync of the
    /// log failed after the write began ([`Store::unsynced_since`]).
    fn write_batch(
        &self,
        batch: WriteBatch,
        sync: bool,
        what: &'static str,
    ) -> Result<Option<Error>, Error> {
        let since = self.sync_failures();
        let own_sync = self.group.is_none() && sync;
        let written = if own_sync {
            // The testing hook fails RocksDB's own sync as RocksDB reports one: the
            // write is refused, its batch not applied to the memtables.
            self.check_syncable().and_then(|()| {
                self.db
                    .write_opt(batch, &self.write_sync)
                    .map_err(|e| store_err(what, e))
            })
        } else {
            self.db
                .write_opt(batch, &self.write_nosync)
                .map_err(|e| store_err(what, e))
        };
        #[cfg(test)]
        if written.is_ok() {
            run_test_hook(&AFTER_WRITE);
        }
        if let Err(e) = written {
            if own_sync {
                // Its fsync may have failed over writes of the log made before it
                // (other namespaces', unsynced), as a group's would: every later
                // sync asked for says so ([`Store::sync_on_request`]).
                self.note_sync_failure();
            }
            return Err(e);
        }
        Ok(match (&self.group, sync) {
            (Some(group), true) => group.commit(|| self.sync_wal()).err(),
            _ => None,
        }
        .or_else(|| sync.then(|| self.unsynced_since(since)).flatten()))
    }

    /// Fsyncs of the write-ahead log that failed since the open.
    pub(crate) fn sync_failures(&self) -> u64 {
        self.wal_sync_failures.load(Ordering::SeqCst)
    }

    /// Notes a failed fsync of the write-ahead log.
    pub(crate) fn note_sync_failure(&self) {
        self.wal_sync_failures.fetch_add(1, Ordering::SeqCst);
    }

    /// After a synced write that began when [`Store::sync_failures`] was `since`, and
    /// whose own fsync worked: an error if an fsync of the log failed meanwhile (the
    /// `Periodic` thread's, a sync asked for, a group's that began before the write's
    /// ticket). That fsync may have covered the write and the system dropped its
    /// pages, which the write's own fsync, finding nothing to write, does not bring
    /// back.
    pub(crate) fn unsynced_since(&self, since: u64) -> Option<Error> {
        (self.sync_failures() != since).then(|| {
            Error::Store(StoreError::new(
                "sync",
                "an fsync of the write-ahead log failed after this write: it may not be \
                 on the disk, though a later fsync worked"
                    .to_owned(),
            ))
        })
    }

    /// Fsyncs of the write-ahead log shared by grouped completions (zero with group
    /// commit off).
    pub(crate) fn group_syncs(&self) -> u64 {
        self.group.as_ref().map_or(0, |g| g.syncs())
    }

    /// The write-ahead log's fsyncs by RocksDB's count (0 without statistics).
    pub(crate) fn wal_syncs(&self) -> u64 {
        self.statistics.as_ref().map_or(0, |o| {
            o.get_ticker_count(rocksdb::statistics::Ticker::WalFileSynced)
        })
    }

    /// Deletes a key's records (forget), not synced: see [`Store::sync_written`].
    pub(crate) fn forget(&self, fams: &Families, fp: u128) -> Result<(), Error> {
        self.check_writable()?;
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(&fams.done)?, fp_key(fp));
        batch.delete_cf(self.cf(&fams.claims)?, fp_key(fp));
        // Not synced here: nothing to fail after the write.
        self.write_batch(batch, false, "forget").map(|_| ())
    }

    /// Fsyncs what this thread has written (through the group commit when it is on,
    /// sharing the fsync with concurrent writers), as a synced write would have;
    /// `since` is what [`Store::sync_failures`] said before the write, and an fsync
    /// of the log that failed after it fails this too.
    pub(crate) fn sync_written(&self, since: u64) -> Result<(), Error> {
        match &self.group {
            Some(group) => group.commit(|| self.sync_wal()),
            None => self.sync_wal(),
        }?;
        self.unsynced_since(since).map_or(Ok(()), Err)
    }

    /// Every claim marker of a namespace: the claims that were never completed or
    /// released. Corrupt markers are returned as errors beside the good ones.
    pub(crate) fn scan_claims(&self, ns: &str) -> Result<Vec<ScannedClaim>, Error> {
        let cf = self.cf(&claims_cf(ns))?;
        let mut out = Vec::new();
        for item in self.db.iterator_cf(cf, rocksdb::IteratorMode::Start) {
            let (k, v) = item.map_err(|e| store_err("scan claims", e))?;
            let Ok(key) = <[u8; 16]>::try_from(&k[..]) else {
                continue;
            };
            let fp = u128::from_be_bytes(key);
            out.push((fp, Record::decode(&v).map_err(|e| e.to_string())));
        }
        Ok(out)
    }

    /// Calls `each` with the fingerprint and the state and expiry of every done
    /// record of a namespace, or the reason the record does not decode (whole, as a
    /// read would decode it). Used to rebuild the prefilter at open; reads bypass the
    /// block cache.
    pub(crate) fn scan_done(
        &self,
        ns: &str,
        part: (usize, usize),
        mut each: impl FnMut(u128, Result<(super::codec::RecordState, u64), String>),
    ) -> Result<u64, Error> {
        let cf = self.cf(&done_cf(ns))?;
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        ro.set_readahead_size(4 << 20);
        // The whole column family, in key order, whatever its memtable.
        ro.set_total_order_seek(true);
        // Part `i` of `n`: the fingerprints whose first byte falls in its share.
        let (i, n) = part;
        let bound = |i: usize| (i * 256 / n) as u8;
        if i + 1 < n {
            ro.set_iterate_upper_bound(vec![bound(i + 1)]);
        }
        let mut it = self.db.raw_iterator_cf_opt(cf, ro);
        it.seek([bound(i)]);
        let mut n = 0;
        while it.valid() {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                // Keys that are not 16 bytes are not ours; reads never find them.
                if let Ok(key) = <[u8; 16]>::try_from(k) {
                    each(
                        u128::from_be_bytes(key),
                        Record::check(v).map_err(|e| e.to_string()),
                    );
                    n += 1;
                }
            }
            it.next();
        }
        it.status().map_err(|e| store_err("scan done", e))?;
        Ok(n)
    }

    /// Lets RocksDB compact the done column families, which `Store::open` leaves
    /// without compaction so that the prefilters' set-up at open has the cores.
    pub(crate) fn start_compactions(&self) -> Result<(), Error> {
        for name in &self.done_families {
            let cf = self.cf(name)?;
            self.db
                .set_options_cf(cf, &[("disable_auto_compactions", "false")])
                .map_err(|e| store_err("start compactions", e))?;
        }
        Ok(())
    }

    /// A consumer state value.
    pub(crate) fn read_state(&self, family: &str, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let cf = self
            .has_state_family(family)
            .then(|| self.db.cf_handle(&state_cf(family)))
            .flatten()
            .ok_or_else(|| Error::UnknownStateFamily(family.to_owned()))?;
        if key.len() > crate::MAX_STATE_LEN {
            return Ok(None);
        }
        self.db
            .get_cf(cf, key)
            .map_err(|e| store_err("read state", e))
    }

    /// Whether `family` was declared by this engine (a family only an earlier run
    /// declared is still opened, and kept, but not written or read).
    pub(crate) fn has_state_family(&self, family: &str) -> bool {
        self.state_families.iter().any(|f| f == family)
            && self.db.cf_handle(&state_cf(family)).is_some()
    }

    /// Flushes and compacts every done column family now, so that the retention
    /// filter runs over everything (normally RocksDB decides when).
    pub(crate) fn compact(&self) -> Result<(), Error> {
        for name in
            DB::list_cf(&Options::default(), &self.path).map_err(|e| store_err("list", e))?
        {
            if name.starts_with("done:") {
                let cf = self.cf(&name)?;
                self.db.flush_cf(cf).map_err(|e| store_err("flush", e))?;
                // Every file of the last level is rewritten through the retention
                // filter: with RocksDB's default (`IfHaveCompactionFilter`), and with
                // `ForceOptimized` too, the durable model check found an expired
                // record that this call left in place (ARCHITECTURE.md).
                let mut opts = rocksdb::CompactOptions::default();
                opts.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
                // RocksDB's C interface drops the compaction's status; a failed
                // background job is counted, and the count is raised before the
                // compaction it failed hands back.
                let failed_before = self.background_errors();
                self.db
                    .compact_range_cf_opt(cf, None::<&[u8]>, None::<&[u8]>, &opts);
                if self.background_errors() > failed_before {
                    return Err(Error::Store(StoreError::new(
                        "compact",
                        format!(
                            "a background job of RocksDB (a flush or a compaction) failed \
                             while {name} was compacted: the LOG file in the database \
                             directory says why"
                        ),
                    )));
                }
            }
        }
        Ok(())
    }

    /// How many of RocksDB's background jobs (flushes, compactions) failed since the
    /// open (its `rocksdb.background-errors` count; 0 if it cannot be read).
    fn background_errors(&self) -> u64 {
        self.db
            .property_int_value("rocksdb.background-errors")
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// Flushes every column family's memtable to SST files, so that the next open
    /// has no write-ahead log to replay (a clean shutdown). Every family is tried;
    /// each failure is logged, and the first returned. Nothing is lost by one: the
    /// log still holds what the memtable held.
    pub(crate) fn flush_memtables(&self) -> Result<(), Error> {
        let names = DB::list_cf(&Options::default(), &self.path).map_err(|e| {
            tracing::warn!(error = %e, "could not list the column families to flush at shutdown");
            store_err("flush", e)
        })?;
        let mut first = Ok(());
        for name in names {
            if let Some(cf) = self.db.cf_handle(&name) {
                if let Err(e) = self.db.flush_cf(cf) {
                    tracing::warn!(column_family = %name, error = %e, "flush at shutdown failed");
                    first = first.and(Err(store_err("flush", e)));
                }
            }
        }
        first
    }

    /// Marks the store's engine dropped (see [`Store::closed`]).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether the engine was dropped: no periodic sync of the write-ahead log runs.
    pub(crate) fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether a write under `policy` is fsynced before it returns: always under
    /// `Always`, and under `Periodic` once the engine (and its sync thread) is gone.
    pub(crate) fn syncs(&self, policy: SyncPolicy) -> bool {
        match policy {
            SyncPolicy::Always => true,
            SyncPolicy::Periodic(_) => self.closed(),
            _ => false,
        }
    }

    /// After a write under `policy` that was made with `synced` (as [`Store::syncs`]
    /// said): under `Periodic`, a write made without a sync while the engine was being
    /// dropped is synced now. The engine's last flush may have run before the write
    /// landed, and no periodic sync follows it. `since` is what
    /// [`Store::sync_failures`] said before the write: an fsync of the log that failed
    /// after it fails this too, as it does a synced write ([`Store::unsynced_since`]).
    pub(crate) fn sync_if_closed_since(
        &self,
        policy: SyncPolicy,
        synced: bool,
        since: u64,
    ) -> Result<(), Error> {
        if !synced && matches!(policy, SyncPolicy::Periodic(_)) && self.closed() {
            self.sync_wal()?;
            return self.unsynced_since(since).map_or(Ok(()), Err);
        }
        Ok(())
    }

    /// Fails as a sync would under the testing hook (`Engine::debug_fail_syncs`).
    pub(crate) fn check_syncable(&self) -> Result<(), Error> {
        injected(&self.fail_syncs, "sync", "to sync")
    }

    /// Forces the write-ahead log to disk. A failure is noted for good (see
    /// [`Store::sync_on_request`]).
    pub(crate) fn sync_wal(&self) -> Result<(), Error> {
        let _one = self.wal_sync.lock();
        let synced = self
            .check_syncable()
            .and_then(|()| self.db.flush_wal(true).map_err(|e| store_err("sync", e)));
        if synced.is_err() {
            self.note_sync_failure();
        }
        synced
    }

    /// The `Periodic` sync policy's fsync of the write-ahead log. Nobody waits for it:
    /// a failure is logged and counted, and every sync on request reports it
    /// ([`Store::sync_on_request`]).
    pub(crate) fn periodic_sync(&self) {
        if let Err(e) = self.sync_wal() {
            self.periodic_sync_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "periodic sync of the write-ahead log failed");
        }
    }

    /// Periodic syncs of the write-ahead log that failed so far.
    pub(crate) fn periodic_sync_failures(&self) -> u64 {
        self.periodic_sync_failures.load(Ordering::Relaxed)
    }

    /// An fsync of the write-ahead log asked for (`Engine::sync`, `Namespace::sync`,
    /// `Engine::close`): its error, or, if any fsync of the log failed since the open
    /// (the `Periodic` thread's, a group commit's, an earlier request's, or with group
    /// commit off a synced write's that RocksDB refused), an error
    /// for that, at every call. Completions acknowledged before a failed fsync may
    /// not be on the disk, and a later fsync that works does not bring back pages the
    /// system dropped (it may even be told of the failure no more): a consumer that
    /// syncs before it commits its offsets must hear of it, whichever handle it
    /// syncs through. The engine's next open replays what the log holds on disk.
    pub(crate) fn sync_on_request(&self) -> Result<(), Error> {
        let synced = self.sync_wal();
        if self.sync_failures() > 0 {
            synced?;
            return Err(Error::Store(StoreError::new(
                "sync",
                "an earlier fsync of the write-ahead log failed: completions acknowledged \
                 before it may not be on the disk, and no later fsync brings them back \
                 (the next open replays what the log holds)"
                    .to_owned(),
            )));
        }
        synced
    }
}

/// A claim marker as a scan finds it: its fingerprint and its record, or why the
/// record could not be decoded.
pub(crate) type ScannedClaim = (u128, Result<Record, String>);

/// The journal a namespace's last run left, as the open takes it over
/// ([`DurableNs::prepare_journal`]).
#[derive(Debug, Default)]
pub(crate) struct JournalTakeover {
    /// Its live markers, to be moved into the `claims:` family.
    pub(crate) moved: Vec<(u128, Record)>,
    /// Its damaged slots, reported as corrupt orphans.
    pub(crate) damaged: Vec<ScannedClaim>,
    /// Damaged journals an earlier open kept aside but may not have reported (it
    /// failed or was killed before it finished): their damaged slots are among
    /// `damaged` again.
    unreported: Vec<PathBuf>,
    /// Whether the journal in place has damaged slots (then it is kept aside).
    damaged_here: bool,
    /// The journal in place, already linked under a kept-aside name by an earlier
    /// open killed before it removed the old name: that name, whose move this open
    /// finishes instead of keeping the file aside a second time.
    half_kept: Option<PathBuf>,
    /// This run's journal, made but not yet in place.
    #[cfg(target_os = "linux")]
    next: Option<journal::Prepared>,
}

/// The suffix of a damaged journal kept aside by an open that has not yet finished.
const UNREPORTED: &str = ".unreported";

/// Moves file `from` to a new name, `from` with `suffix` and [`UNREPORTED`] added,
/// never over a file there: where one is there, or one of that name without the
/// [`UNREPORTED`] suffix (a journal kept by an earlier open whose stamp was the
/// same: the clock set back, or two opens in one millisecond), `-1`, `-2` ... is
/// added to the suffix. Returns the new name.
fn keep_aside(from: &Path, suffix: &str) -> std::io::Result<std::ffi::OsString> {
    let mut n = 0u64;
    loop {
        let mut kept = from.as_os_str().to_owned();
        kept.push(suffix);
        if n > 0 {
            kept.push(format!("-{n}"));
        }
        n += 1;
        let mut to = kept.clone();
        to.push(UNREPORTED);
        if Path::new(&kept).exists() {
            continue;
        }
        let moved = move_no_replace_then(from, Path::new(&to), || {
            #[cfg(test)]
            run_test_hook(&AFTER_ASIDE_LINK);
        });
        match moved {
            Ok(()) => return Ok(to),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
}

/// Moves file `from` to `to`, failing with `AlreadyExists` if `to` is there: a
/// link under the new name (which never replaces a file), then `after_link` (a
/// test's hook), then the old name removed. A crash between the two leaves the file
/// under both names: seen again, never lost, and the next move of it finishes (`to`
/// is then that very file, so the old name is removed).
fn move_no_replace_then(from: &Path, to: &Path, after_link: impl FnOnce()) -> std::io::Result<()> {
    match std::fs::hard_link(from, to) {
        Ok(()) => after_link(),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && same_file(from, to) => {}
        Err(e) => return Err(e),
    }
    std::fs::remove_file(from)
}

/// Whether `a` and `b` name the same file (one linked under both names).
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

/// A namespace's view of the durable tier: its policies and counters.
#[derive(Debug)]
pub(crate) struct DurableNs {
    pub(crate) store: std::sync::Arc<Store>,
    pub(crate) name: String,
    /// The names of the namespace's column families.
    fams: Families,
    pub(crate) sync: SyncPolicy,
    pub(crate) failure: FailurePolicy,
    pub(crate) reads: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) fail_open: AtomicU64,
    /// The Bloom filters in front of the done records, if the namespace has them.
    pub(crate) prefilter: Option<Prefilter>,
    /// Claim markers not written yet (`ClaimMarkers::Deferred`).
    pub(crate) deferred: Option<DeferredMarkers>,
    /// The memory-mapped claim-marker journal (`ClaimMarkers::Journal`), with its
    /// size in slots; set up at open ([`DurableNs::prepare_journal`], [`DurableNs::finish_journal`]).
    journal: std::sync::OnceLock<Journal>,
    journal_slots: Option<u32>,
    /// Markers that found the journal full and went to RocksDB instead.
    journal_overflows: AtomicU64,
    /// The claim markers known to be in RocksDB (with `Journal` and `Deferred`
    /// markers): the last run's still there (live orphans, damaged records), and
    /// this run's (flushed deferred markers, a journal's overflows), each of which
    /// the sweep of RocksDB markers deletes once its claim is over
    /// ([`DurableNs::ended_on_disk`], [`DurableNs::sweep_on_disk`]).
    on_disk: parking_lot::Mutex<FpMap<OnDisk>>,
    /// No marker of this run in `on_disk` has a lease that ended before this time
    /// (ms), as far as the sweep knows: the earliest lease end of those noted since
    /// the last sweep and of those it left; `u64::MAX` for none. Lowered under
    /// `on_disk`'s lock by every note, and by [`DurableNs::look_again_on_disk`].
    disk_min_end: AtomicU64,
    /// Writers of claim markers into RocksDB hold it shared around the write; a
    /// claim that lost its lease holds it alone while it reads its marker and
    /// deletes it if still its own ([`DurableNs::lease_lost`]), so that no later
    /// claim's marker is written between the read and the delete.
    marker_gate: parking_lot::RwLock<()>,
    /// Whether `on_disk` may hold one (set with each note, cleared under its lock
    /// when the last goes), so that completions in a run without markers in RocksDB
    /// never take its lock.
    any_on_disk: AtomicBool,
    prefilter_loads: AtomicU64,
    prefilter_rebuilds: AtomicU64,
    /// The latest time the namespace has read, shared with its retention filter.
    seen_ms: std::sync::Arc<AtomicU64>,
}

/// Hashes a fingerprint by folding its two halves: fingerprints are seeded xxh3
/// hashes already, uniform and not chosen by whoever picks the keys, so hashing them
/// again (SipHash, the std default) is wasted work on every deferred claim.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FpHasher(u64);

impl std::hash::Hasher for FpHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u128(&mut self, v: u128) {
        self.0 ^= v as u64 ^ (v >> 64) as u64;
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u128` keys are hashed here; any other input still hashes correctly.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A map or set keyed by fingerprint.
pub(crate) type FpMap<V> =
    std::collections::HashMap<u128, V, std::hash::BuildHasherDefault<FpHasher>>;
pub(crate) type FpSet = std::collections::HashSet<u128, std::hash::BuildHasherDefault<FpHasher>>;

/// A claim marker in RocksDB that a namespace knows of (`DurableNs::on_disk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDisk {
    /// The last run's (an orphan found at open, a damaged record): its token is of
    /// another run, so no sweep judges it; the next completion, release or forget of
    /// its key deletes it, or the next open reports it again.
    Earlier,
    /// One this run wrote (a flushed deferred marker, a journal's overflow or a
    /// renewal that found no slot free, a deferred marker written once the engine
    /// was dropped): its claim's fencing token and the lease end it carries.
    Ours { token: u32, end_ms: u64 },
}

/// Claim markers kept in memory until the maintenance pass writes them.
#[derive(Debug, Default)]
pub(crate) struct DeferredMarkers {
    pending: parking_lot::Mutex<FpMap<Record>>,
    /// Held while drained markers are being written, so that a completion or release
    /// of one of them deletes it only after it reached the store.
    flushing: parking_lot::Mutex<()>,
}

impl DurableNs {
    pub(crate) fn new(
        store: std::sync::Arc<Store>,
        name: &str,
        sync: SyncPolicy,
        failure: FailurePolicy,
        prefilter: Option<Prefilter>,
        markers: ClaimMarkers,
        journal_slots: u32,
    ) -> Self {
        let seen_ms = store.seen_ms.get(name).cloned().unwrap_or_default();
        DurableNs {
            store,
            name: name.to_owned(),
            fams: Families::of(name),
            sync,
            failure,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            fail_open: AtomicU64::new(0),
            prefilter,
            deferred: (markers == ClaimMarkers::Deferred).then(DeferredMarkers::default),
            journal: std::sync::OnceLock::new(),
            journal_slots: (markers == ClaimMarkers::Journal).then_some(journal_slots),
            journal_overflows: AtomicU64::new(0),
            on_disk: parking_lot::Mutex::new(FpMap::default()),
            disk_min_end: AtomicU64::new(u64::MAX),
            marker_gate: parking_lot::RwLock::new(()),
            any_on_disk: AtomicBool::new(false),
            prefilter_loads: AtomicU64::new(0),
            prefilter_rebuilds: AtomicU64::new(0),
            seen_ms,
        }
    }

    /// Notes that the namespace has read `ms` (its time never goes back): its
    /// retention filter may judge records by times up to it.
    pub(crate) fn note_time(&self, ms: u64) {
        self.seen_ms.fetch_max(ms, Ordering::Release);
    }

    /// Point reads of the store so far.
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Fsyncs the write-ahead log now ([`crate::Namespace::sync`]); a failure is
    /// counted in the namespace's `store_errors` and returned.
    pub(crate) fn sync(&self) -> Result<(), Error> {
        self.store.sync_on_request().inspect_err(|_| {
            self.errors.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Claim markers waiting in memory (tests).
    #[cfg(test)]
    pub(crate) fn deferred_pending(&self) -> usize {
        self.deferred.as_ref().map_or(0, |d| d.pending.lock().len())
    }

    /// Keeps claim markers in memory until the next flush; false (nothing kept) if
    /// the namespace does not defer them or its engine was dropped, and the caller
    /// writes them at once. Closed is read under the lock that the engine's last
    /// flush drains under, after it closed the store: a marker is either kept before
    /// that drain (and written by it) or refused here, never kept after it, where no
    /// flush would come.
    ///
    /// Refused, it drops the markers an earlier claim of the same keys left in
    /// memory (their leases ran out, or these claims could not have been made): the
    /// last flush would otherwise write such a stale marker over the one the caller
    /// now writes ([`DurableNs::write_claims`] waits out a flush in progress).
    pub(crate) fn defer_markers(&self, markers: &[(u128, Record)]) -> bool {
        let Some(d) = &self.deferred else {
            return false;
        };
        #[cfg(test)]
        run_test_hook(&BEFORE_DEFER);
        let mut pending = d.pending.lock();
        if self.store.closed() {
            for (fp, _) in markers {
                pending.remove(fp);
            }
            return false;
        }
        for (fp, rec) in markers {
            pending.insert(*fp, rec.clone());
        }
        true
    }

    /// Removes the marker of claim `token` of `fp` (its fencing token, so that a
    /// later claim's marker is never the one cleared), released: settled where it
    /// was kept off disk (cleared from the journal, or dropped from memory before a
    /// flush writes it), else deleted from RocksDB, after any write of it in
    /// progress has finished. A marker of the key noted in RocksDB (an earlier
    /// claim's) is deleted too. A completion and a forget clear a journal marker
    /// only after their write ([`DurableNs::write_completions`], [`DurableNs::forget`]).
    pub(crate) fn release_marker(&self, fp: u128, token: u32) {
        let took = match self.journal.get() {
            Some(j) if self.clear_journal(j, fp, Some(token)) => {
                match self.take_marker_on_disk(fp) {
                    None => return,
                    taken => taken,
                }
            }
            Some(_) => None,
            None => match self.take_deferred(fp, token) {
                Some((_, None)) => return,
                Some((_, taken)) => taken,
                None => None,
            },
        };
        self.delete_claims(&[(fp, took)]);
    }

    /// Without a journal: the deferred marker of claim `token` of `fp` taken out of
    /// memory (so no flush writes it), and the note of an earlier claim's marker on
    /// disk, taken too (a marker kept off disk then needs the delete after all).
    /// `None` if it was not in memory; any write of it in progress has then finished.
    fn take_deferred(&self, fp: u128, token: u32) -> Option<(Record, Option<OnDisk>)> {
        let marker = self.take_pending(fp, token)?;
        // A flush under way may be writing an earlier claim of the key's marker (it
        // took that marker out of memory before this claim was made, the earlier
        // lease having run out): it finishes first, so that its note is read here
        // and the caller's delete lands after its write. Read before it, the note
        // would be missed, and the caller's later take of it (once its write was
        // done) would drop it without a delete: the earlier claim, ending, would
        // not look for its marker on disk, and the next open would report it.
        #[cfg(test)]
        run_test_hook(&BEFORE_FLUSH_WAIT);
        let _flushed = self.deferred.as_ref().map(|d| d.flushing.lock());
        Some((marker, self.take_marker_on_disk(fp)))
    }

    /// The deferred marker of claim `token` of `fp` taken out of memory, so that no
    /// flush writes it; `None` if it was not there (not deferring, flushed, or a
    /// later claim's), and any write of it in progress has then finished.
    fn take_pending(&self, fp: u128, token: u32) -> Option<Record> {
        let d = self.deferred.as_ref()?;
        let take = || {
            let mut pending = d.pending.lock();
            if pending.get(&fp).is_some_and(|r| r.token == token) {
                pending.remove(&fp)
            } else {
                None
            }
        };
        take().or_else(|| {
            // Perhaps in a flush: wait for it. One that failed put its markers back.
            let _flushed = d.flushing.lock();
            take()
        })
    }

    /// Undoes what a write that failed took of `fp`'s markers: its deferred `marker`
    /// goes back into memory (unless a newer claim of the key has deferred its own
    /// meanwhile), and the note of an earlier claim's marker on disk that was taken
    /// (`was_on_disk`) is put back, unless a newer one was noted meanwhile.
    fn restore_marker(&self, fp: u128, marker: Option<Record>, was_on_disk: Option<OnDisk>) {
        #[cfg(test)]
        run_test_hook(&BEFORE_RESTORE);
        if let (Some(d), Some(m)) = (&self.deferred, marker) {
            let mut pending = d.pending.lock();
            if !self.store.closed() {
                pending.entry(fp).or_insert(m);
            } else if !pending.contains_key(&fp) {
                // The engine's last flush has run (it drains under this lock, after
                // the close): kept here, the marker would never be written. Written
                // now, or kept as before if the store refuses.
                drop(pending);
                let _writing = self.marker_gate.read();
                match self.store.put_claims(&self.fams, &[(fp, m.clone())]) {
                    Ok(()) => self.note_ours(fp, &m),
                    Err(e) => {
                        tracing::warn!(
                            namespace = %self.name,
                            error = %e,
                            "could not write a claim marker after the engine was dropped; it stays in memory"
                        );
                        d.pending.lock().entry(fp).or_insert(m);
                    }
                }
            }
        }
        if let Some(was) = was_on_disk {
            self.restore_note(fp, was);
        }
    }

    /// Clears the journal marker of `fp` (true if it had one), or under the testing
    /// hook only forgets it, leaving it on disk as a crash would.
    fn clear_journal(&self, j: &Journal, fp: u128, token: Option<u32>) -> bool {
        if self.store.keep_journal.load(Ordering::SeqCst) {
            j.forget(fp, token)
        } else {
            j.remove(fp, token)
        }
    }

    /// The fencing token of `fp`'s claim marker in RocksDB, if it has one there
    /// (tests).
    #[cfg(test)]
    pub(crate) fn marker_token_on_disk(&self, fp: u128) -> Option<u32> {
        self.store
            .get_claim(&self.name, &self.fams, fp)
            .unwrap()
            .map(|m| m.token)
    }

    /// Where the marker of `fp`'s claim is and what it says (tests): in the
    /// journal, in memory (deferred) or in RocksDB, looked for in that order.
    #[cfg(test)]
    pub(crate) fn marker_anywhere(&self, fp: u128) -> Option<(&'static str, Record)> {
        if self.journal.get().is_some() {
            let slots = self.read_journal().unwrap().unwrap_or_default();
            if let Some((_, r)) = slots.into_iter().find(|(f, _)| *f == fp) {
                return Some(("journal", r.unwrap()));
            }
        }
        if let Some(d) = &self.deferred {
            if let Some(r) = d.pending.lock().get(&fp) {
                return Some(("memory", r.clone()));
            }
        }
        let on_disk = self.store.get_claim(&self.name, &self.fams, fp).unwrap();
        on_disk.map(|r| ("rocksdb", r))
    }

    /// `fp`'s done record in RocksDB, if it has one (tests).
    #[cfg(test)]
    pub(crate) fn done_on_disk(&self, fp: u128) -> Option<Record> {
        self.store.get_done(&self.name, &self.fams, fp).unwrap()
    }

    /// Writes `marker` for `fp` into RocksDB and notes it there, as the open does
    /// for an orphan of the last run (tests).
    #[cfg(test)]
    pub(crate) fn put_marker_on_disk(&self, fp: u128, marker: Record) {
        self.store.put_claims(&self.fams, &[(fp, marker)]).unwrap();
        self.note_marker_on_disk(fp);
    }

    /// Whether the journal holds a marker of `fp`'s claim with fencing token
    /// `token` (tests).
    #[cfg(test)]
    pub(crate) fn journal_holds(&self, fp: u128, token: u32) -> bool {
        self.journal.get().is_some_and(|j| j.holds(fp, Some(token)))
    }

    /// A claim (fencing token `token`, lease ending at `expires_ms`) that lost its
    /// lease ends here: its marker is removed wherever it is, if still its own, so
    /// that the next open does not report a claim that was no longer in flight,
    /// whatever the marker mode. A journal slot or a deferred marker still in memory
    /// is matched by token; one in RocksDB is read and deleted only if it carries
    /// the token and the lease's end, under `marker_gate` (a later claim of the key
    /// may have written over it, and may be writing now). A marker that cannot be
    /// read or deleted is counted and left: the next open reports it, as before.
    pub(crate) fn lease_lost(&self, fp: u128, token: u32, expires_ms: u64) {
        let maybe_on_disk = match (self.journal.get(), &self.deferred) {
            (Some(j), _) => !self.clear_journal(j, fp, Some(token)) && self.has_marker_on_disk(fp),
            (None, Some(_)) => {
                self.take_pending(fp, token).is_none() && self.has_marker_on_disk(fp)
            }
            (None, None) => true,
        };
        if !maybe_on_disk {
            return;
        }
        #[cfg(test)]
        run_test_hook(&BEFORE_LOST_MARKER_READ);
        let _alone = self.marker_gate.write();
        self.reads.fetch_add(1, Ordering::Relaxed);
        match self.store.get_claim(&self.name, &self.fams, fp) {
            // Tokens start again with each run: the lease's end tells this claim's
            // marker from an orphan of the last run that had the same token.
            Ok(Some(m)) if m.token == token && m.expires_ms == expires_ms => {
                self.delete_claims(&[(fp, None)])
            }
            Ok(_) => {}
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    namespace = %self.name,
                    error = %e,
                    "could not read the marker of a claim that lost its lease; the next open reports it"
                );
            }
        }
    }

    /// Whether a marker of an earlier claim of `fp` (an orphan of the last run, or
    /// one of this run written to RocksDB) is still on disk, without forgetting it.
    fn has_marker_on_disk(&self, fp: u128) -> bool {
        self.any_on_disk.load(Ordering::Acquire) && self.on_disk.lock().contains_key(&fp)
    }

    /// Whether a marker of an earlier claim of `fp` is still on disk, forgetting it
    /// (what was noted of it is returned): a marker kept off disk then needs the
    /// delete after all.
    fn take_marker_on_disk(&self, fp: u128) -> Option<OnDisk> {
        if !self.any_on_disk.load(Ordering::Acquire) {
            return None;
        }
        let mut on_disk = self.on_disk.lock();
        let had = on_disk.remove(&fp);
        if on_disk.is_empty() {
            // Completions stop asking until a marker is noted again (under this lock).
            self.any_on_disk.store(false, Ordering::Release);
        }
        had
    }

    /// Notes a claim marker found on disk at open and kept (a live orphan), so that
    /// the completion of a later claim of its key deletes it. (A note of this run's
    /// marker of the key is newer, and kept.)
    pub(crate) fn note_marker_on_disk(&self, fp: u128) {
        self.restore_note(fp, OnDisk::Earlier);
    }

    /// Notes `marker`, of this run's claim of `fp`, just written to RocksDB (under
    /// `marker_gate`, shared): over the key's marker there, so over its note. If a
    /// later claim of the key keeps its marker elsewhere, that claim's completion or
    /// release deletes this one too; and once this claim is over (given up without
    /// an end, its lease ended), the sweep deletes it ([`DurableNs::sweep_on_disk`]).
    fn note_ours(&self, fp: u128, marker: &Record) {
        if self.deferred.is_some() || self.journal_slots.is_some() {
            let (token, end_ms) = (marker.token, marker.expires_ms);
            let mut on_disk = self.on_disk.lock();
            on_disk.insert(fp, OnDisk::Ours { token, end_ms });
            self.disk_min_end.fetch_min(end_ms, Ordering::Relaxed);
            self.any_on_disk.store(true, Ordering::Release);
        }
    }

    /// Puts back a note that was taken of `fp`'s marker on disk (a delete or a write
    /// that would have taken the marker with it failed), unless one was noted
    /// meanwhile (a later claim's marker, written over it).
    fn restore_note(&self, fp: u128, was: OnDisk) {
        if self.deferred.is_some() || self.journal_slots.is_some() {
            let mut on_disk = self.on_disk.lock();
            on_disk.entry(fp).or_insert(was);
            if let OnDisk::Ours { end_ms, .. } = was {
                self.disk_min_end.fetch_min(end_ms, Ordering::Relaxed);
            }
            self.any_on_disk.store(true, Ordering::Release);
        }
    }

    /// Whether the claim that left `marker` of `fp` was completed after all: the
    /// durable tier holds a done record with its fencing token, completed no earlier
    /// than the claim was made and no later than its lease's end, that did not
    /// expire before the claim (tokens restart
    /// every run, so an old record of the key can carry the same one: one that had
    /// expired when the key was acquired again, or a live one that a claim under
    /// fail-open could not read, completed before the claim). Such a marker is settled at open, not
    /// reported: a crash came between the completion's write and the marker's
    /// clearing.
    pub(crate) fn completed_by(&self, fp: u128, marker: &Record) -> Result<bool, Error> {
        match self.store.get_done(&self.name, &self.fams, fp) {
            // Completed no earlier than claimed (a namespace's time never goes back):
            // a live record of an earlier run's claim with the same token is not
            // this claim's, which could have been acquired over it when its read
            // failed under fail-open.
            // And no later than its lease's end, which a completion never passes:
            // after a clock set back across a restart, an earlier run's record with
            // the same token can read as completed after this claim was made.
            Ok(Some(d)) => Ok(d.state == RecordState::Done
                && d.token == marker.token
                && d.at_ms >= marker.at_ms
                && d.at_ms <= marker.expires_ms
                && d.expires_ms > marker.at_ms),
            Ok(None) | Err(Error::CorruptRecord { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// At open, before the namespace serves, the fallible half of taking over the
    /// journal the last run left (whatever this run's marker mode): sorts its
    /// markers into those to move into the `claims:` family and its damaged slots,
    /// and makes this run's journal under its temporary name. Nothing on disk
    /// changes but that temporary file: a marker whose key has since been completed
    /// (a crash between the completion's write and the marker's clearing) is
    /// settled, not moved.
    ///
    /// `found` is what [`DurableNs::read_journal`] read: every namespace's journal is
    /// read (and a foreign one refused) before any is changed.
    pub(crate) fn prepare_journal(
        &self,
        found: Option<Vec<ScannedClaim>>,
    ) -> Result<JournalTakeover, Error> {
        let mut takeover = JournalTakeover::default();
        let found = journal::latest_markers(found.unwrap_or_default());
        for (fp, rec) in found {
            match rec {
                Ok(rec) => {
                    if !self.completed_by(fp, &rec)? {
                        takeover.moved.push((fp, rec));
                    }
                }
                Err(reason) => takeover.damaged.push((fp, Err(reason))),
            }
        }
        takeover.damaged_here = !takeover.damaged.is_empty();
        // Damaged journals kept aside by an open that did not finish: their damaged
        // slots are reported again (their live markers were moved before).
        let file = journal::path(self.store.path.as_path(), &self.name);
        let kept = file
            .file_name()
            .map(|n| format!("{}.damaged-", n.to_string_lossy()))
            .unwrap_or_default();
        let listed = std::fs::read_dir(self.store.path.as_path()).map_err(|err| {
            Error::Store(StoreError::new(
                "list database directory",
                format!("{}: {err}", self.store.path.display()),
            ))
        })?;
        for e in listed.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !(name.starts_with(&kept) && name.ends_with(UNREPORTED)) {
                continue;
            }
            let read = journal::read_head(&e.path()).map_err(|err| {
                Error::Store(StoreError::new(
                    "read damaged journal",
                    format!("{}: {err}", e.path().display()),
                ))
            })?;
            // Not a regular file any more (never read: a FIFO would wait for ever):
            // as a file damaged since, below.
            let parsed = match read {
                Some((bytes, len)) => journal::parse_read(&bytes, len, self.store.seed, &self.name),
                None => Err(journal::ParseError::NotAJournal),
            };
            match parsed {
                // The journal in place under a second name (an open was killed as
                // it kept the file aside): its damaged slots were read above.
                Ok(_) if takeover.damaged_here && same_file(&file, &e.path()) => {
                    takeover.half_kept = Some(e.path());
                    takeover.unreported.push(e.path());
                }
                Ok(slots) => {
                    takeover
                        .damaged
                        .extend(slots.into_iter().filter(|(_, r)| r.is_err()));
                    takeover.unreported.push(e.path());
                }
                // Readable when it was kept aside, damaged since: its slots
                // cannot be reported, so neither is it marked reported. It stays
                // as it is, named in a warning at each open, until removed.
                Err(why) => tracing::warn!(
                    namespace = %self.name,
                    file = %e.path().display(),
                    reason = ?why,
                    "a damaged journal kept aside cannot be read any more; left as it is"
                ),
            }
        }
        #[cfg(target_os = "linux")]
        if let Some(slots) = self.journal_slots {
            takeover.next = Some(Journal::prepare(
                self.store.path.as_path(),
                &self.name,
                self.store.seed,
                slots,
            )?);
        }
        Ok(takeover)
    }

    /// Writes the markers [`DurableNs::prepare_journal`] found live into the
    /// `claims:` family (not synced: the open syncs once for every namespace).
    /// Returns whether there were any.
    pub(crate) fn move_markers(&self, takeover: &JournalTakeover) -> Result<bool, Error> {
        if takeover.moved.is_empty() {
            return Ok(false);
        }
        #[cfg(test)]
        if FAIL_NEXT_MARKER_MOVE.with(|f| f.replace(false)) {
            return Err(Error::Store(crate::error::StoreError::new(
                "move markers",
                "injected failure".to_owned(),
            )));
        }
        self.store.put_claims(&self.fams, &takeover.moved)?;
        Ok(true)
    }

    /// Last step of the takeover, once every namespace's markers are moved and
    /// synced: a journal with damaged slots is kept beside, renamed (its slots were
    /// reported by this open), and this run's journal replaces the old one (or the
    /// file is removed if the namespace does not journal).
    pub(crate) fn finish_journal(&self, takeover: JournalTakeover) -> Result<Vec<PathBuf>, Error> {
        let dir = self.store.path.as_path();
        let mut unreported = takeover.unreported;
        let from = journal::path(dir, &self.name);
        if let Some(kept) = &takeover.half_kept {
            // Kept aside already (and among `unreported`): the move is finished.
            if same_file(&from, kept) {
                std::fs::remove_file(&from).map_err(|e| {
                    Error::Store(crate::error::StoreError::new(
                        "keep damaged journal",
                        e.to_string(),
                    ))
                })?;
            }
        } else if takeover.damaged_here {
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            let to = keep_aside(&from, &format!(".damaged-{stamp}")).map_err(|e| {
                Error::Store(crate::error::StoreError::new(
                    "keep damaged journal",
                    e.to_string(),
                ))
            })?;
            tracing::warn!(
                namespace = %self.name,
                slots = takeover.damaged.len(),
                kept = %std::path::Path::new(&to).display(),
                "the claim-marker journal has damaged slots; the file is kept"
            );
            unreported.push(PathBuf::from(to));
        }
        #[cfg(target_os = "linux")]
        if let Some(next) = takeover.next {
            let j = next.install()?;
            let _ = self.journal.set(j);
            return Ok(unreported);
        }
        journal::remove(dir, &self.name)?;
        Ok(unreported)
    }

    /// Once the open has finished (its orphans reported), drops the
    /// [`UNREPORTED`] suffix of the damaged journals it reported, so that later opens
    /// leave them be. A rename that fails only has them reported again.
    pub(crate) fn mark_reported(&self, files: &[PathBuf]) {
        for file in files {
            let name = file.to_string_lossy();
            let Some(kept) = name.strip_suffix(UNREPORTED) else {
                continue;
            };
            let moved = move_no_replace_then(file, Path::new(kept), || {
                #[cfg(test)]
                run_test_hook(&AFTER_REPORTED_LINK);
            });
            if let Err(e) = moved {
                tracing::warn!(
                    namespace = %self.name,
                    file = %file.display(),
                    error = %e,
                    "could not mark a damaged journal reported; the next open reports it again"
                );
            }
        }
        if !files.is_empty() {
            let _ = std::fs::File::open(self.store.path.as_path()).and_then(|d| d.sync_all());
        }
    }

    /// Reads the journal the last run left for this namespace, if any, changing
    /// nothing: a file that is not a journal of this build, database and namespace
    /// is an [`Error::IncompatibleFormat`].
    pub(crate) fn read_journal(&self) -> Result<Option<Vec<ScannedClaim>>, Error> {
        journal::read(self.store.path.as_path(), &self.name, self.store.seed)
    }

    /// Writes the deferred claim markers (the maintenance pass, and a clean
    /// shutdown). A failed write is counted and logged, and its markers go back in
    /// memory for the next flush (until one succeeds, a crash would not report those
    /// claims as orphans), and the store's error is returned.
    pub(crate) fn flush_markers(&self) -> Result<(), Error> {
        let Some(d) = &self.deferred else {
            return Ok(());
        };
        let _writing = d.flushing.lock();
        let batch: Vec<(u128, Record)> = d.pending.lock().drain().collect();
        if batch.is_empty() {
            return Ok(());
        }
        #[cfg(test)]
        run_test_hook(&BEFORE_FLUSH_PUT);
        self.writes.fetch_add(1, Ordering::Relaxed);
        let _gate = self.marker_gate.read();
        match self.store.put_claims(&self.fams, &batch) {
            // On disk now (noted under the flush's lock, which a completion waits
            // for): if a claim loses its lease and a later claim of the key completes
            // with its own marker still in memory, that completion deletes this one.
            Ok(()) => {
                for (fp, marker) in &batch {
                    self.note_ours(*fp, marker);
                }
                Ok(())
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    namespace = %self.name,
                    markers = batch.len(),
                    error = %e,
                    "could not write deferred claim markers; the next flush tries again"
                );
                // Back in memory, under the flush's lock: a completion, release or
                // forget that waited for this flush looks there again. (Not through
                // `restore_marker`: after the engine's close it writes each marker
                // on its own, a write per marker of the batch the store just refused.)
                let mut pending = d.pending.lock();
                for (fp, marker) in batch {
                    pending.entry(fp).or_insert(marker);
                }
                Err(e)
            }
        }
    }

    /// Sets up the prefilter at open, before the namespace serves: from the file
    /// saved at the last clean shutdown if it is whole, of the same settings and
    /// saved at the database's current sequence number (so no write happened since);
    /// otherwise rebuilt from the done records. The file is good for one open only:
    /// [`DurableNs::spend_saved_prefilter`] removes it once the open has finished
    /// (an open that fails before changing the database leaves it for the next).
    pub(crate) fn open_prefilter(&self, now_ms: u64) -> Result<(), Error> {
        let Some(p) = &self.prefilter else {
            return Ok(());
        };
        // Anything but a regular file there (a FIFO, a directory, a device), or one
        // longer than any this filter saves, is not read: the filter is rebuilt.
        let file = self.store.prefilter_file(&self.name);
        let saved = match super::read_bounded(&file, p.saved_len_limit()) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(
                    namespace = %self.name,
                    file = %file.display(),
                    error = %e,
                    "the saved prefilter cannot be read; rebuilding it from the durable tier"
                );
                None
            }
        };
        if let Some(bytes) = saved {
            match p.load(&bytes, self.store.latest_sequence(), now_ms) {
                Ok(_) => {
                    p.expire(now_ms);
                    self.prefilter_loads.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(why) => tracing::warn!(
                    namespace = %self.name,
                    reason = ?why,
                    "the saved prefilter cannot be used; rebuilding it from the durable tier"
                ),
            }
        }
        self.rebuild_prefilter(now_ms)?;
        self.prefilter_rebuilds.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Removes the prefilter saved at the last clean shutdown, once an open has
    /// finished and before the namespace serves: the writes to come make it stale,
    /// and it must never be read at a later open whose database merely reached the
    /// same sequence number another way (a restored copy written to since).
    pub(crate) fn spend_saved_prefilter(&self) {
        // With or without a prefilter here: an open without one writes all the same,
        // and its file must not outlive those writes for a later open with one.
        let _ = std::fs::remove_file(self.store.prefilter_file(&self.name));
    }

    /// Saves the prefilter for the next open (a clean shutdown). The sequence
    /// number is read before the filter: every write up to it had its key in the
    /// filter first, and any later write makes the saved file stale.
    pub(crate) fn save_prefilter(&self, now_ms: u64) -> Result<(), Error> {
        let Some(p) = &self.prefilter else {
            return Ok(());
        };
        let seq = self.store.latest_sequence();
        let bytes = p.encode(seq, now_ms);
        let file = self.store.prefilter_file(&self.name);
        let tmp = file.with_extension("tmp");
        // Synced before the rename, and the directory after it: a power cut then
        // leaves the old file or the whole new one (a torn one would only be
        // refused by its checksum and rebuilt, at the cost of a rebuild).
        // Created anew: nothing at the temporary name is written through or waited on.
        let written = super::create_fresh(&tmp)
            .and_then(|mut f| {
                use std::io::Write;
                f.write_all(&bytes)?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&tmp, &file))
            .and_then(|()| std::fs::File::open(self.store.path.as_path())?.sync_all());
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(namespace = %self.name, error = %e, "could not save the prefilter");
            Error::Store(StoreError::new(
                "save prefilter",
                format!("{}: {e}", file.display()),
            ))
        })
    }

    /// Fills the prefilter from the done records on disk (at open, before the
    /// namespace serves). Records already past retention at `now_ms` are skipped;
    /// records that do not decode (whose expiry, if their header reads, cannot be
    /// trusted; compaction keeps them) are kept in the filter for good, so their
    /// keys always reach the store, which reports them, as it does without a
    /// prefilter. Returns the records seen.
    pub(crate) fn rebuild_prefilter(&self, now_ms: u64) -> Result<u64, Error> {
        let Some(p) = &self.prefilter else {
            return Ok(0);
        };
        // One scan per core over disjoint key ranges: the filter takes concurrent
        // inserts.
        let parts = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4);
        // Keys go into the filter a batch at a time (`Prefilter::insert_many`).
        const BATCH: usize = 4096;
        let scan = |part: usize| {
            let mut batch = Vec::with_capacity(BATCH);
            let seen = self
                .store
                .scan_done(&self.name, (part, parts), |fp, header| {
                    match header {
                        Ok((RecordState::Done, expires_ms)) if expires_ms <= now_ms => return,
                        Ok((_, expires_ms)) => {
                            batch.push((p.epoch_at_open(expires_ms, now_ms), bloom_hash(fp)))
                        }
                        Err(_) => batch.push((PINNED, bloom_hash(fp))),
                    }
                    if batch.len() == BATCH {
                        p.insert_many(&mut batch);
                    }
                });
            p.insert_many(&mut batch);
            seen
        };
        std::thread::scope(|s| {
            // A part whose thread the system will not start is scanned here.
            const NAME: &str = "idem-prefilter-scan";
            let mut here = vec![0];
            let mut others = Vec::new();
            for i in 1..parts {
                #[cfg(test)]
                if crate::engine::spawn_hook::refused(NAME) {
                    here.push(i);
                    continue;
                }
                match std::thread::Builder::new()
                    .name(NAME.into())
                    .spawn_scoped(s, move || scan(i))
                {
                    Ok(h) => others.push(h),
                    Err(_) => here.push(i),
                }
            }
            let mut total = 0;
            for i in here {
                total += scan(i)?;
            }
            for h in others {
                total += h.join().map_err(|_| {
                    Error::Store(StoreError::new(
                        "scan done",
                        "a prefilter scan thread panicked".to_owned(),
                    ))
                })??;
            }
            Ok(total)
        })
    }

    /// Periodic upkeep: writes deferred claim markers, drops prefilter generations
    /// past retention.
    pub(crate) fn maintain(&self, now_ms: u64) {
        // A failure is counted and logged, and the markers wait for the next pass.
        let _ = self.flush_markers();
        if let Some(p) = &self.prefilter {
            p.expire_behind(now_ms);
        }
    }

    /// Applies the failure policy to a failed store operation: `Ok` if the namespace
    /// fails open (the failure is counted and logged), the error otherwise.
    pub(crate) fn on_failure(&self, e: Error, during: &'static str) -> Result<(), Error> {
        self.on_failures(e, during, 1)
    }

    /// [`DurableNs::on_failure`] for an operation that made `decisions` decisions
    /// (a batch's claims or completions), each counted as a fail-open decision.
    pub(crate) fn on_failures(
        &self,
        e: Error,
        during: &'static str,
        decisions: usize,
    ) -> Result<(), Error> {
        self.errors.fetch_add(1, Ordering::Relaxed);
        match self.failure {
            FailurePolicy::FailOpen => {
                self.fail_open
                    .fetch_add(decisions as u64, Ordering::Relaxed);
                tracing::warn!(
                    namespace = %self.name,
                    during,
                    error = %e,
                    "durable store failed; deciding from the hot tier alone (fail open)"
                );
                Ok(())
            }
            FailurePolicy::FailClosed => Err(e),
        }
    }

    /// Asks the durable tier about a key the hot tier does not hold. A failed read
    /// goes through the failure policy (under `FailOpen` the key is `Absent`), but
    /// for a claim made inside [`failing_closed`], and a corrupt record always
    /// fails.
    pub(crate) fn lookup(&self, fp: Fp, now_ms: u64, err: &mut Option<Error>) -> DurableLookup {
        if let Some(p) = &self.prefilter {
            if !p.may_contain_at(bloom_hash(fp.to_u128()), now_ms) {
                return DurableLookup::Absent;
            }
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        match self.store.get_done(&self.name, &self.fams, fp.to_u128()) {
            Ok(Some(rec)) if live_done(&rec, now_ms) => DurableLookup::Done(DurableDone {
                completed_at_ms: rec.at_ms,
                expires_at_ms: rec.expires_ms,
                payload: rec.payload,
                result: rec.result.map(std::sync::Arc::from),
            }),
            Ok(_) => {
                if let Some(p) = &self.prefilter {
                    p.note_false_positive();
                }
                DurableLookup::Absent
            }
            Err(e @ Error::CorruptRecord { .. }) => {
                // Corruption is never papered over, whatever the failure policy.
                self.errors.fetch_add(1, Ordering::Relaxed);
                *err = Some(e);
                DurableLookup::Failed
            }
            Err(e) if FAILING_CLOSED.with(Cell::get) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                *err = Some(e);
                DurableLookup::Failed
            }
            Err(e) => match self.on_failure(e, "read") {
                Ok(()) => DurableLookup::Absent,
                Err(e) => {
                    *err = Some(e);
                    DurableLookup::Failed
                }
            },
        }
    }

    /// Whether a sliding window's done record must be rewritten to expire at
    /// `expires_ms`: not if the stored record already lasts as long (a rewrite must
    /// never shorten it). A missing or corrupt record is (re)written. A failed read
    /// goes through the failure policy: the error under `FailClosed`; under `FailOpen`
    /// `None`: no rewrite, the hot tier deciding alone as it does when a write fails.
    pub(crate) fn needs_extension(&self, fp: Fp, expires_ms: u64) -> Result<Option<bool>, Error> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        match self.store.get_done(&self.name, &self.fams, fp.to_u128()) {
            Ok(Some(rec)) => Ok(Some(
                rec.state != RecordState::Done || rec.expires_ms < expires_ms,
            )),
            Ok(None) => Ok(Some(true)),
            Err(Error::CorruptRecord { .. }) => {
                // Replaced by the rewrite, from what the hot tier holds.
                self.errors.fetch_add(1, Ordering::Relaxed);
                Ok(Some(true))
            }
            Err(e) => self.on_failure(e, "read").map(|()| None),
        }
    }

    /// Writes claim markers for keys just acquired.
    ///
    /// Markers that find the journal full, when a marker there may have a lease
    /// that ended, have `sweep` run first (the engine's sweep of the claims given up
    /// without an end, `NsInner::sweep_markers`), and try the journal again if it
    /// freed any slot.
    pub(crate) fn write_claims(
        &self,
        claims: &[(u128, Record)],
        sweep: &dyn Fn() -> usize,
    ) -> Result<(), Error> {
        let mut overflow;
        let to_store = match self.journal.get() {
            Some(j) => {
                overflow = j.put(claims);
                if !overflow.is_empty()
                    && claims.iter().any(|(_, r)| j.may_have_ended(r.at_ms))
                    && sweep() > 0
                {
                    overflow = j.put(&overflow);
                }
                if overflow.is_empty() {
                    return Ok(());
                }
                self.journal_overflows
                    .fetch_add(overflow.len() as u64, Ordering::Relaxed);
                &overflow[..]
            }
            None => claims,
        };
        self.writes.fetch_add(1, Ordering::Relaxed);
        // Deferring, and refused (the engine was dropped): after the last flush's
        // write, which may hold an earlier claim's marker of one of these keys.
        let _flushed = self.deferred.as_ref().map(|d| d.flushing.lock());
        let _gate = self.marker_gate.read();
        match self.store.put_claims(&self.fams, to_store) {
            Ok(()) => {
                // A marker that overflowed the journal, or a deferred one written at
                // once (the engine was dropped), is on disk like an orphan's: if its
                // claim loses the lease, `lease_lost` looks for it there, and if a
                // later claim of the key keeps its marker elsewhere, that claim's
                // completion deletes this one too; once its claim is over, the
                // sweep does. (Immediate markers are not noted: every claim of
                // theirs writes over the key's.)
                for (fp, marker) in to_store {
                    self.note_ours(*fp, marker);
                }
                Ok(())
            }
            Err(e) => {
                let r = self.on_failures(e, "claim", to_store.len());
                if r.is_err() {
                    // The claims are refused: none of their markers may stay.
                    if let Some(j) = self.journal.get() {
                        for (fp, r) in claims {
                            j.remove(*fp, Some(r.token));
                        }
                    }
                }
                r
            }
        }
    }

    /// The journal markers whose lease ended by `now_ms`, as (fingerprint, fencing
    /// token), if any may have ([`Journal::ended`]); none without a journal. The
    /// engine's sweep judges each against the hot tier, then clears it
    /// ([`DurableNs::sweep_marker`]) or keeps it ([`DurableNs::look_again_at`]).
    pub(crate) fn ended_markers(&self, now_ms: u64) -> Vec<(u128, u32)> {
        match self.journal.get() {
            Some(j) if j.may_have_ended(now_ms) => j.ended(now_ms),
            _ => Vec::new(),
        }
    }

    /// Clears the journal marker of claim `token` of `fp`, which the engine's sweep
    /// found over (given up without an end: its lease ended and it can no longer
    /// complete). True if it was there.
    pub(crate) fn sweep_marker(&self, fp: u128, token: u32) -> bool {
        self.journal
            .get()
            .is_some_and(|j| self.clear_journal(j, fp, Some(token)))
    }

    /// A journal marker whose lease ended was kept by the sweep (its claim still
    /// holds its key): the sweep looks again from `ms` on.
    pub(crate) fn look_again_at(&self, ms: u64) {
        if let Some(j) = self.journal.get() {
            j.look_again_at(ms);
        }
    }

    /// This run's claim markers in RocksDB (noted in `on_disk`: flushed deferred
    /// markers, a journal's overflows) whose lease ended by `now_ms`, as
    /// (fingerprint, fencing token), if any may have (one atomic load when none
    /// has). The engine's sweep judges each against the hot tier, then deletes those
    /// of claims that are over ([`DurableNs::sweep_on_disk`]) and reports those it
    /// keeps ([`DurableNs::look_again_on_disk`]). The last run's markers are never
    /// among them: their tokens are of another run. The earliest end of the others
    /// is kept, for the next sweep to know when to look again.
    pub(crate) fn ended_on_disk(&self, now_ms: u64) -> Vec<(u128, u32)> {
        if self.disk_min_end.load(Ordering::Relaxed) > now_ms {
            return Vec::new();
        }
        let on_disk = self.on_disk.lock();
        let mut next = u64::MAX;
        let mut out = Vec::new();
        for (&fp, mark) in on_disk.iter() {
            if let OnDisk::Ours { token, end_ms } = *mark {
                if end_ms <= now_ms {
                    out.push((fp, token));
                } else {
                    next = next.min(end_ms);
                }
            }
        }
        self.disk_min_end.store(next, Ordering::Relaxed);
        out
    }

    /// A marker in RocksDB whose lease ended was kept by the sweep (its claim still
    /// holds its key, or its delete failed): the sweep looks again from `ms` on.
    pub(crate) fn look_again_on_disk(&self, ms: u64) {
        self.disk_min_end.fetch_min(ms, Ordering::Relaxed);
    }

    /// Deletes from RocksDB, in one write, the markers of `over` (fingerprint,
    /// fencing token), of claims that the engine's sweep found over (given up
    /// without an end: their lease ended and they can no longer complete), each only
    /// if it is still that claim's: noted as this run's with that token, and read
    /// back carrying that token and the lease end noted. Under `marker_gate`, alone
    /// (as [`DurableNs::lease_lost`]), so that no later claim's marker of the key is
    /// written between the read and the delete. A read or delete that fails is
    /// counted and logged, and its markers stay, noted, for the next maintenance
    /// pass to try again (from `now_ms` on); the next open reports them if none
    /// does. A marker found to be another (not this run's, or corrupt) is left to
    /// the next open, noted as the last run's. Returns how many were deleted.
    pub(crate) fn sweep_on_disk(&self, over: &[(u128, u32)], now_ms: u64) -> usize {
        if over.is_empty() {
            return 0;
        }
        let _alone = self.marker_gate.write();
        // Whether `fp`'s note is still this run's marker of claim `token`, and its end.
        let noted = |fp: u128, token: u32| match self.on_disk.lock().get(&fp) {
            Some(&OnDisk::Ours { token: t, end_ms }) if t == token => Some(end_ms),
            _ => None,
        };
        // Replaces `fp`'s note `was` (if still that) with `now` (`None`: removed).
        let renote = |fp: u128, was: OnDisk, now: Option<OnDisk>| {
            let mut on_disk = self.on_disk.lock();
            if on_disk.get(&fp) == Some(&was) {
                match now {
                    Some(m) => {
                        on_disk.insert(fp, m);
                    }
                    None => {
                        on_disk.remove(&fp);
                        if on_disk.is_empty() {
                            self.any_on_disk.store(false, Ordering::Release);
                        }
                    }
                }
            }
        };
        let mut gone = Vec::new();
        let mut again = false;
        for &(fp, token) in over {
            let Some(end_ms) = noted(fp, token) else {
                continue;
            };
            let ours = OnDisk::Ours { token, end_ms };
            self.reads.fetch_add(1, Ordering::Relaxed);
            match self.store.get_claim(&self.name, &self.fams, fp) {
                Ok(Some(m)) if m.token == token && m.expires_ms == end_ms => gone.push((fp, ours)),
                // Deleted already (by a completion of a later claim of the key).
                Ok(None) => renote(fp, ours, None),
                Ok(Some(_)) | Err(Error::CorruptRecord { .. }) => {
                    renote(fp, ours, Some(OnDisk::Earlier))
                }
                Err(e) => {
                    // The store refuses reads: the rest wait too.
                    again = true;
                    self.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        namespace = %self.name,
                        error = %e,
                        "could not read the marker of a claim given up without an end; the next maintenance pass tries again"
                    );
                    break;
                }
            }
        }
        let mut deleted = 0;
        if !gone.is_empty() {
            self.writes.fetch_add(1, Ordering::Relaxed);
            let fps: Vec<u128> = gone.iter().map(|(fp, _)| *fp).collect();
            match self.store.delete_claims(&self.fams, &fps) {
                Ok(()) => {
                    for (fp, ours) in gone {
                        renote(fp, ours, None);
                    }
                    deleted = fps.len();
                    // A burst of claims given up leaves no table of its size behind.
                    let mut on_disk = self.on_disk.lock();
                    if on_disk.capacity() > 64 && on_disk.len() < on_disk.capacity() / 4 {
                        let keep = on_disk.len() * 2;
                        on_disk.shrink_to(keep);
                    }
                }
                Err(e) => {
                    again = true;
                    self.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        namespace = %self.name,
                        markers = fps.len(),
                        error = %e,
                        "could not delete the markers of claims given up without an end; the next maintenance pass tries again"
                    );
                }
            }
        }
        if again {
            // At once: the next pass tries again, whatever its time.
            self.look_again_on_disk(now_ms);
        }
        deleted
    }

    /// Rewrites the marker of claim `marker.token` of `fp` with `marker` (its lease
    /// extended), where it is: its journal slot, in memory (deferred, not yet
    /// flushed), or in RocksDB (immediate, overflowed, flushed). The caller holds the
    /// claim's entry (`Shard::hold_for_marker`), so no later claim of the key writes
    /// a marker meanwhile. True once rewritten; a store failure follows the failure
    /// policy: the error, or under `FailOpen` false, the marker keeping its old end.
    ///
    /// A renewal that finds no journal slot free, when a marker there may have a
    /// lease that ended, has `sweep` run first (the engine's sweep of the claims
    /// given up without an end, as in [`DurableNs::write_claims`]; the claim's own
    /// entry, held, keeps its marker) and tries the journal again if it freed any
    /// slot. The caller holds no shard lock: the sweep takes them.
    pub(crate) fn renew_marker(
        &self,
        fp: u128,
        marker: Record,
        sweep: &dyn Fn() -> usize,
    ) -> Result<bool, Error> {
        // With no journal slot free, the renewed marker goes to RocksDB, and the old
        // slot is cleared once it is there. A crash in between leaves both, and the
        // open moves the journal's over RocksDB's, as it does any journal marker: the
        // claim is reported, held until the old end. (Keeping RocksDB's would need
        // telling it from an orphan of an earlier run with the same token, which
        // times cannot do when the clock was set back across a restart.)
        let mut leaving = None;
        if let Some(j) = self.journal.get() {
            let mut renewal = j.renew(fp, &marker);
            if matches!(renewal, journal::Renewal::Full)
                && j.may_have_ended(marker.at_ms)
                && sweep() > 0
            {
                renewal = j.renew(fp, &marker);
            }
            match renewal {
                journal::Renewal::Done => return Ok(true),
                journal::Renewal::Full => {
                    self.journal_overflows.fetch_add(1, Ordering::Relaxed);
                    leaving = Some(j);
                }
                journal::Renewal::NotHere => {}
            }
        }
        let token = marker.token;
        // A flush under way finishes first: the marker is then in memory or on disk.
        let _flushed = self.deferred.as_ref().map(|d| d.flushing.lock());
        if let Some(d) = &self.deferred {
            let mut pending = d.pending.lock();
            if let Some(kept) = pending.get_mut(&fp).filter(|r| r.token == marker.token) {
                *kept = marker;
                return Ok(true);
            }
        }
        #[cfg(test)]
        run_test_hook(&BEFORE_RENEW_PUT);
        self.writes.fetch_add(1, Ordering::Relaxed);
        let _gate = self.marker_gate.read();
        let written = [(fp, marker)];
        match self.store.put_claims(&self.fams, &written) {
            Ok(()) => {
                self.note_ours(fp, &written[0].1);
                if let Some(j) = leaving {
                    self.clear_journal(j, fp, Some(token));
                }
                Ok(true)
            }
            Err(e) => self.on_failure(e, "extend lease").map(|()| false),
        }
    }

    /// Removes claim markers of released claims, each with the note of its key's
    /// marker on disk that the caller took before (`None`: it took none). A marker
    /// that cannot be removed is only reported as an orphan at the next open, so
    /// failures are counted, not returned.
    pub(crate) fn delete_claims(&self, markers: &[(u128, Option<OnDisk>)]) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let fps: Vec<u128> = markers.iter().map(|(fp, _)| *fp).collect();
        match self.store.delete_claims(&self.fams, &fps) {
            Ok(()) => {
                for fp in fps {
                    self.take_marker_on_disk(fp);
                }
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(namespace = %self.name, error = %e, "could not remove a claim marker");
                // Still on disk: noted again (what the caller took of it, else as an
                // earlier run's), so that the key's next completion deletes it with
                // its write, and a marker of this run that the sweep may delete
                // stays one.
                for (fp, took) in markers {
                    self.restore_note(*fp, took.unwrap_or(OnDisk::Earlier));
                }
            }
        }
    }

    /// Stores completions (and co-committed state) with the namespace's sync policy:
    /// [`Stored::Yes`], or [`Stored::HotOnly`] when the store refused them and the
    /// namespace fails open, or the store's error.
    pub(crate) fn write_completions(
        &self,
        done: &[(u128, Record)],
        state: &[(String, StateOp)],
    ) -> Result<Stored, Error> {
        match self.write_done(done, state, true)? {
            (stored, None) => Ok(stored),
            // A completion whose fsync failed is answered as refused: its claim is
            // given up, and the record on disk answers its redelivery.
            (_, Some(unsynced)) => Err(unsynced),
        }
    }

    /// Rewrites done records (a sliding window's extension) as
    /// [`DurableNs::write_completions`] writes them, but settles no claim marker:
    /// the claim that completed a key settled its own, and any marker of the key
    /// left now is another claim's (one acquired over the record when a read failed
    /// under `FailOpen`, still in flight), which a crash must report.
    pub(crate) fn rewrite_records(
        &self,
        done: &[(u128, Record)],
        settle: bool,
    ) -> Result<(Stored, Option<Error>), Error> {
        #[cfg(test)]
        run_test_hook(&BEFORE_REWRITE);
        self.write_done(done, &[], settle)
    }

    /// [`DurableNs::write_completions`], settling the claims' markers if `settle`:
    /// what the store holds of the records, with the error of an fsync that failed
    /// after they were applied (under `FailClosed`: the caller reports it), or the
    /// write's refusal.
    fn write_done(
        &self,
        done: &[(u128, Record)],
        state: &[(String, StateOp)],
        settle: bool,
    ) -> Result<(Stored, Option<Error>), Error> {
        // A co-commit is never applied over a completion its claim could not see.
        // Under `FailOpen` a claim whose read of the key's record failed was decided
        // from the hot tier alone, and can have acquired a key done on disk: its
        // state changes would be applied a second time. So the record is read again
        // (before the prefilter takes the keys below), failing closed whatever the
        // policy, as the write itself does: a live one, or a read that fails,
        // refuses the co-commit as a refused write would.
        let hidden = if settle && !state.is_empty() && self.failure == FailurePolicy::FailOpen {
            self.done_unseen(done)
        } else {
            Ok(())
        };
        // Into the prefilter first: from the moment a record can be on disk, the
        // filter admits its key. (A write that then fails leaves a harmless false
        // positive.)
        if let Some(p) = &self.prefilter {
            // Once the engine is gone, no maintenance pass drops the generations past
            // retention: the writes of the handles that outlive it do, at the
            // namespace's own time (the latest it has published; not a reading of
            // the clock taken now, which can be later than the time this completion
            // and the namespace's next claims judge by, so a step of the clock ahead
            // and back would drop a generation of live records; nor a record's time,
            // which can be later still: a sliding window's rewrite keeps its first
            // completion's). Nothing is dropped before the namespace has read the
            // clock.
            if self.store.closed() {
                let seen = self.seen_ms.load(Ordering::Acquire);
                if seen > 0 {
                    p.expire_behind(seen);
                }
            }
            for (fp, rec) in done {
                p.insert(bloom_hash(*fp), rec.expires_ms);
            }
        }
        // A deferred marker still in memory is never written (and needs no delete);
        // one being written finishes first, so the batch's delete of it lands after
        // it. A journaled marker needs no delete either, and stays in the journal
        // until the write is over: a crash before then leaves the claim an orphan.
        // (Deferred markers taken out of memory are put back if the write fails: see
        // below.)
        let mut taken = Vec::new();
        // Deferring: the note of each key's marker on disk taken with its deferred
        // marker, in `done`'s order.
        let mut took = Vec::new();
        let unwritten: Vec<bool> = match self.journal.get() {
            // Nothing of a marker to delete or take.
            _ if !settle => vec![true; done.len()],
            Some(j) => done
                .iter()
                .map(|(fp, r)| j.holds(*fp, Some(r.token)) && !self.has_marker_on_disk(*fp))
                .collect(),
            None => done
                .iter()
                .map(|(fp, r)| {
                    let t = self.take_deferred(*fp, r.token);
                    let unwritten = t
                        .as_ref()
                        .is_some_and(|(_, was_on_disk)| was_on_disk.is_none());
                    took.push(t.as_ref().and_then(|(_, was_on_disk)| *was_on_disk));
                    if let Some(t) = t {
                        taken.push((*fp, t));
                    }
                    unwritten
                })
                .collect(),
        };
        self.writes.fetch_add(1, Ordering::Relaxed);
        let sync = self.store.syncs(self.sync);
        let since = self.store.sync_failures();
        // Applied (every reader sees the records, and the batch deleted the markers
        // on disk), and the fsync's failure if one came after: or refused.
        let written = hidden.and_then(|()| {
            self.store
                .write_completions(&self.name, &self.fams, done, &unwritten, state, sync)
                .map(|unsynced| match unsynced {
                    Some(e) => Some(e),
                    None => self
                        .store
                        .sync_if_closed_since(self.sync, sync, since)
                        .err(),
                })
        });
        let applied = written.is_ok();
        let answer = match written {
            Ok(None) => Ok((Stored::Yes, None)),
            // State changes cannot be applied from the hot tier: never fail open.
            Ok(Some(e)) if !state.is_empty() => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                Ok((Stored::Yes, Some(e)))
            }
            Err(e) if !state.is_empty() => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            // Applied, not synced: every reader sees the records and a crash of the
            // process keeps them (the log reached the OS), so the hot tier may let
            // them go and the markers are settled. Whether a power loss keeps them
            // is what the failed fsync could not say (and a later fsync that works
            // does not bring back pages the system dropped): failing open here
            // trusts the log to the OS, as `SyncPolicy::Never` does.
            Ok(Some(e)) => Ok((
                Stored::Yes,
                self.on_failures(e, "complete", done.len()).err(),
            )),
            Err(e) => self
                .on_failures(e, "complete", done.len())
                .map(|()| (Stored::HotOnly, None)),
        };
        // Refused, or applied and its fsync failed: reported to the caller.
        let failed = !matches!(answer, Ok((_, None)));
        // A journaled claim is no longer in flight once its completion is applied, or
        // refused (the claim is then released). A completion decided from the hot
        // tier alone (fail open, the write refused) keeps its marker: nothing in the
        // store says it is done.
        if !settle {
            return answer;
        }
        if let Some(j) = self.journal.get() {
            if applied || failed {
                for (fp, r) in done {
                    self.clear_journal(j, *fp, Some(r.token));
                }
            }
        }
        if applied {
            // The batch deleted every marker of these keys known to be on disk (an
            // orphan's, an overflowed or flushed one).
            for (fp, _) in done {
                self.take_marker_on_disk(*fp);
            }
        } else {
            // Nothing was deleted: an earlier claim's marker is still on disk. A claim
            // decided from the hot tier alone (fail open) keeps its deferred marker,
            // as a journaled one stays: nothing on disk says it is done, so a crash
            // must leave it an orphan.
            let released = failed;
            if released {
                // A refused completion releases its claims: their markers that may
                // be on disk go now, as a release's do. Best effort, the store having
                // just refused a write: a delete that fails too is logged and leaves
                // the marker noted (in the modes that note them) for the key's next
                // completion, or reported at the next open.
                let on_disk: Vec<(u128, Option<OnDisk>)> = done
                    .iter()
                    .zip(&unwritten)
                    .enumerate()
                    .filter(|&(_, (_, &unwritten))| !unwritten)
                    .map(|(i, ((fp, _), _))| (*fp, took.get(i).copied().flatten()))
                    .collect();
                if !on_disk.is_empty() {
                    #[cfg(test)]
                    run_test_hook(&BEFORE_RELEASED_DELETE);
                    self.delete_claims(&on_disk);
                }
            }
            for (fp, (marker, was_on_disk)) in taken {
                // (Where the delete above ran, it noted what it left on disk.)
                let was_on_disk = was_on_disk.filter(|_| !released);
                self.restore_marker(fp, (!failed).then_some(marker), was_on_disk);
            }
        }
        answer
    }

    /// For a co-commit under `FailOpen` ([`DurableNs::write_done`]): an error if a
    /// key of `done` already has a live done record (a completion its claim, decided
    /// from the hot tier alone when its read failed, could not see), or if its
    /// record cannot be read. Keys the prefilter has never seen need no read.
    fn done_unseen(&self, done: &[(u128, Record)]) -> Result<(), Error> {
        for (fp, rec) in done {
            if let Some(p) = &self.prefilter {
                if !p.may_contain_at(bloom_hash(*fp), rec.at_ms) {
                    continue;
                }
            }
            self.reads.fetch_add(1, Ordering::Relaxed);
            match self.store.get_done(&self.name, &self.fams, *fp) {
                Ok(Some(r)) if live_done(&r, rec.at_ms) => {
                    return Err(Error::Store(StoreError::new(
                        "complete",
                        "the key is already done on disk (its claim was decided from the hot \
                         tier alone when its read failed): the state changes were not applied"
                            .to_owned(),
                    )));
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Runs `write`, told whether to fsync before it returns, under the namespace's
    /// sync policy. `Periodic` relies on the engine's sync thread; once the engine is
    /// dropped a write through a guard or handle that outlived it syncs as `Always`
    /// does, so that nothing acknowledged waits on a sync that will never come.
    fn write_under_policy(
        &self,
        write: impl FnOnce(bool) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let sync = self.store.syncs(self.sync);
        let since = self.store.sync_failures();
        write(sync)?;
        self.store.sync_if_closed_since(self.sync, sync, since)
    }

    /// Deletes a key's durable records, synced as the namespace's completions are (a
    /// forget acknowledged under `Always` survives a power loss as the record it
    /// deletes would have). `Ok(Some(e))`: the delete was applied (the records are
    /// gone for every reader) but the fsync after it failed with `e`; the caller
    /// forgets the key in the hot tier too, and returns `e`.
    pub(crate) fn forget(&self, fp: Fp) -> Result<Option<Error>, Error> {
        let fp = fp.to_u128();
        // With deferred markers the flush's lock is held through the delete (a flush
        // under way finishes first): no marker of the key is written and noted on
        // disk in between, so the note taken below stays true.
        let flushing = self.deferred.as_ref().map(|d| d.flushing.lock());
        // A held claim's marker still waiting in memory would otherwise be written
        // at the next flush and read back as an orphan at the next open.
        let waiting = self
            .deferred
            .as_ref()
            .and_then(|d| d.pending.lock().remove(&fp));
        // The delete takes any marker of the key on disk with it: it is no longer
        // noted there (a completion need not delete it, and completions stop taking
        // the note's lock once none is left).
        let was_on_disk = self.take_marker_on_disk(fp);
        self.writes.fetch_add(1, Ordering::Relaxed);
        // Never decided from the hot tier (as a claim may be under fail-open): a
        // delete the store refused did not happen, whatever the failure policy, and
        // the record it left would still answer for the key.
        let since = self.store.sync_failures();
        let applied = self.store.forget(&self.fams, fp).inspect_err(|_| {
            self.errors.fetch_add(1, Ordering::Relaxed);
        });
        if applied.is_err() {
            // A refused forget changes nothing: the waiting marker goes back (unless
            // a new claim of the key has deferred its own meanwhile), and a marker on
            // disk is still there.
            self.restore_marker(fp, waiting, was_on_disk);
        }
        drop(flushing);
        applied?;
        // A journaled marker goes only with the key, too.
        if let Some(j) = self.journal.get() {
            self.clear_journal(j, fp, None);
        }
        let synced = self.write_under_policy(|sync| {
            if sync {
                self.store.sync_written(since)
            } else {
                Ok(())
            }
        });
        Ok(synced
            .inspect_err(|_| {
                self.errors.fetch_add(1, Ordering::Relaxed);
            })
            .err())
    }

    pub(crate) fn has_state_family(&self, family: &str) -> bool {
        self.store.has_state_family(family)
    }

    pub(crate) fn add_stats(&self, s: &mut crate::stats::Stats) {
        s.durable_reads += self.reads.load(Ordering::Relaxed);
        s.durable_writes += self.writes.load(Ordering::Relaxed);
        s.store_errors += self.errors.load(Ordering::Relaxed);
        s.fail_open_decisions += self.fail_open.load(Ordering::Relaxed);
        if let Some(p) = &self.prefilter {
            s.add_prefilter(&p.stats());
        }
        s.prefilter_loads += self.prefilter_loads.load(Ordering::Relaxed);
        s.prefilter_rebuilds += self.prefilter_rebuilds.load(Ordering::Relaxed);
        s.journal_markers += self.journal.get().map_or(0, |j| j.len() as u64);
        s.journal_overflows += self.journal_overflows.load(Ordering::Relaxed);
        if self.any_on_disk.load(Ordering::Acquire) {
            s.markers_on_disk += self.on_disk.lock().len() as u64;
        }
    }
}

/// The format version stored as `stored` (the format key's bytes) if it is this
/// build's, else [`Error::IncompatibleFormat`].
fn check_format(path: &Path, stored: &[u8]) -> Result<Option<u32>, Error> {
    let found = <[u8; 4]>::try_from(stored).map(u32::from_le_bytes).ok();
    if found == Some(FORMAT_VERSION) {
        Ok(found)
    } else {
        Err(Error::IncompatibleFormat {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        })
    }
}

/// The fingerprint seed stored in the database: eight bytes, or the database is not
/// one this build reads.
fn seed_of(path: &Path, stored: &[u8]) -> Result<u64, Error> {
    // Not "found: this format": the message would then read "has format version 1;
    // this build reads version 1". A damaged seed is no database this build reads.
    <[u8; 8]>::try_from(stored)
        .map(u64::from_le_bytes)
        .map_err(|_| Error::IncompatibleFormat {
            path: path.to_path_buf(),
            found: None,
            supported: FORMAT_VERSION,
        })
}

/// Whether directory `path` holds files that may carry records: table files, write-
/// ahead logs, blob files, or idem's own journal and prefilter files.
fn holds_data_files(path: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(path) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.ends_with(".sst")
            || name.ends_with(".log")
            || name.ends_with(".blob")
            || name.starts_with("idem-journal-")
            || name.starts_with("idem-prefilter-")
            || name.starts_with("idem-format")
    })
}

/// A fixed seed ([`EngineBuilder::seed`](crate::EngineBuilder::seed)) that is not
/// the database's.
fn fixed_seed_differs() -> Error {
    Error::InvalidConfig {
        namespace: String::new(),
        reason: "the fixed seed differs from the one stored in the database",
    }
}

/// Whether every column family of `db` among `existing` (and the default one) is
/// empty.
fn holds_nothing(db: &DB, existing: &BTreeSet<String>) -> Result<bool, Error> {
    if existing.is_empty() {
        return Ok(false);
    }
    let first = |it: rocksdb::DBIterator<'_>| it.into_iter().next().transpose();
    if first(db.iterator(rocksdb::IteratorMode::Start))
        .map_err(|e| store_err("open", e))?
        .is_some()
    {
        return Ok(false);
    }
    for name in existing.iter().filter(|n| *n != "default") {
        let Some(cf) = db.cf_handle(name) else {
            return Ok(false);
        };
        if first(db.iterator_cf(cf, rocksdb::IteratorMode::Start))
            .map_err(|e| store_err("open", e))?
            .is_some()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether RocksDB refused its open because another handle holds the directory's
/// LOCK file: one of this process ("lock hold by current process"), or another
/// process's `fcntl` lock ("While lock file: ..."). Not the failures to create or
/// open the file ("While open a file for lock": permissions, a directory in its
/// place, no space, too many open files), which are store errors, not a sign of
/// another user.
fn lock_held_elsewhere(msg: &str) -> bool {
    msg.contains("lock hold by current process")
        // `fcntl` refused the lock. Its reason is the system's text, in the host's
        // language, so it is not read: a file system without locks (ENOLCK, rare)
        // reads as held too.
        || msg.contains("While lock file:")
        // Windows: the file is open elsewhere (RocksDB's text for a sharing
        // violation; its other failures to make the file read the same).
        || (cfg!(windows) && msg.contains("Failed to create lock file:"))
}

/// A test's hook, run (once, on the thread that set it).
#[cfg(test)]
type TestHook = std::thread::LocalKey<std::cell::RefCell<Option<Box<dyn FnOnce()>>>>;

#[cfg(test)]
std::thread_local! {
    /// Where a claim is about to keep its markers in memory.
    static BEFORE_DEFER: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a marker taken out of memory goes back (a write that failed).
    static BEFORE_RESTORE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a refused open's new database, closed, is about to be removed.
    static BEFORE_UNDO: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a claim that lost its lease is about to read its marker in RocksDB.
    static BEFORE_LOST_MARKER_READ: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where an extended lease's marker is about to be put into RocksDB.
    static BEFORE_RENEW_PUT: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a sliding window's record is about to be rewritten
    /// ([`DurableNs::rewrite_records`]).
    static BEFORE_REWRITE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a refused completion is about to delete its released claims' markers.
    static BEFORE_RELEASED_DELETE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a flush has taken the deferred markers out of memory, before it writes
    /// them ([`DurableNs::flush_markers`]).
    static BEFORE_FLUSH_PUT: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a completion or release that took its deferred marker out of memory is
    /// about to wait for a flush under way (`DurableNs::take_deferred`).
    static BEFORE_FLUSH_WAIT: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a completion's or a forget's write has just been applied, before any
    /// group commit's fsync of it (`Store::write_batch`).
    static AFTER_WRITE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a dead letter has just been written (`Store::dlq_put`).
    static AFTER_DLQ_PUT: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a damaged journal kept aside has just been linked under its reported
    /// name ([`DurableNs::mark_reported`]).
    static AFTER_REPORTED_LINK: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Where a damaged journal in place has just been linked under its kept-aside
    /// name, before its old name is removed ([`DurableNs::finish_journal`]).
    static AFTER_ASIDE_LINK: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// The next [`DurableNs::move_markers`] with markers to move fails.
    static FAIL_NEXT_MARKER_MOVE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The next [`Store::write_settings`] with settings to write fails.
    static FAIL_NEXT_SETTINGS_WRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The next write of a new database's metadata ([`Store::open`]) fails.
    static FAIL_NEXT_METADATA_WRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The next RocksDB open of a store ([`Store::open`]) fails.
    static FAIL_NEXT_ROCKSDB_OPEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes RocksDB's own open of the next store opened (on this thread) fail, once it
/// has made its files: it is asked for a column family the database does not hold.
#[cfg(test)]
pub(crate) fn fail_next_rocksdb_open() {
    FAIL_NEXT_ROCKSDB_OPEN.with(|f| f.set(true));
}

/// Makes the next write of the namespaces' settings at an open (on this thread)
/// fail, as a failing disk would.
#[cfg(test)]
pub(crate) fn fail_next_settings_write() {
    FAIL_NEXT_SETTINGS_WRITE.with(|f| f.set(true));
}

/// Makes the next write of a new database's metadata at an open (on this thread)
/// fail, as a failing disk would.
#[cfg(test)]
pub(crate) fn fail_next_metadata_write() {
    FAIL_NEXT_METADATA_WRITE.with(|f| f.set(true));
}

/// The error of a write a test hook fails.
#[cfg(test)]
fn injected_open_failure(operation: &'static str) -> Error {
    Error::Store(StoreError::new(operation, "injected failure".to_owned()))
}

/// Makes the next move of a journal's markers at an open (on this thread) fail, as a
/// failing disk would.
#[cfg(test)]
pub(crate) fn fail_next_marker_move() {
    FAIL_NEXT_MARKER_MOVE.with(|f| f.set(true));
}

/// Sets the hook [`DurableNs::lease_lost`] runs before it reads a marker in RocksDB.
#[cfg(test)]
pub(crate) fn set_before_lost_marker_read(f: impl FnOnce() + 'static) {
    BEFORE_LOST_MARKER_READ.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Sets the hook [`DurableNs::renew_marker`] runs before it puts a marker into
/// RocksDB.
#[cfg(test)]
pub(crate) fn set_before_renew_put(f: impl FnOnce() + 'static) {
    BEFORE_RENEW_PUT.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Sets the hook [`DurableNs::rewrite_records`] runs before it writes.
#[cfg(test)]
pub(crate) fn set_before_rewrite(f: impl FnOnce() + 'static) {
    BEFORE_REWRITE.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Sets the hook run before a refused completion deletes its released claims'
/// markers.
#[cfg(test)]
pub(crate) fn set_before_released_delete(f: impl FnOnce() + 'static) {
    BEFORE_RELEASED_DELETE.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Sets the hook [`DurableNs::mark_reported`] runs once it has linked a damaged
/// journal under its reported name, before it removes the unreported one.
#[cfg(test)]
pub(crate) fn set_after_reported_link(f: impl FnOnce() + 'static) {
    AFTER_REPORTED_LINK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Sets the hook [`DurableNs::finish_journal`] runs once it has linked a damaged
/// journal in place under its kept-aside name, before it removes the old name.
#[cfg(test)]
pub(crate) fn set_after_aside_link(f: impl FnOnce() + 'static) {
    AFTER_ASIDE_LINK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Sets the hook run right after a completion's or a forget's write was applied
/// (on this thread), before the group commit syncs it.
#[cfg(test)]
pub(crate) fn set_after_write(f: impl FnOnce() + 'static) {
    AFTER_WRITE.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Sets the hook run right after a dead letter's write.
#[cfg(test)]
pub(crate) fn set_after_dlq_put(f: impl FnOnce() + 'static) {
    AFTER_DLQ_PUT.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Runs the hook set by [`set_after_dlq_put`], if any.
#[cfg(test)]
pub(super) fn after_dlq_put() {
    run_test_hook(&AFTER_DLQ_PUT);
}

/// Sets the hook [`DurableNs::defer_markers`] runs first.
#[cfg(test)]
pub(crate) fn set_before_defer(f: impl FnOnce() + 'static) {
    BEFORE_DEFER.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Runs `f` where a flush (on this thread) has taken the deferred markers out of
/// memory, before it writes them.
#[cfg(test)]
pub(crate) fn set_before_flush_put(f: impl FnOnce() + 'static) {
    BEFORE_FLUSH_PUT.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Runs `f` where a completion or release (on this thread) that took its deferred
/// marker out of memory is about to wait for a flush under way.
#[cfg(test)]
pub(crate) fn set_before_flush_wait(f: impl FnOnce() + 'static) {
    BEFORE_FLUSH_WAIT.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Sets the hook run before a marker taken out of memory goes back.
#[cfg(test)]
pub(crate) fn set_before_restore(f: impl FnOnce() + 'static) {
    BEFORE_RESTORE.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// Runs `f` where a refused open's new database, closed, is about to be removed
/// (on this thread).
#[cfg(test)]
pub(crate) fn set_before_undo(f: impl FnOnce() + 'static) {
    BEFORE_UNDO.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

#[cfg(test)]
fn run_test_hook(hook: &'static TestHook) {
    if let Some(f) = hook.with(|h| h.borrow_mut().take()) {
        f();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};

    /// `failing_closed` sets its flag for its closure only: nested, it leaves it set
    /// for the outer closure; after a panic out of the closure, it is unset again.
    #[test]
    fn failing_closed_sets_its_flag_for_its_closure_only() {
        let on = || FAILING_CLOSED.with(Cell::get);
        assert!(!on());
        let inner = failing_closed(|| {
            let inner = failing_closed(on);
            (inner, on())
        });
        assert_eq!(inner, (true, true));
        assert!(!on());
        let panicked = std::panic::catch_unwind(|| failing_closed(|| panic!("a claim panicked")));
        assert!(panicked.is_err());
        assert!(!on(), "the flag outlived a panic");
    }

    #[test]
    fn the_retention_filter_reads_no_later_than_its_namespace_has() {
        let clock = crate::clock::ManualClock::new(10_000);
        let seen = std::sync::Arc::new(AtomicU64::new(0));
        let filter = FilterClock::new(std::sync::Arc::new(clock.clone()), seen.clone());
        // Before the namespace has read the clock, the filter dates nothing.
        assert_eq!(filter.now_ms(), None);
        seen.store(9_000, Ordering::SeqCst);
        // The clock ran ahead of the namespace: the namespace's time, not the clock's.
        assert_eq!(filter.now_ms(), Some(9_000));
        // The clock behind the namespace's time (stepped back): the clock's.
        clock.set(8_000);
        assert_eq!(filter.now_ms(), Some(8_000));
    }

    fn done(token: u32) -> Record {
        Record {
            state: RecordState::Done,
            token,
            at_ms: 1_000,
            expires_ms: 1_000_000,
            payload: None,
            result: None,
        }
    }

    /// A store of one namespace `n` at `dir`.
    fn open_n(dir: &Path) -> Store {
        let clock: std::sync::Arc<dyn Clock> =
            std::sync::Arc::new(crate::clock::ManualClock::new(1_000));
        let settings = NsSettings {
            ttl_ms: 1_000,
            lease_ms: 1_000,
            retention_ms: 1_000_000,
            max_key_len: 64,
        };
        let store = Store::open(
            dir,
            &[("n".to_owned(), settings)],
            &[],
            clock,
            7,
            true,
            None,
            false,
        )
        .unwrap()
        .0;
        store.keep_what_the_open_made();
        store
    }

    #[test]
    fn a_point_read_asks_the_memtables_bloom_filter_first() {
        let dir = crate::durable::test_dir::tempdir("store");
        let store = open_n(dir.path());
        let fams = Families::of("n");
        let present: Vec<(u128, Record)> = (1..=64u128)
            .map(|i| {
                (
                    i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835),
                    done(i as u32),
                )
            })
            .collect();
        store
            .write_completions("n", &fams, &present, &[true; 64], &[], false)
            .unwrap();

        // The perf context is the calling thread's: the reads below are on this one.
        set_perf_stats(PerfStatsLevel::EnableCount);
        let mut ctx = PerfContext::default();
        ctx.reset();
        let absent = (1_000..1_064u128).map(|i| i.wrapping_mul(0xC2B2_AE3D_27D4_EB4F_1656_67B1));
        for fp in absent {
            assert_eq!(store.get_done("n", &fams, fp).unwrap(), None);
        }
        // Each absent key's prefix is refused by the filter, with a few false
        // positives at most (about 1 % at this size).
        let refused = ctx.metric(PerfMetric::BloomMemtableMissCount);
        assert!(refused >= 60, "memtable filter refusals: {refused} of 64");

        ctx.reset();
        for (fp, rec) in &present {
            assert_eq!(store.get_done("n", &fams, *fp).unwrap().as_ref(), Some(rec));
        }
        assert_eq!(ctx.metric(PerfMetric::BloomMemtableHitCount), 64);
        assert_eq!(ctx.metric(PerfMetric::BloomMemtableMissCount), 0);
        set_perf_stats(PerfStatsLevel::Disable);
    }

    #[test]
    fn a_claim_marker_that_stays_does_not_keep_the_log_behind_it() {
        let dir = crate::durable::test_dir::tempdir("store");
        let store = open_n(dir.path());
        let fams = Families::of("n");
        // A claim whose marker stays (its consumer never completes it): the marker
        // family's memtable holds it and nothing more, and never fills.
        let marker = Record {
            state: RecordState::InProgress,
            ..done(1)
        };
        store.put_claims(&fams, &[(u128::MAX, marker)]).unwrap();
        // Then many times the bound's worth of completions (each record 40 bytes or
        // so, its key 16), in batches.
        let batch = 1_000u128;
        let batches = 8 * MAX_TOTAL_WAL_BYTES as u128 / (batch * 56);
        for b in 0..batches {
            let recs: Vec<(u128, Record)> = (0..batch)
                .map(|i| {
                    (
                        (b * batch + i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                        done(2),
                    )
                })
                .collect();
            store
                .write_completions("n", &fams, &recs, &[true; 1_000], &[], false)
                .unwrap();
        }
        // Once the logs pass the bound, RocksDB switches the memtables of the
        // families that hold the oldest log (in the write that passed it) and flushes
        // them, so that the log can go: the marker's family among them.
        let claims = store.cf(&fams.claims).unwrap();
        let in_active = |cf| {
            store
                .db
                .property_int_value_cf(cf, "rocksdb.num-entries-active-mem-table")
                .unwrap()
                .unwrap()
        };
        assert_eq!(
            in_active(claims),
            0,
            "the marker is still in its family's first memtable, holding the first log"
        );
        // Nothing was lost on the way: the marker and the records read back.
        let first = 0x9E37_79B9_7F4A_7C15u128;
        assert_eq!(store.get_done("n", &fams, first).unwrap(), Some(done(2)));
        let claims = store.scan_claims("n").unwrap();
        assert_eq!(claims.len(), 1);
    }

    /// Whether RocksDB compacts each done column family, from the newest options
    /// file it wrote in `dir` (it writes one at open and at each change).
    fn done_compactions(dir: &Path) -> Vec<(String, bool)> {
        let newest = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let n: u64 = name.strip_prefix("OPTIONS-")?.parse().ok()?;
                Some((n, e.path()))
            })
            .max()
            .unwrap()
            .1;
        let text = std::fs::read_to_string(newest).unwrap();
        let mut out = Vec::new();
        let mut family = None;
        for line in text.lines().map(str::trim) {
            if let Some(section) = line.strip_prefix('[') {
                family = section
                    .strip_prefix("CFOptions \"done\\:")
                    .and_then(|r| r.strip_suffix("\"]"))
                    .map(str::to_owned);
            } else if let (Some(f), Some(v)) =
                (&family, line.strip_prefix("disable_auto_compactions="))
            {
                out.push((f.clone(), v == "false"));
            }
        }
        out
    }

    #[test]
    fn done_families_compact_only_once_the_engine_has_set_up_its_prefilters() {
        let dir = crate::durable::test_dir::tempdir("store");
        let store = open_n(dir.path());
        assert_eq!(done_compactions(dir.path()), [("n".to_owned(), false)]);
        store.start_compactions().unwrap();
        assert_eq!(done_compactions(dir.path()), [("n".to_owned(), true)]);
        drop(store);

        // An engine's open starts them, for every done family the database holds
        // (`m` is no longer configured).
        let open = |names: &[&str]| {
            let mut b = crate::Engine::builder()
                .durable(dir.path())
                .clock(crate::ManualClock::new(1_000));
            for n in names {
                b = b.namespace(n, crate::NamespaceConfig::new());
            }
            b.build().unwrap()
        };
        drop(open(&["n", "m"]));
        let engine = open(&["n"]);
        let mut all = done_compactions(dir.path());
        all.sort();
        assert_eq!(all, [("m".to_owned(), true), ("n".to_owned(), true)]);
        drop(engine);
    }
}
