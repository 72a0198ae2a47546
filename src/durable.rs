//! The durable tier: embedded RocksDB, one set of column families per namespace.
//!
//! Column families:
//!
//! * `default`: the database's own metadata: format version and fingerprint seed.
//! * `done:<namespace>`: fingerprint (16 bytes, big-endian) -> completed [`Record`].
//!   A compaction filter drops records past their retention; reads check it too.
//! * `claims:<namespace>`: fingerprint -> in-progress [`Record`]: the claim markers.
//!   They are written without fsync when a key is acquired and deleted in the same
//!   atomic write that stores the completion, so the markers left after a crash are
//!   exactly the claims that were in flight (the orphans). By default markers go to
//!   the namespace's memory-mapped journal instead (`journal.rs`), which the next open
//!   moves into this family.
//! * `state:<family>`: the consumer's own state, written by co-commits in the same
//!   atomic write as the completion it belongs to.
//! * `dlq:<namespace>`: the namespace's dead letters (see `store/dlq.rs`); a replayed
//!   message's record is written in the same atomic write as its key's completion.
//!
//! The engine only reaches RocksDB through this module; no RocksDB type leaves it.

// Without the durable tier only the record codec is compiled (for its tests and the
// fuzz target), and nothing in the engine reads it.
#![cfg_attr(not(feature = "durable"), allow(dead_code))]

pub(crate) mod codec;
#[cfg(feature = "durable")]
mod group;
#[cfg(feature = "durable")]
pub(crate) mod inspect;
pub(crate) mod journal;
#[cfg(all(test, feature = "durable", target_os = "linux"))]
pub(crate) use journal::fail_next_prepare;
#[cfg(feature = "durable")]
pub(crate) mod stamp;
#[cfg(feature = "durable")]
mod store;

#[cfg(feature = "durable")]
pub(crate) use store::{
    dlq_message_key, dlq_scan_options, failing_closed, scan_letters, stored_settings, DurableNs,
    Families, FpSet, JournalTakeover, NsSettings, Store,
};
#[cfg(all(test, feature = "durable"))]
pub(crate) use store::{
    fail_next_marker_move, fail_next_metadata_write, fail_next_rocksdb_open,
    fail_next_settings_write, set_after_aside_link, set_after_dlq_put, set_after_reported_link,
    set_after_write, set_before_defer, set_before_flush_put, set_before_flush_wait,
    set_before_lost_marker_read, set_before_released_delete, set_before_renew_put,
    set_before_restore, set_before_rewrite, set_before_undo,
};

/// Refuses a database path that is not valid UTF-8: RocksDB takes its path as a
/// string, converting such a one lossily (the bytes that are not UTF-8 become
/// U+FFFD), so its files would land in another directory than the journal, the
/// stamp and the saved prefilter, which idem writes under the path as given.
pub(crate) fn check_path(path: &std::path::Path) -> Result<(), crate::Error> {
    if path.to_str().is_none() {
        return Err(crate::Error::InvalidConfig {
            namespace: String::new(),
            reason: "the durable tier's path must be valid UTF-8 (RocksDB takes it as a string)",
        });
    }
    Ok(())
}

/// Opens the file at `path` for reading if it is a regular file (a symbolic link is
/// followed): `Ok(None)` if it is anything else, a FIFO, a directory, a device or a
/// socket, which the open must never read (a FIFO's open or read would wait for a
/// writer for ever, a device's read may never end). On Unix it is opened without
/// waiting (`O_NONBLOCK`, which a regular file ignores) and without becoming a
/// controlling terminal, and the open file itself is checked, so nothing put in its
/// place meanwhile is read.
#[cfg(feature = "durable")]
pub(crate) fn open_regular(path: &std::path::Path) -> std::io::Result<Option<std::fs::File>> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    match opts.open(path) {
        Ok(file) => Ok(file.metadata()?.is_file().then_some(file)),
        // A socket cannot be opened at all (ENXIO): it is no regular file either.
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => Ok(None),
            _ => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Creates the file at `tmp` anew, for reading and writing: the temporary name a
/// file is written under before it is renamed into place (the stamp, a saved
/// prefilter, a journal). Whatever has that name first goes (a file a write that
/// did not finish left, a FIFO, a symbolic link), and the file is created
/// exclusively, so the write neither waits for ever for a FIFO's reader nor goes
/// through a link to a file elsewhere; a directory there, or anything put there
/// meanwhile, is an error.
#[cfg(feature = "durable")]
pub(crate) fn create_fresh(tmp: &std::path::Path) -> std::io::Result<std::fs::File> {
    match std::fs::remove_file(tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(tmp)
}

/// Refuses a database directory where one of the files RocksDB reads as it opens
/// (`CURRENT`, `IDENTITY`, a manifest, an options file, a write-ahead log, a table
/// or blob file) is not a regular file: RocksDB would read a FIFO there and wait for
/// a writer for ever, or a device without end. An [`Error::Store`](crate::Error::Store)
/// naming the file, before anything is opened; a directory that cannot be listed is
/// left to the open, which reports it.
#[cfg(feature = "durable")]
pub(crate) fn check_rocksdb_files(path: &std::path::Path) -> Result<(), crate::Error> {
    let Ok(entries) = std::fs::read_dir(path) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let read_at_open = name == "CURRENT"
            || name == "IDENTITY"
            || name.starts_with("MANIFEST-")
            || name.starts_with("OPTIONS-")
            || [".log", ".sst", ".blob"].iter().any(|x| name.ends_with(x));
        if !read_at_open {
            continue;
        }
        // The link's target for a symbolic link, as RocksDB would open it.
        let regular = std::fs::metadata(e.path()).map_or(true, |m| m.is_file());
        if !regular {
            return Err(crate::Error::Store(crate::error::StoreError::new(
                "open",
                format!(
                    "{}: not a regular file; nothing was opened or changed",
                    e.path().display()
                ),
            )));
        }
    }
    Ok(())
}

/// The bytes of the regular file at `path`, if it holds at most `limit` of them: an
/// error of kind `InvalidInput` if it is not a regular file ([`open_regular`]), of
/// kind `FileTooLarge` if it is longer, without reading more than `limit + 1` bytes
/// of it (its length is checked first, and the read is cut there, so a file that
/// grows meanwhile cannot take more).
#[cfg(feature = "durable")]
pub(crate) fn read_bounded(path: &std::path::Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    let Some(file) = open_regular(path)? else {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    };
    let too_long = |len: u64| {
        Error::new(
            ErrorKind::FileTooLarge,
            format!("{len} bytes, over the limit of {limit}"),
        )
    };
    let len = file.metadata()?.len();
    if len > limit {
        return Err(too_long(len));
    }
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(len as usize)
        .map_err(|e| Error::new(ErrorKind::OutOfMemory, e))?;
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_long(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Scratch directories for the durable tier's unit tests.
#[cfg(test)]
pub(crate) mod test_dir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A fresh directory under the system's temporary one, removed when dropped.
    pub(crate) struct Dir(PathBuf);

    impl Dir {
        pub(crate) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A new directory named after `tag`, this process and a counter.
    pub(crate) fn tempdir(tag: &str) -> Dir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "idem-{tag}-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

#[cfg(all(test, feature = "durable", unix))]
mod file_tests {
    use std::io::ErrorKind;

    #[test]
    fn a_bounded_read_takes_a_regular_file_up_to_its_limit_and_nothing_else() {
        let dir = super::test_dir::tempdir("read-bounded");
        let file = dir.path().join("f");
        assert_eq!(
            super::read_bounded(&file, 4).unwrap_err().kind(),
            ErrorKind::NotFound
        );
        std::fs::write(&file, b"1234").unwrap();
        assert_eq!(super::read_bounded(&file, 4).unwrap(), b"1234");
        assert_eq!(
            super::read_bounded(&file, 3).unwrap_err().kind(),
            ErrorKind::FileTooLarge
        );
        // Longer than any real one: refused from its length, not read.
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        assert_eq!(
            super::read_bounded(&file, 1 << 20).unwrap_err().kind(),
            ErrorKind::FileTooLarge
        );
        // A device is not read.
        assert_eq!(
            super::read_bounded(std::path::Path::new("/dev/zero"), 16)
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidInput
        );
        std::fs::remove_file(&file).unwrap();
        let fifo = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
        #[allow(unsafe_code)]
        // SAFETY: a plain system call on a NUL-terminated path.
        let made = unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) };
        assert_eq!(made, 0);
        assert_eq!(
            super::read_bounded(&file, 4).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert!(super::open_regular(dir.path()).unwrap().is_none());
    }
}

use codec::{Record, RecordState};

/// The database format this build writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// The 16-byte key of a fingerprint.
pub(crate) fn fp_key(fp: u128) -> [u8; 16] {
    fp.to_be_bytes()
}

/// One consumer-state change carried by a co-commit.
#[derive(Debug, Clone)]
pub(crate) enum StateOp {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    /// A dead-letter record of the completing namespace (`dlq:<namespace>`; the family
    /// name beside it is unused), co-committed by a replay with the key's completion.
    DeadLetter(Vec<u8>, Vec<u8>),
}

/// Whether a decoded done record still answers `Duplicate` at `now_ms`.
pub(crate) fn live_done(rec: &Record, now_ms: u64) -> bool {
    rec.state == RecordState::Done && rec.expires_ms > now_ms
}

/// Without the `durable` feature there is no durable namespace: this type has no
/// values, so `Option<DurableNs>` is always `None` and its methods are never called.
#[cfg(not(feature = "durable"))]
#[derive(Debug)]
pub(crate) enum DurableNs {}

#[cfg(not(feature = "durable"))]
#[allow(dead_code)]
impl DurableNs {
    pub(crate) fn lookup(
        &self,
        _fp: crate::hot::Fp,
        _now_ms: u64,
        _err: &mut Option<crate::error::Error>,
    ) -> crate::hot::DurableLookup {
        match *self {}
    }

    pub(crate) fn write_claims(
        &self,
        _c: &[(u128, Record)],
        _sweep: &dyn Fn() -> usize,
    ) -> Result<(), crate::error::Error> {
        match *self {}
    }

    pub(crate) fn ended_markers(&self, _now_ms: u64) -> Vec<(u128, u32)> {
        match *self {}
    }

    pub(crate) fn sweep_marker(&self, _fp: u128, _token: u32) -> bool {
        match *self {}
    }

    pub(crate) fn look_again_at(&self, _ms: u64) {
        match *self {}
    }

    pub(crate) fn ended_on_disk(&self, _now_ms: u64) -> Vec<(u128, u32)> {
        match *self {}
    }

    pub(crate) fn look_again_on_disk(&self, _ms: u64) {
        match *self {}
    }

    pub(crate) fn sweep_on_disk(&self, _over: &[(u128, u32)], _now_ms: u64) -> usize {
        match *self {}
    }

    pub(crate) fn needs_extension(
        &self,
        _fp: crate::hot::Fp,
        _expires_ms: u64,
    ) -> Result<Option<bool>, crate::error::Error> {
        match *self {}
    }

    pub(crate) fn write_completions(
        &self,
        _done: &[(u128, Record)],
        _state: &[(String, StateOp)],
    ) -> Result<crate::hot::Stored, crate::error::Error> {
        match *self {}
    }

    pub(crate) fn rewrite_records(
        &self,
        _done: &[(u128, Record)],
        _settle: bool,
    ) -> Result<(crate::hot::Stored, Option<crate::error::Error>), crate::error::Error> {
        match *self {}
    }

    pub(crate) fn forget(
        &self,
        _fp: crate::hot::Fp,
    ) -> Result<Option<crate::error::Error>, crate::error::Error> {
        match *self {}
    }

    pub(crate) fn add_stats(&self, _s: &mut crate::stats::Stats) {
        match *self {}
    }

    pub(crate) fn has_state_family(&self, _f: &str) -> bool {
        match *self {}
    }

    pub(crate) fn maintain(&self, _now_ms: u64) {
        match *self {}
    }

    pub(crate) fn note_time(&self, _ms: u64) {
        match *self {}
    }

    pub(crate) fn reads(&self) -> u64 {
        match *self {}
    }

    pub(crate) fn sync(&self) -> Result<(), crate::error::Error> {
        match *self {}
    }

    pub(crate) fn defer_markers(&self, _m: &[(u128, Record)]) -> bool {
        match *self {}
    }

    pub(crate) fn release_marker(&self, _fp: u128, _token: u32) {
        match *self {}
    }

    pub(crate) fn renew_marker(
        &self,
        _fp: u128,
        _m: Record,
        _sweep: &dyn Fn() -> usize,
    ) -> Result<bool, crate::error::Error> {
        match *self {}
    }

    pub(crate) fn flush_markers(&self) -> Result<(), crate::error::Error> {
        match *self {}
    }

    pub(crate) fn lease_lost(&self, _fp: u128, _token: u32, _expires_ms: u64) {
        match *self {}
    }

    pub(crate) fn save_prefilter(&self, _now_ms: u64) -> Result<(), crate::error::Error> {
        match *self {}
    }
}
