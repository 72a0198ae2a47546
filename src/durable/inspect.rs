//! Read-only inspection of a durable database (`idem inspect`). Opening read-only
//! takes no lock, so a database can be inspected while an engine serves from it.

use std::path::{Path, PathBuf};

use rocksdb::{IteratorMode, Options, DB};

use super::codec::{Record, RecordState};
use super::journal::ReadSlot;
use crate::error::{Error, KeyError, StoreError};

/// What a database holds, as [`inspect`] found it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// The directory.
    pub path: PathBuf,
    /// The database's format version.
    pub format_version: u32,
    /// Every namespace with data, configured or not, sorted by name.
    pub namespaces: Vec<NamespaceSummary>,
    /// The declared consumer state families.
    pub state_families: Vec<String>,
    /// Bytes of all files in the directory.
    pub size_on_disk: u64,
    db: ReadOnlyDb,
    /// The time the inspection reads the database at (wall-clock ms).
    now_ms: u64,
}

/// A database opened read-only: RocksDB's read-only open takes no lock and writes
/// nothing (no journal, settings or prefilter file is touched), so it works while an
/// engine serves from the database, and sees the database as it was when opened.
/// [`inspect`] and [`Dlq::open_read_only`](crate::Dlq::open_read_only) read through it.
#[derive(Debug)]
pub(crate) struct ReadOnlyDb {
    path: PathBuf,
    db: DB,
    seed: u64,
    format_version: u32,
    families: Vec<String>,
    /// Each namespace's journal markers, read at their first use and kept: a dry run
    /// looks up many keys, and the journal is read once, not once a key.
    journals: parking_lot::Mutex<std::collections::HashMap<String, std::sync::Arc<[ReadSlot]>>>,
    /// Each namespace's stored longest key ([`ReadOnlyDb::max_key_len`]), read at its
    /// first use and kept.
    max_key_lens: parking_lot::Mutex<std::collections::HashMap<String, Option<usize>>>,
}

/// One namespace's records.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamespaceSummary {
    /// The namespace's name.
    pub name: String,
    /// Completed keys within retention as of `now_ms`.
    pub done: u64,
    /// Completed keys past retention that compaction has not removed yet.
    pub expired: u64,
    /// Claim markers, in RocksDB and in the namespace's journal: claims in flight (or
    /// orphans of a crash).
    pub in_flight: u64,
    /// Records that could not be decoded. A journal slot counts only if it fails its
    /// check in two reads of the journal: an engine serving from the database may be
    /// filling a slot while it is read.
    pub corrupt: u64,
}

/// One key's durable state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InspectedKey {
    /// The key's fingerprint under this database's seed.
    pub fingerprint: u128,
    /// `true` for a completed key, `false` for a claim in flight.
    pub done: bool,
    /// Claimed at (in flight) or completed at (done), wall-clock ms.
    pub at_ms: u64,
    /// Lease expiry (in flight) or retention expiry (done), wall-clock ms.
    pub expires_at_ms: u64,
    /// Whether a payload fingerprint is stored.
    pub has_payload: bool,
    /// The stored result, if any.
    pub result: Option<Vec<u8>>,
    /// The payload fingerprint stored, if any (what a claim with a payload is
    /// compared with).
    pub(crate) payload_fingerprint: Option<u64>,
}

/// Why a read-only open failed: the column families could not be listed (no idem
/// database there), or the open itself failed.
#[derive(Debug)]
enum Unopened {
    NoFamilies(rocksdb::Error),
    Failed(rocksdb::Error),
}

impl Unopened {
    fn file_gone(&self) -> bool {
        match self {
            Unopened::NoFamilies(e) | Unopened::Failed(e) => file_gone(e.as_ref()),
        }
    }
}

/// Attempts of a read-only open that a live engine's file changes can fail.
const OPEN_ATTEMPTS: u32 = 6;

/// Runs `open` until it succeeds, fails for another reason than `gone` says, or has
/// failed `attempts` times, with `pause(attempt)` after each failed attempt but the
/// last. A read-only open reads the manifest, then opens each table file it lists;
/// an engine serving from the database meanwhile may finish a compaction and delete
/// the files it replaced, or start a new manifest and delete the old one. The open
/// then fails on a file that is not there, which RocksDB reports as a corruption,
/// though the database is whole: the next attempt reads the new manifest.
fn open_racing_writer<T, E>(
    attempts: u32,
    mut open: impl FnMut() -> Result<T, E>,
    gone: impl Fn(&E) -> bool,
    mut pause: impl FnMut(u32),
) -> Result<T, E> {
    let mut attempt = 1;
    loop {
        match open() {
            Err(e) if attempt < attempts && gone(&e) => {
                pause(attempt);
                attempt += 1;
            }
            r => return r,
        }
    }
}

/// How many times a read-only open of `path` is attempted: one where there is no
/// `CURRENT` file, so no database (none of its files can have been replaced
/// meanwhile, and RocksDB's error for it is the same "No such file or directory").
fn open_attempts(path: &Path) -> u32 {
    if path.join("CURRENT").is_file() {
        OPEN_ATTEMPTS
    } else {
        1
    }
}

/// Whether a RocksDB error's text says it failed on a file that was not there (an IO
/// error "No such file or directory", which it may wrap in a corruption).
fn file_gone(text: &str) -> bool {
    text.contains("No such file or directory")
}

/// An empty path names no directory: said as such ([`Error::Store`], as a path that
/// is not there is), not as "`: No such file or directory`", and never handed to
/// RocksDB, which would read `/CURRENT` for it, nor joined to a file name, which
/// would name a file in the working directory.
fn check_not_empty(path: &Path) -> Result<(), Error> {
    if path.as_os_str().is_empty() {
        return Err(Error::Store(StoreError::new(
            "open read-only",
            "the database path is empty".to_owned(),
        )));
    }
    Ok(())
}

/// Checks that `path` names a directory a read-only open can look into, each failure
/// said as it is ([`Error::Store`]): "holds no idem database" would mislead about a
/// path that is empty, not there, cannot be read, or is a file.
fn check_dir(path: &Path) -> Result<(), Error> {
    check_not_empty(path)?;
    super::check_path(path)?;
    let why = match std::fs::metadata(path) {
        Err(e) => format!("{}: {e}", path.display()),
        Ok(m) if !m.is_dir() => format!("the database path {} is not a directory", path.display()),
        Ok(_) => return Ok(()),
    };
    Err(Error::Store(StoreError::new("open read-only", why)))
}

fn store_err(op: &'static str, e: rocksdb::Error) -> Error {
    Error::Store(StoreError::new(op, e.into_string()))
}

fn dir_size(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The configuration namespace `namespace` of the database at `path` was last opened
/// with: its TTL, lease, retention and longest key, on top of the defaults of
/// [`NamespaceConfig::new`](crate::NamespaceConfig::new) (the other settings are the application's own business).
/// Tools that open the database without the application's configuration (`idem
/// dlq`) use it, so that the records they write last as the application's do.
/// `None` if the database holds none for it (a namespace it does not hold, a
/// database last opened by an older idem, or a namespace whose first open was
/// stopped, by a crash, after it made the namespace's column families and before
/// it stored its settings; the application's next open stores them). Read-only,
/// like [`inspect`].
pub fn stored_config(
    path: impl AsRef<Path>,
    namespace: &str,
) -> Result<Option<crate::NamespaceConfig>, Error> {
    let path = path.as_ref();
    check_dir(path)?;
    super::check_rocksdb_files(path)?;
    if DB::list_cf(&Options::default(), path).is_err() {
        return Err(unlisted(path));
    }
    let ms = std::time::Duration::from_millis;
    Ok(super::stored_settings(path, namespace)?.map(|s| {
        crate::NamespaceConfig::new()
            .ttl(ms(s.ttl_ms))
            .lease(ms(s.lease_ms))
            .retention(ms(s.retention_ms))
            .max_key_len(s.max_key_len as usize)
    }))
}

/// The names of the namespaces a database holds, sorted, read from its column
/// families alone: no record is read, and the database may be open in an engine
/// meanwhile. Use it to check a name before opening an engine on it (an engine
/// creates the namespaces it is given). [`Error::IncompatibleFormat`] if the
/// directory `path` holds no RocksDB database; [`Error::Store`] if `path` is empty,
/// not there or not a directory, or with the I/O error if its `CURRENT` file cannot
/// be opened for another reason than its absence (a directory that cannot be read).
pub fn namespaces(path: impl AsRef<Path>) -> Result<Vec<String>, Error> {
    let path = path.as_ref();
    check_dir(path)?;
    super::check_rocksdb_files(path)?;
    let cfs = DB::list_cf(&Options::default(), path).map_err(|_| unlisted(path))?;
    Ok(namespace_names(&cfs))
}

/// Why the column families of `path` could not be listed: no database there
/// ([`Error::IncompatibleFormat`]) if it has no `CURRENT` file (or is no directory),
/// otherwise the error opening that file, as it is (a directory that cannot be read
/// is not "no database"). A `CURRENT` that opens leaves RocksDB's refusal as it was:
/// no database this build can read.
fn unlisted(path: &Path) -> Error {
    unlisted_for(path, super::open_regular(&path.join("CURRENT")).err())
}

/// [`unlisted`], given the error opening `path`'s `CURRENT` file, if any.
fn unlisted_for(path: &Path, current: Option<std::io::Error>) -> Error {
    use std::io::ErrorKind;
    match current {
        Some(e) if !matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            Error::Store(StoreError::new(
                "open read-only",
                format!("{}: {e}", path.join("CURRENT").display()),
            ))
        }
        _ => Error::IncompatibleFormat {
            path: path.to_path_buf(),
            found: None,
            supported: super::FORMAT_VERSION,
        },
    }
}

/// The namespaces among a database's column families (each has a `done:` family),
/// sorted.
fn namespace_names(cfs: &[String]) -> Vec<String> {
    let mut names: Vec<String> = cfs
        .iter()
        .filter_map(|c| c.strip_prefix("done:").map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Opens the database in `path` read-only and summarises it as of `now_ms` (a time
/// past [`LATEST_MS`](crate::LATEST_MS) read as `LATEST_MS`, as the engine reads its
/// clock). [`Error::Store`] with the reason if `path` is not there, cannot be read or
/// is no directory; [`Error::IncompatibleFormat`] if it holds no idem database of
/// this build's format.
pub fn inspect(path: impl AsRef<Path>, now_ms: u64) -> Result<Inspection, Error> {
    let now_ms = now_ms.min(crate::clock::LATEST_MS);
    let path = path.as_ref();
    let ro = ReadOnlyDb::open(path)?;
    let db = &ro.db;
    let mut namespaces = Vec::new();
    for name in namespace_names(&ro.families) {
        let mut s = NamespaceSummary {
            name: name.clone(),
            done: 0,
            expired: 0,
            in_flight: 0,
            corrupt: 0,
        };
        if let Some(cf) = db.cf_handle(&format!("done:{name}")) {
            for item in db.iterator_cf(cf, IteratorMode::Start) {
                let (_, v) = item.map_err(|e| store_err("scan", e))?;
                match Record::decode(&v) {
                    Ok(r) if r.expires_ms > now_ms => s.done += 1,
                    Ok(_) => s.expired += 1,
                    Err(_) => s.corrupt += 1,
                }
            }
        }
        if let Some(cf) = db.cf_handle(&format!("claims:{name}")) {
            for item in db.iterator_cf(cf, IteratorMode::Start) {
                let (_, v) = item.map_err(|e| store_err("scan", e))?;
                match Record::decode(&v) {
                    Ok(_) => s.in_flight += 1,
                    Err(_) => s.corrupt += 1,
                }
            }
        }
        // Claims whose markers are in the namespace's journal (the default).
        for (_, r) in ro.journal(&name)?.iter() {
            match r {
                Ok(_) => s.in_flight += 1,
                Err(_) => s.corrupt += 1,
            }
        }
        namespaces.push(s);
    }
    let state_families = ro
        .families
        .iter()
        .filter_map(|c| c.strip_prefix("state:").map(str::to_owned))
        .collect();
    Ok(Inspection {
        path: path.to_path_buf(),
        format_version: ro.format_version,
        namespaces,
        state_families,
        size_on_disk: dir_size(path),
        db: ro,
        now_ms,
    })
}

impl ReadOnlyDb {
    /// Opens the database in `path` read-only, checking its format version and
    /// reading its fingerprint seed. [`Error::Store`] if `path` is not there, cannot be
    /// read or is no directory; [`Error::IncompatibleFormat`] if it holds no idem
    /// database of this build's format.
    pub(crate) fn open(path: &Path) -> Result<ReadOnlyDb, Error> {
        check_dir(path)?;
        let incompatible = |found| Error::IncompatibleFormat {
            path: path.to_path_buf(),
            found,
            supported: super::FORMAT_VERSION,
        };
        super::check_rocksdb_files(path)?;
        let opened = open_racing_writer(
            open_attempts(path),
            || {
                let families =
                    DB::list_cf(&Options::default(), path).map_err(Unopened::NoFamilies)?;
                DB::open_cf_for_read_only(&Options::default(), path, &families, false)
                    .map(|db| (db, families))
                    .map_err(Unopened::Failed)
            },
            Unopened::file_gone,
            |attempt| std::thread::sleep(std::time::Duration::from_millis(1 << attempt)),
        );
        let (db, families) = opened.map_err(|e| match e {
            Unopened::NoFamilies(_) => unlisted(path),
            Unopened::Failed(e) => store_err("open read-only", e),
        })?;
        let format = db.get(b"idem/format").map_err(|e| store_err("read", e))?;
        let format_version = format
            .as_deref()
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| incompatible(None))?;
        if format_version != super::FORMAT_VERSION {
            return Err(incompatible(Some(format_version)));
        }
        let seed = db
            .get(b"idem/seed")
            .map_err(|e| store_err("read", e))?
            .as_deref()
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            // Without a whole seed no key can be looked up: no database this build
            // can read (its version, the supported one, is not the reason, and "has
            // format version 1; this build reads version 1" would contradict itself).
            .ok_or_else(|| incompatible(None))?;
        Ok(ReadOnlyDb {
            path: path.to_path_buf(),
            db,
            seed,
            format_version,
            families,
            journals: Default::default(),
            max_key_lens: Default::default(),
        })
    }

    /// Namespace `ns`'s journal markers ([`journal_markers`]), read at the first call.
    fn journal(&self, ns: &str) -> Result<std::sync::Arc<[ReadSlot]>, Error> {
        if let Some(j) = self.journals.lock().get(ns) {
            return Ok(j.clone());
        }
        let read: std::sync::Arc<[ReadSlot]> = journal_markers(&self.path, ns, self.seed)?.into();
        self.journals.lock().insert(ns.to_owned(), read.clone());
        Ok(read)
    }

    /// The longest key namespace `ns`'s settings, as the database last stored them,
    /// allow; `None` if it stored none. Read at the first call and kept, as the
    /// journal is: a dry run asks once a message.
    pub(crate) fn max_key_len(&self, ns: &str) -> Result<Option<usize>, Error> {
        if let Some(&max) = self.max_key_lens.lock().get(ns) {
            return Ok(max);
        }
        let max = super::store::read_settings(&self.db, ns)?.map(|s| s.max_key_len as usize);
        self.max_key_lens.lock().insert(ns.to_owned(), max);
        Ok(max)
    }

    /// Whether the database holds namespace `ns`.
    pub(crate) fn has_namespace(&self, ns: &str) -> bool {
        namespace_names(&self.families).iter().any(|n| n == ns)
    }

    /// The durable state of `key` in `namespace` at `now_ms`, as [`Inspection::key`]
    /// describes it: the record an engine opened then would act on. A done record
    /// within its retention first; else a claim marker within its lease, the
    /// journal's before one in RocksDB (an open moves the journal's over it); else,
    /// unless `only_live`, a record no longer in force in the same order (the key is
    /// then claimable). With `only_live` a corrupt claim marker (a corrupt orphan to
    /// the engine, which holds nothing) counts as none; otherwise a corrupt record
    /// met on the way is an error, as a corrupt done record always is.
    pub(crate) fn key(
        &self,
        namespace: &str,
        key: &[u8],
        now_ms: u64,
        only_live: bool,
    ) -> Result<Option<InspectedKey>, Error> {
        if key.is_empty() {
            return Err(KeyError::Empty.into());
        }
        let fp = xxhash_rust::xxh3::xxh3_128_with_seed(key, self.seed);
        let corrupt = |reason: String| Error::CorruptRecord {
            namespace: namespace.to_owned(),
            fingerprint: fp,
            reason,
        };
        // The journal first: a claim that completes meanwhile is then found done, where
        // reading it last could miss the key between its two places.
        let journal = self.journal(namespace)?;
        let stored = |family: &str| -> Result<Option<Result<Record, String>>, Error> {
            let Some(cf) = self.db.cf_handle(&format!("{family}:{namespace}")) else {
                return Err(Error::UnknownNamespace(namespace.to_owned()));
            };
            let v = self
                .db
                .get_cf(cf, super::fp_key(fp))
                .map_err(|e| store_err("read", e))?;
            Ok(v.map(|v| Record::decode(&v).map_err(|e| e.to_string())))
        };
        let (done, claims) = (stored("done")?, stored("claims")?);
        // The journal holds one marker of a claim (the later, where a crash in a
        // renewal left two: see `journal_markers`).
        let marked = journal
            .iter()
            .find(|(slot, _)| *slot == fp)
            .map(|(_, r)| r.clone());
        let inspected = |r: Record| InspectedKey {
            fingerprint: fp,
            done: r.state == RecordState::Done,
            at_ms: r.at_ms,
            expires_at_ms: r.expires_ms,
            has_payload: r.payload.is_some(),
            payload_fingerprint: r.payload,
            result: r.result,
        };
        let mut expired = None;
        for (record, is_marker) in [(done, false), (marked, true), (claims, true)] {
            match record {
                None => {}
                Some(Err(_)) if is_marker && only_live => {}
                Some(Err(reason)) => return Err(corrupt(reason)),
                Some(Ok(r)) if r.expires_ms > now_ms => return Ok(Some(inspected(r))),
                Some(Ok(r)) if !only_live => {
                    expired.get_or_insert(r);
                }
                Some(Ok(_)) => {}
            }
        }
        Ok(expired.map(inspected))
    }

    /// The fingerprint a claim with `payload` stores in this database.
    pub(crate) fn payload_fingerprint(&self, payload: &[u8]) -> u64 {
        crate::engine::payload_fingerprint(self.seed, payload)
    }

    /// Calls `letter` with every stored dead letter of namespace `ns` (`dlq:<ns>`,
    /// laid out as `src/durable/store/dlq.rs` describes), by ascending id, one at a
    /// time, its bytes read in place and never copied; none if the family is not
    /// there (a database from before the dead-letter store). Returns how many keys of
    /// the family are damaged (neither a letter's nor a sound id counter: left, and
    /// counted).
    pub(crate) fn dead_letters(
        &self,
        ns: &str,
        letter: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<u64, Error> {
        let Some(cf) = self.db.cf_handle(&format!("dlq:{ns}")) else {
            return Ok(0);
        };
        let it = self.db.raw_iterator_cf_opt(cf, super::dlq_scan_options());
        super::scan_letters(ns, it, letter)
    }

    /// `read` of the stored bytes of dead letter `id` of namespace `ns`, if there is
    /// one, read in place (pinned), never copied.
    pub(crate) fn dead_letter<R>(
        &self,
        ns: &str,
        id: u64,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, Error> {
        let Some(cf) = self.db.cf_handle(&format!("dlq:{ns}")) else {
            return Ok(None);
        };
        let v = self
            .db
            .get_pinned_cf(cf, super::dlq_message_key(id))
            .map_err(|e| store_err("read dead letter", e))?;
        Ok(v.map(|v| read(&v)))
    }
}

/// The slots of namespace `ns`'s journal that hold markers (none without a journal).
/// The file is read with plain reads while an engine may be writing it, so a slot
/// being filled can be read half old and half new and fail its check: when a slot
/// fails, the journal is read once more and the second read is kept, with only the
/// failures that the first read had too ([`confirmed`]).
fn journal_markers(path: &Path, ns: &str, seed: u64) -> Result<Vec<ReadSlot>, Error> {
    let first = super::journal::read(path, ns, seed)?.unwrap_or_default();
    let read = if first.iter().all(|(_, r)| r.is_ok()) {
        first
    } else {
        let second = super::journal::read(path, ns, seed)?.unwrap_or_default();
        confirmed(&first, second)
    };
    // As an engine's open keeps them: one marker a claim, the later where a crash in
    // the middle of a renewal left two.
    Ok(super::journal::latest_markers(read))
}

/// The slots of a `second` read of a journal, without the failing ones that the
/// `first` read did not have: a slot damaged at rest fails in both reads with the
/// same words, so with the same fingerprint; a slot caught in the middle of a change
/// fails in one read only.
fn confirmed(first: &[ReadSlot], second: Vec<ReadSlot>) -> Vec<ReadSlot> {
    let mut failed_before: Vec<u128> = first
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(fp, _)| *fp)
        .collect();
    second
        .into_iter()
        .filter(|(fp, r)| {
            if r.is_ok() {
                return true;
            }
            match failed_before.iter().position(|f| f == fp) {
                Some(i) => {
                    failed_before.swap_remove(i);
                    true
                }
                None => false,
            }
        })
        .collect()
}

impl Inspection {
    /// The durable state of `key` in `namespace`: a completed record, a claim in
    /// flight (its marker in RocksDB or in the namespace's journal, the default
    /// marker mode: a claim an engine holds now, or an orphan of a crash), or
    /// `None`. Where the database holds more than one record of the key, the one an
    /// engine opened at the inspection's time would act on: a record still in force
    /// (a done record within its retention before a claim marker within its lease,
    /// the journal's marker before one in RocksDB, the later of two a crash in a
    /// renewal left in the journal); only if none is, one past its end (the key is
    /// then claimable), in the same order. An empty key, or one longer than the namespace's `max_key_len` as the
    /// database last stored it, is refused with [`Error::InvalidKey`], as the engine
    /// refuses it; a namespace the database does not hold with
    /// [`Error::UnknownNamespace`].
    pub fn key(&self, namespace: &str, key: &[u8]) -> Result<Option<InspectedKey>, Error> {
        if let Some(max) = self.db.max_key_len(namespace)? {
            if key.len() > max {
                return Err(KeyError::TooLong {
                    len: key.len(),
                    max,
                }
                .into());
            }
        }
        self.db.key(namespace, key, self.now_ms, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(at_ms: u64) -> Result<Record, String> {
        Ok(Record {
            state: RecordState::InProgress,
            token: 1,
            at_ms,
            expires_ms: at_ms + 1000,
            payload: None,
            result: None,
        })
    }

    fn failing() -> Result<Record, String> {
        Err("journal slot fails its check".to_owned())
    }

    /// The error text of a read-only open that lost a table file to a live engine's
    /// compaction, as RocksDB 0.24 words it.
    const FILE_GONE: &str = "Corruption: Corruption: IO error: No such file or directory: \
        While open a file for random read: /db/000012.sst: No such file or directory  \
        The file /db/MANIFEST-000064 may be corrupted.";

    #[test]
    fn a_read_only_open_that_lost_a_file_to_a_live_engine_is_tried_again() {
        let mut pauses = Vec::new();
        let mut failures = 2;
        let r = open_racing_writer(
            OPEN_ATTEMPTS,
            || {
                if failures == 0 {
                    return Ok("opened");
                }
                failures -= 1;
                Err(FILE_GONE.to_owned())
            },
            |e| file_gone(e),
            |attempt| pauses.push(attempt),
        );
        assert_eq!(r, Ok("opened"));
        assert_eq!(pauses, [1, 2]);
        // Never more than the attempts allow: the last error is returned.
        let mut tries = 0;
        let r: Result<(), String> = open_racing_writer(
            3,
            || {
                tries += 1;
                Err(FILE_GONE.to_owned())
            },
            |e| file_gone(e),
            |_| {},
        );
        assert_eq!((r, tries), (Err(FILE_GONE.to_owned()), 3));
        // Any other error at once.
        let mut tries = 0;
        let r: Result<(), String> = open_racing_writer(
            OPEN_ATTEMPTS,
            || {
                tries += 1;
                Err("Corruption: block checksum mismatch".to_owned())
            },
            |e| file_gone(e),
            |_| panic!("no pause"),
        );
        assert_eq!((r.is_err(), tries), (true, 1));
    }

    #[test]
    fn rocksdbs_missing_file_errors_read_as_files_gone() {
        assert!(file_gone(FILE_GONE));
        assert!(!file_gone("Corruption: block checksum mismatch"));
        // What RocksDB itself says of a directory with no database: the same words,
        // which is why the open tries once only where there is no `CURRENT` file.
        let dir = std::env::temp_dir().join(format!("idem-inspect-gone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = DB::list_cf(&Options::default(), &dir).unwrap_err();
        assert!(file_gone(e.as_ref()), "{e}");
        assert_eq!(open_attempts(&dir), 1);
        let r = ReadOnlyDb::open(&dir);
        assert!(
            matches!(r, Err(Error::IncompatibleFormat { found: None, .. })),
            "{r:?}"
        );
        std::fs::write(dir.join("CURRENT"), "MANIFEST-000001\n").unwrap();
        assert_eq!(open_attempts(&dir), OPEN_ATTEMPTS);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_current_file_that_cannot_be_opened_is_said_as_it_is_not_as_no_database() {
        use std::io::{Error as IoError, ErrorKind};
        let path = Path::new("/db");
        let store = |kind: ErrorKind| {
            let e = unlisted_for(path, Some(IoError::from(kind)));
            matches!(e, Error::Store(s) if s.to_string().contains("/db/CURRENT"))
        };
        // A directory that cannot be read (tests run as root, where permissions do
        // not bind: the decision alone).
        assert!(store(ErrorKind::PermissionDenied));
        assert!(store(ErrorKind::Other));
        let none = |current: Option<IoError>| {
            matches!(
                unlisted_for(path, current),
                Error::IncompatibleFormat { found: None, .. }
            )
        };
        assert!(none(Some(IoError::from(ErrorKind::NotFound))));
        assert!(none(Some(IoError::from(ErrorKind::NotADirectory))));
        assert!(none(None));
    }

    #[cfg(unix)]
    #[test]
    fn a_current_file_that_cannot_be_opened_is_an_io_error_everywhere() {
        // A link to itself: opening it fails, and not as a missing file.
        let dir = crate::durable::test_dir::tempdir("inspect-current-loop");
        std::os::unix::fs::symlink("CURRENT", dir.path().join("CURRENT")).unwrap();
        let io = |r: Result<(), Error>| {
            assert!(
                matches!(&r, Err(Error::Store(s)) if s.to_string().contains("symbolic links")),
                "{r:?}"
            )
        };
        io(ReadOnlyDb::open(dir.path()).map(|_| ()));
        io(namespaces(dir.path()).map(|_| ()));
        io(stored_config(dir.path(), "ns").map(|_| ()));
        // Without it, no database.
        std::fs::remove_file(dir.path().join("CURRENT")).unwrap();
        assert!(matches!(
            namespaces(dir.path()),
            Err(Error::IncompatibleFormat { .. })
        ));
    }

    #[test]
    fn an_empty_path_is_said_to_be_empty_everywhere() {
        let empty = |r: Result<(), Error>| {
            assert!(
                matches!(&r, Err(Error::Store(s)) if s.to_string().contains("the database path is empty")),
                "{r:?}"
            )
        };
        empty(ReadOnlyDb::open(Path::new("")).map(|_| ()));
        empty(inspect("", 0).map(|_| ()));
        empty(namespaces("").map(|_| ()));
        empty(stored_config("", "ns").map(|_| ()));
    }

    #[test]
    fn a_database_whose_seed_is_damaged_is_no_database_this_build_reads() {
        let dir = crate::durable::test_dir::tempdir("inspect-seed");
        let db = dir.path().join("db");
        crate::Engine::builder()
            .namespace("ns", crate::NamespaceConfig::new())
            .durable(&db)
            .maintenance_interval(None)
            .build()
            .unwrap();
        {
            let cfs = DB::list_cf(&Options::default(), &db).unwrap();
            let raw = DB::open_cf(&Options::default(), &db, &cfs).unwrap();
            raw.put(b"idem/seed", b"abc").unwrap();
        }
        let r = ReadOnlyDb::open(&db).map(|_| ());
        assert!(
            matches!(r, Err(Error::IncompatibleFormat { found: None, .. })),
            "{r:?}"
        );
    }

    #[test]
    fn a_slot_failing_in_one_read_only_is_not_corrupt() {
        // Slot 7 was being filled during the first read; slot 9 during the second.
        let first = vec![(1, marker(10)), (7, failing())];
        let second = vec![(1, marker(10)), (7, marker(20)), (9, failing())];
        let kept = confirmed(&first, second);
        let fps: Vec<u128> = kept.iter().map(|(fp, _)| *fp).collect();
        assert_eq!(fps, [1, 7]);
        assert!(kept.iter().all(|(_, r)| r.is_ok()), "{kept:?}");
    }

    #[test]
    fn a_slot_failing_in_both_reads_is_corrupt() {
        let first = vec![(3, failing()), (3, failing()), (5, marker(10))];
        let second = vec![(3, failing()), (3, failing()), (5, marker(10))];
        let kept = confirmed(&first, second);
        assert_eq!(kept.iter().filter(|(_, r)| r.is_err()).count(), 2);
        assert_eq!(kept.len(), 3);
    }
}
