//! The claim-marker journal ([`ClaimMarkers::Journal`](crate::ClaimMarkers::Journal)):
//! one memory-mapped file per namespace in the database directory, holding the
//! markers of the claims this process has in flight.
//!
//! A marker is written into a free 64-byte slot of a shared file mapping with plain
//! stores: no system call, no RocksDB write. The pages belong to the kernel's page
//! cache, so what was stored survives a crash of the process (SIGKILL included) as
//! an unsynced RocksDB write does. Neither survives a crash of the machine before it
//! reaches the disk; the journal is never synced, so its markers get there at the
//! kernel's writeback, where an unsynced RocksDB write goes with the log's next
//! fsync. A completion or release clears its slot.
//!
//! ```text
//! header, 64 bytes:
//! 0   8  magic "IDEMJRNL"
//! 8   4  journal format version (JOURNAL_VERSION)
//! 12  4  slots
//! 16  8  the database's fingerprint seed
//! 24  8  xxh3-64 of the namespace name
//! 32 32  zero
//! slot i at 64 + 64 i, eight little-endian u64 words:
//! 0  fingerprint, high half          4  token (low 32 bits) | flags << 32 (bit 0: payload)
//! 1  fingerprint, low half           5  payload fingerprint (if flag bit 0)
//! 2  claimed at (ms)                 6  zero
//! 3  lease expires (ms)              7  check: xxh3-64 of words 0-6, never 0; 0 = free
//! ```
//!
//! The check word is stored last when a slot is filled and cleared first when it is
//! freed, and a slot is only ever filled while free: a process killed in the middle
//! of filling one leaves it reading free (that claim had not been answered yet). A
//! slot whose check is set but does not match its words was damaged at rest, and is
//! reported, never dropped in silence.
//!
//! At open the journal left by the previous run is read whatever the namespace's
//! marker mode is now: its markers (but those whose key the durable tier holds done
//! by that claim, which are dropped) are written into the namespace's `claims:`
//! column family (synced), and the file is then replaced by a new, empty one (or
//! removed, if the namespace no longer journals), so every later step (orphans, their
//! leases, their deletion) is the one immediate markers take.

#[cfg(all(feature = "durable", target_os = "linux"))]
use std::fs::File;
#[cfg(feature = "durable")]
use std::io::Read;
#[cfg(all(feature = "durable", target_os = "linux"))]
use std::io::Write;
use std::path::{Path, PathBuf};
#[cfg(all(feature = "durable", target_os = "linux"))]
use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::xxh3_64;

use super::codec::{Record, RecordState};
#[cfg(feature = "durable")]
use crate::error::{Error, StoreError};

/// The journal format this build writes and reads.
pub(crate) const JOURNAL_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"IDEMJRNL";
const HEADER: usize = 64;
/// The header's bytes that say whose journal it is (magic, version, slot count,
/// seed, namespace hash); the rest of the header is zeros. A file cut short after
/// them is this journal, damaged.
const IDENTITY: usize = 32;
const SLOT: usize = 64;
const WORDS: usize = SLOT / 8;
const FLAG_PAYLOAD: u64 = 1;

/// The journal file of namespace `ns` in the database directory `dir`: named by a
/// hash of the name (a name of any length gives a short file name; the header holds
/// the hash again, checked on read).
pub(crate) fn path(dir: &Path, ns: &str) -> PathBuf {
    dir.join(format!("idem-journal-{:016x}.bin", xxh3_64(ns.as_bytes())))
}

#[cfg(feature = "durable")]
fn io_err(op: &'static str, file: &Path, e: std::io::Error) -> Error {
    Error::Store(StoreError::new(op, format!("{}: {e}", file.display())))
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn header(slots: u32, seed: u64, ns: &str) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&slots.to_le_bytes());
    h[16..24].copy_from_slice(&seed.to_le_bytes());
    h[24..32].copy_from_slice(&xxh3_64(ns.as_bytes()).to_le_bytes());
    h
}

fn check(words: &[u64; WORDS - 1]) -> u64 {
    let mut bytes = [0u8; (WORDS - 1) * 8];
    for (i, w) in words.iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    xxh3_64(&bytes).max(1)
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn encode(fp: u128, rec: &Record) -> [u64; WORDS - 1] {
    let flags = if rec.payload.is_some() {
        FLAG_PAYLOAD
    } else {
        0
    };
    [
        (fp >> 64) as u64,
        fp as u64,
        rec.at_ms,
        rec.expires_ms,
        u64::from(rec.token) | flags << 32,
        rec.payload.unwrap_or(0),
        0,
    ]
}

/// One slot of a journal read back: a marker, or why its words are not one.
pub(crate) type ReadSlot = (u128, Result<Record, String>);

/// Decodes slot words; `None` for a free slot.
fn decode(w: &[u64; WORDS]) -> Option<ReadSlot> {
    if w[WORDS - 1] == 0 {
        return None;
    }
    let body: [u64; WORDS - 1] = std::array::from_fn(|i| w[i]);
    let fp = u128::from(w[0]) << 64 | u128::from(w[1]);
    if check(&body) != w[WORDS - 1] {
        return Some((fp, Err("journal slot fails its check".to_owned())));
    }
    let flags = w[4] >> 32;
    if flags & !FLAG_PAYLOAD != 0 || w[6] != 0 || (flags & FLAG_PAYLOAD == 0 && w[5] != 0) {
        return Some((fp, Err("journal slot has unknown flags".to_owned())));
    }
    Some((
        fp,
        Ok(Record {
            state: RecordState::InProgress,
            token: w[4] as u32,
            at_ms: w[2],
            expires_ms: w[3],
            payload: (flags & FLAG_PAYLOAD != 0).then_some(w[5]),
            result: None,
        }),
    ))
}

/// The little-endian word at `at` (the caller checked the length).
fn le64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The slot count of a journal whose file is `len` bytes long and starts with `head`
/// (the header, or as much of it as the file holds), or the reason it is not a
/// journal this build can read for this namespace (and, given `seed`, this
/// database). A file cut inside its header, after the bytes that say whose journal
/// it is, is this journal damaged in its length ([`ParseError::Length`]). Never
/// panics.
fn parse_header(head: &[u8], len: u64, seed: Option<u64>, ns: &str) -> Result<usize, ParseError> {
    if head.len() < IDENTITY || &head[..8] != MAGIC {
        return Err(ParseError::NotAJournal);
    }
    let le64 = |at: usize| le64(head, at);
    let version = le32(head, 8);
    if version != JOURNAL_VERSION {
        return Err(ParseError::Version(version));
    }
    if seed.is_some_and(|s| le64(16) != s) || le64(24) != xxh3_64(ns.as_bytes()) {
        return Err(ParseError::Foreign);
    }
    if head.len() < HEADER {
        return Err(ParseError::Length);
    }
    let slots = le32(head, 12) as usize;
    // No build makes more: a header claiming more is damage.
    if slots > crate::config::MAX_JOURNAL_SLOTS {
        return Err(ParseError::TooLarge);
    }
    if len != (HEADER + slots * SLOT) as u64 {
        return Err(ParseError::Length);
    }
    Ok(slots)
}

/// The markers in a journal file's bytes (header included), or the reason the file
/// is not a journal this build can read for this namespace and database. Never
/// panics, whatever the bytes (the `journal` fuzz target holds it to that).
#[cfg(any(fuzzing, test))]
pub(crate) fn parse(bytes: &[u8], seed: u64, ns: &str) -> Result<Vec<ReadSlot>, ParseError> {
    parse_read(bytes, bytes.len() as u64, seed, ns)
}

/// The most of a journal file that is read: its header and the most slots any build
/// makes ([`MAX_JOURNAL_SLOTS`](crate::MAX_JOURNAL_SLOTS)).
const READ_LIMIT: u64 = (HEADER + crate::config::MAX_JOURNAL_SLOTS * SLOT) as u64;

/// As [`parse`], for the first `bytes` (at most [`READ_LIMIT`]) of a file `len`
/// bytes long.
///
/// A journal of this build, database and namespace whose length does not match the
/// slot count in its header, or whose count is more than any build makes, was
/// damaged at rest (the file is made whole before it is renamed into place): either
/// its length or its count is wrong, and which cannot be told. It is read as far as
/// it goes: every whole slot there is (each slot has its own check), and one more
/// entry, fingerprint 0, whose error says what may be lost. The open reports that as
/// a corrupt orphan and keeps the file aside, as it does a journal with a damaged
/// slot.
pub(crate) fn parse_read(
    bytes: &[u8],
    len: u64,
    seed: u64,
    ns: &str,
) -> Result<Vec<ReadSlot>, ParseError> {
    // (Bytes short of what the length promised, a file cut while it was read, are
    // read as the damage they are.)
    let header = parse_header(bytes, len, Some(seed), ns).and_then(|slots| {
        if HEADER + slots * SLOT <= bytes.len() {
            Ok(slots)
        } else {
            Err(ParseError::Length)
        }
    });
    let (slots, short) = match header {
        Ok(slots) => (slots, None),
        Err(ParseError::Length | ParseError::TooLarge) => {
            let declared = u64::from(le32(bytes, 12));
            let whole = bytes.len().min(READ_LIMIT as usize).saturating_sub(HEADER) / SLOT;
            let why = format!(
                "the journal file is {len} bytes, where the {declared} slots its header \
                 declares make {}: its {whole} whole slot(s) were read, and a marker in \
                 a slot past them, if any, is lost",
                HEADER as u64 + declared * SLOT as u64
            );
            (whole, Some(why))
        }
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for s in 0..slots {
        let at = HEADER + s * SLOT;
        let w: [u64; WORDS] = std::array::from_fn(|i| le64(bytes, at + i * 8));
        out.extend(decode(&w));
    }
    out.extend(short.map(|why| (0, Err(why))));
    Ok(out)
}

/// The first bytes of the file at `file` (at most [`READ_LIMIT`]) and its length;
/// `Ok(None)` if it is not a regular file (a FIFO, a directory, a device: never read,
/// see [`open_regular`](super::open_regular)).
#[cfg(feature = "durable")]
pub(crate) fn read_head(file: &Path) -> std::io::Result<Option<(Vec<u8>, u64)>> {
    let Some(mut f) = super::open_regular(file)? else {
        return Ok(None);
    };
    let len = f.metadata()?.len();
    let mut bytes = Vec::new();
    (&mut f).take(READ_LIMIT).read_to_end(&mut bytes)?;
    Ok(Some((bytes, len)))
}

/// The little-endian 32-bit word at `at` (the caller checked the length).
fn le32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Why a journal file was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// Too short for the header, without the magic bytes, or not a regular file.
    NotAJournal,
    /// Written by another journal format version.
    Version(u32),
    /// Written for another database (seed) or another namespace.
    Foreign,
    /// The length does not match the slot count of the header.
    Length,
    /// The header claims more slots than any build makes
    /// ([`MAX_JOURNAL_SLOTS`](crate::MAX_JOURNAL_SLOTS)).
    TooLarge,
}

#[cfg(feature = "durable")]
/// Reads the journal file of `ns` if there is one: `Ok(None)` if there is none.
/// A file that is not a journal of this build, database and namespace (or not a
/// regular file at all) is an [`Error::IncompatibleFormat`], and is left as it is;
/// one damaged in its length or slot count is read as far as it goes
/// ([`parse_read`]).
pub(crate) fn read(dir: &Path, ns: &str, seed: u64) -> Result<Option<Vec<ReadSlot>>, Error> {
    let file = path(dir, ns);
    let (bytes, len) = match read_head(&file) {
        Ok(Some(read)) => read,
        Ok(None) => return Err(refused(file, ParseError::NotAJournal)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read journal", &file, e)),
    };
    parse_read(&bytes, len, seed, ns)
        .map(Some)
        .map_err(|e| refused(file, e))
}

#[cfg(feature = "durable")]
/// Checks, reading only its header, that the journal file of `ns` (if there is one)
/// is one this build can read for that namespace, and for the database whose seed
/// is `seed` when it is given: the open refuses a foreign journal before it changes
/// anything in the database. Something other than a regular file in its place (a
/// FIFO, a directory, a device) is refused the same way, without being read.
pub(crate) fn check_header(dir: &Path, ns: &str, seed: Option<u64>) -> Result<(), Error> {
    let file = path(dir, ns);
    let mut f = match super::open_regular(&file) {
        Ok(Some(f)) => f,
        Ok(None) => return Err(refused(file, ParseError::NotAJournal)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("open journal", &file, e)),
    };
    let len = f
        .metadata()
        .map_err(|e| io_err("read journal", &file, e))?
        .len();
    let mut head = Vec::with_capacity(HEADER);
    (&mut f)
        .take(HEADER as u64)
        .read_to_end(&mut head)
        .map_err(|e| io_err("read journal", &file, e))?;
    match parse_header(&head, len, seed, ns) {
        // Ours, damaged in its length or count: read as far as it goes
        // (`parse_read`).
        Ok(_) | Err(ParseError::Length | ParseError::TooLarge) => Ok(()),
        Err(e) => Err(refused(file, e)),
    }
}

/// The error of a journal file that is not one this build can read here.
#[cfg(feature = "durable")]
fn refused(path: PathBuf, e: ParseError) -> Error {
    Error::IncompatibleFormat {
        path,
        found: match e {
            ParseError::Version(v) => Some(v),
            _ => None,
        },
        supported: JOURNAL_VERSION,
    }
}

#[cfg(feature = "durable")]
/// Removes the journal file of `ns`, if any (and a temporary one left by a creation
/// that did not finish).
pub(crate) fn remove(dir: &Path, ns: &str) -> Result<(), Error> {
    for file in [path(dir, ns), tmp_path(dir, ns)] {
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove journal", &file, e)),
        }
    }
    Ok(())
}

/// Where a journal file is made before it is renamed into place.
#[cfg(feature = "durable")]
fn tmp_path(dir: &Path, ns: &str) -> PathBuf {
    let mut name = path(dir, ns).into_os_string();
    name.push(".new");
    PathBuf::from(name)
}

#[cfg(all(feature = "durable", target_os = "linux"))]
/// A shared, writable mapping of a journal file, seen as 64-bit words.
struct Mapping {
    ptr: std::ptr::NonNull<AtomicU64>,
    words: usize,
}

#[cfg(all(feature = "durable", target_os = "linux"))]
// SAFETY: the mapping is plain shared memory, reached only through `AtomicU64`s,
// which may be used from any thread; it lives until the `Mapping` is dropped.
#[allow(unsafe_code)]
unsafe impl Send for Mapping {}
#[cfg(all(feature = "durable", target_os = "linux"))]
// SAFETY: as above: every access is an atomic load or store.
#[allow(unsafe_code)]
unsafe impl Sync for Mapping {}

#[cfg(all(feature = "durable", target_os = "linux"))]
impl Mapping {
    /// Maps the whole of `file`, `len` bytes long (a multiple of 8).
    fn new(file: &File, len: usize, at: &Path) -> Result<Self, Error> {
        use std::os::fd::AsRawFd;
        #[allow(unsafe_code)]
        // SAFETY: a fresh shared mapping of an open file of `len` bytes; the kernel
        // picks the address. Nothing else in this process maps or truncates the
        // file: the database directory is held by this engine alone (RocksDB's lock).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io_err("map journal", at, std::io::Error::last_os_error()));
        }
        let ptr = std::ptr::NonNull::new(ptr.cast::<AtomicU64>())
            .ok_or_else(|| io_err("map journal", at, std::io::Error::other("null mapping")))?;
        Ok(Mapping {
            ptr,
            words: len / 8,
        })
    }

    fn words(&self) -> &[AtomicU64] {
        #[allow(unsafe_code)]
        // SAFETY: the mapping is `words` u64s long, page-aligned, readable and
        // writable for as long as `self` lives; `AtomicU64` has the layout of `u64`
        // and every byte of a file mapping is initialised.
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.words)
        }
    }
}

#[cfg(all(feature = "durable", target_os = "linux"))]
impl Drop for Mapping {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: unmaps exactly what `new` mapped; no reference from `words` can
        // outlive `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.words * 8);
        }
    }
}

#[cfg(all(feature = "durable", target_os = "linux"))]
/// The journal of one namespace in this run: the mapping, and which slot holds
/// which claim's marker.
pub(crate) struct Journal {
    map: Mapping,
    slots: u32,
    state: parking_lot::Mutex<Slots>,
    /// No marker here has a lease that ended before this time (ms), as far as the
    /// sweep knows ([`Journal::ended`]): the earliest lease end of the markers put
    /// since the last sweep and of those it left; `u64::MAX` for none. Lowered under
    /// `state`'s lock by every fill, and by [`Journal::look_again_at`].
    min_end: AtomicU64,
}

#[cfg(all(feature = "durable", target_os = "linux"))]
impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("slots", &self.slots)
            .finish()
    }
}

#[cfg(all(feature = "durable", target_os = "linux"))]
#[derive(Default)]
struct Slots {
    /// The slot of each fingerprint with a marker here, and the fencing token of the
    /// claim it stands for.
    of: super::store::FpMap<(u32, u32)>,
    /// Free slots, most recently freed last (reused first: their pages are warm).
    free: Vec<u32>,
}

#[cfg(all(feature = "durable", target_os = "linux"))]
impl Journal {
    /// Creates (or replaces) the journal file of `ns`: [`Journal::prepare`], then
    /// [`Prepared::install`].
    #[cfg(test)]
    pub(crate) fn create(dir: &Path, ns: &str, seed: u64, slots: u32) -> Result<Self, Error> {
        Self::prepare(dir, ns, seed, slots)?.install()
    }

    /// Makes the journal file of `ns` with `slots` free slots under its temporary
    /// name, its blocks allocated up front so that a store into the mapping needs
    /// no new space (on file systems that write in place: a copy-on-write one, btrfs
    /// or ZFS, may still need space when a page is written back, and a full disk
    /// there can end the process with SIGBUS). The file is made whole, synced and
    /// mapped, and the old journal is untouched until [`Prepared::install`] renames
    /// the new one over it, so a crash while creating it leaves the old journal or
    /// the new one, never a part of one. The engine's open prepares every
    /// namespace's journal before it replaces any: a disk out of space leaves every
    /// old journal as it was.
    pub(crate) fn prepare(dir: &Path, ns: &str, seed: u64, slots: u32) -> Result<Prepared, Error> {
        let tmp = tmp_path(dir, ns);
        #[cfg(test)]
        if FAIL_NEXT_PREPARE.with(|f| f.replace(false)) {
            return Err(io_err(
                "create journal",
                &tmp,
                std::io::Error::other("injected failure"),
            ));
        }
        let made = Self::create_at(dir, ns, seed, slots, &tmp);
        match made {
            Ok(journal) => Ok(Prepared {
                journal: Some(journal),
                tmp,
                to: path(dir, ns),
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    fn create_at(dir: &Path, ns: &str, seed: u64, slots: u32, tmp: &Path) -> Result<Self, Error> {
        let file_path = path(dir, ns);
        let len = HEADER + slots as usize * SLOT;
        let mut file = super::create_fresh(tmp).map_err(|e| io_err("create journal", tmp, e))?;
        file.write_all(&header(slots, seed, ns))
            .map_err(|e| io_err("create journal", &file_path, e))?;
        {
            use std::os::fd::AsRawFd;
            #[allow(unsafe_code)]
            // SAFETY: a plain system call on an open file descriptor.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
            if rc != 0 {
                return Err(io_err(
                    "allocate journal",
                    &file_path,
                    std::io::Error::from_raw_os_error(rc),
                ));
            }
        }
        file.sync_all()
            .map_err(|e| io_err("sync journal", &file_path, e))?;
        // The mapping follows the file through the rename that installs it.
        let map = Mapping::new(&file, len, &file_path)?;
        Ok(Journal {
            map,
            slots,
            state: parking_lot::Mutex::new(Slots {
                of: Default::default(),
                free: (0..slots).rev().collect(),
            }),
            min_end: AtomicU64::new(u64::MAX),
        })
    }

    fn slot_words(&self, slot: u32) -> &[AtomicU64] {
        let at = (HEADER + slot as usize * SLOT) / 8;
        &self.map.words()[at..at + WORDS]
    }

    fn fill(&self, slot: u32, fp: u128, rec: &Record) {
        let body = encode(fp, rec);
        let w = self.slot_words(slot);
        for (word, v) in w.iter().zip(body) {
            word.store(v.to_le(), Ordering::Relaxed);
        }
        w[WORDS - 1].store(check(&body).to_le(), Ordering::Release);
        self.min_end.fetch_min(rec.expires_ms, Ordering::Relaxed);
    }

    fn clear(&self, slot: u32) {
        self.slot_words(slot)[WORDS - 1].store(0, Ordering::Release);
    }

    /// Writes the markers that find a free slot; returns those that do not (the
    /// journal is full), for the caller to store elsewhere. A key that already has a
    /// marker here (a claim whose lease ran out before it finished, the key since
    /// acquired again) has it replaced, as a put replaces a stored marker.
    pub(crate) fn put(&self, markers: &[(u128, Record)]) -> Vec<(u128, Record)> {
        let mut st = self.state.lock();
        let mut left = Vec::new();
        for (fp, rec) in markers {
            let old = st.of.get(fp).map(|&(s, _)| s);
            match old.or_else(|| st.free.pop()) {
                Some(s) => {
                    if old.is_some() {
                        // Free it first, so a crash mid-refill reads it free, not torn
                        // (the fence keeps the fill's relaxed stores after the clear).
                        self.clear(s);
                        std::sync::atomic::fence(Ordering::Release);
                    }
                    self.fill(s, *fp, rec);
                    st.of.insert(*fp, (s, rec.token));
                }
                None => left.push((*fp, rec.clone())),
            }
        }
        left
    }

    /// Rewrites the marker of claim `marker.token` of `fp` (its lease extended), if
    /// it is here, into a free slot, then clears the old one: at no moment is the
    /// live claim without a whole marker (for a moment it has two, the same but for
    /// the lease's time and end, and the open keeps the later: see
    /// [`latest_markers`]). A slot is never rewritten in place, where a crash in the
    /// middle would leave it torn: with none free, [`Renewal::Full`], for the caller
    /// to write the marker elsewhere before it clears this one.
    pub(crate) fn renew(&self, fp: u128, marker: &Record) -> Renewal {
        let mut st = self.state.lock();
        let Some(&(old, token)) = st.of.get(&fp) else {
            return Renewal::NotHere;
        };
        if token != marker.token {
            return Renewal::NotHere;
        }
        let Some(s) = st.free.pop() else {
            return Renewal::Full;
        };
        self.fill(s, fp, marker);
        // The new slot whole before the old one reads free.
        std::sync::atomic::fence(Ordering::Release);
        self.clear(old);
        st.of.insert(fp, (s, token));
        st.free.push(old);
        Renewal::Done
    }

    /// Whether `fp` has a marker here (of the claim with fencing token `token`, if
    /// given).
    pub(crate) fn holds(&self, fp: u128, token: Option<u32>) -> bool {
        self.state
            .lock()
            .of
            .get(&fp)
            .is_some_and(|&(_, t)| token.is_none_or(|want| want == t))
    }

    /// Clears the marker of `fp` if it has one here (of the claim with fencing token
    /// `token`, if given: a claim that ended never clears the marker of a later
    /// claim of its key); true if it did.
    pub(crate) fn remove(&self, fp: u128, token: Option<u32>) -> bool {
        self.untrack(fp, token, true)
    }

    /// [`Journal::remove`], but the marker stays on disk, its slot taken for the rest
    /// of the run (the testing hook that stands for a crash before a marker is
    /// cleared).
    pub(crate) fn forget(&self, fp: u128, token: Option<u32>) -> bool {
        self.untrack(fp, token, false)
    }

    fn untrack(&self, fp: u128, token: Option<u32>, clear: bool) -> bool {
        let mut st = self.state.lock();
        match st.of.get(&fp) {
            Some(&(s, t)) if token.is_none_or(|want| want == t) => {
                st.of.remove(&fp);
                if clear {
                    self.clear(s);
                    st.free.push(s);
                }
                true
            }
            _ => false,
        }
    }

    /// Markers held here now.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().of.len()
    }

    /// Whether a marker here may have a lease that ended by `now_ms` (one atomic
    /// load: no lock).
    pub(crate) fn may_have_ended(&self, now_ms: u64) -> bool {
        self.min_end.load(Ordering::Relaxed) <= now_ms
    }

    /// The markers here whose lease ended by `now_ms` (the end they carry), as
    /// (fingerprint, fencing token): those of claims given up without an end are
    /// among them, for the engine's sweep to judge one by one and clear with
    /// [`Journal::remove`]. The earliest end of the others is kept, so that
    /// [`Journal::may_have_ended`] says when to look again; the caller reports the
    /// markers it keeps with [`Journal::look_again_at`].
    pub(crate) fn ended(&self, now_ms: u64) -> Vec<(u128, u32)> {
        let st = self.state.lock();
        let mut next = u64::MAX;
        let mut out = Vec::new();
        for (&fp, &(slot, token)) in st.of.iter() {
            let end = u64::from_le(self.slot_words(slot)[3].load(Ordering::Relaxed));
            if end <= now_ms {
                out.push((fp, token));
            } else {
                next = next.min(end);
            }
        }
        self.min_end.store(next, Ordering::Relaxed);
        out
    }

    /// Has [`Journal::may_have_ended`] say yes again from `ms` on: a marker whose
    /// lease ended was kept by the sweep (its claim still holds its key).
    pub(crate) fn look_again_at(&self, ms: u64) {
        self.min_end.fetch_min(ms, Ordering::Relaxed);
    }
}

/// What [`Journal::renew`] did.
#[cfg(feature = "durable")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// The marker is rewritten here.
    Done,
    /// The marker is here, and no slot is free to rewrite it into.
    Full,
    /// No marker of that claim is here.
    NotHere,
}

/// Of markers read at an open, one a fingerprint: where a crash in the middle of a
/// renewal left two of one claim, the later (by claim or renewal time, the
/// namespace's, which does not go back within a run; on a tie, the longer lease).
/// Both are of the journal's own run. Damaged slots are kept as they are.
#[cfg(feature = "durable")]
pub(crate) fn latest_markers(found: Vec<ReadSlot>) -> Vec<ReadSlot> {
    let mut best: std::collections::HashMap<u128, usize> = std::collections::HashMap::new();
    let mut out: Vec<ReadSlot> = Vec::with_capacity(found.len());
    for (fp, rec) in found {
        let Ok(r) = &rec else {
            out.push((fp, rec));
            continue;
        };
        match best.get(&fp) {
            Some(&i) => {
                if let Ok(kept) = &out[i].1 {
                    if (r.at_ms, r.expires_ms) > (kept.at_ms, kept.expires_ms) {
                        out[i] = (fp, rec);
                    }
                }
            }
            None => {
                best.insert(fp, out.len());
                out.push((fp, rec));
            }
        }
    }
    out
}

#[cfg(all(test, feature = "durable", target_os = "linux"))]
std::thread_local! {
    /// The next [`Journal::prepare`] on this thread fails.
    static FAIL_NEXT_PREPARE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes the next journal made at an open (on this thread) fail, as a disk out of
/// space would.
#[cfg(all(test, feature = "durable", target_os = "linux"))]
pub(crate) fn fail_next_prepare() {
    FAIL_NEXT_PREPARE.with(|f| f.set(true));
}

#[cfg(all(feature = "durable", target_os = "linux"))]
/// A journal made whole under its temporary name ([`Journal::prepare`]), not yet in
/// place: dropped without [`Prepared::install`], its file is removed.
#[derive(Debug)]
pub(crate) struct Prepared {
    journal: Option<Journal>,
    tmp: PathBuf,
    to: PathBuf,
}

#[cfg(all(feature = "durable", target_os = "linux"))]
impl Prepared {
    /// Renames the file over the namespace's journal (the old one, if any, goes)
    /// and syncs the directory.
    pub(crate) fn install(mut self) -> Result<Journal, Error> {
        std::fs::rename(&self.tmp, &self.to).map_err(|e| io_err("create journal", &self.to, e))?;
        let journal = self.journal.take();
        if let Some(parent) = self.to.parent() {
            File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_err("sync journal", &self.to, e))?;
        }
        journal.ok_or_else(|| {
            io_err(
                "create journal",
                &self.to,
                std::io::Error::other("installed twice"),
            )
        })
    }
}

#[cfg(all(feature = "durable", target_os = "linux"))]
impl Drop for Prepared {
    fn drop(&mut self) {
        if self.journal.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Without Linux there is no journal: `ClaimMarkers::Journal` writes its markers
/// as `Immediate` does (the type has no values, so the engine never holds one).
#[cfg(all(feature = "durable", not(target_os = "linux")))]
#[derive(Debug)]
pub(crate) enum Journal {}

#[cfg(all(feature = "durable", not(target_os = "linux")))]
impl Journal {
    pub(crate) fn put(&self, _m: &[(u128, Record)]) -> Vec<(u128, Record)> {
        match *self {}
    }

    pub(crate) fn holds(&self, _fp: u128, _token: Option<u32>) -> bool {
        match *self {}
    }

    pub(crate) fn renew(&self, _fp: u128, _marker: &Record) -> Renewal {
        match *self {}
    }

    pub(crate) fn remove(&self, _fp: u128, _token: Option<u32>) -> bool {
        match *self {}
    }

    pub(crate) fn forget(&self, _fp: u128, _token: Option<u32>) -> bool {
        match *self {}
    }

    pub(crate) fn len(&self) -> usize {
        match *self {}
    }

    pub(crate) fn may_have_ended(&self, _now_ms: u64) -> bool {
        match *self {}
    }

    pub(crate) fn ended(&self, _now_ms: u64) -> Vec<(u128, u32)> {
        match *self {}
    }

    pub(crate) fn look_again_at(&self, _ms: u64) {
        match *self {}
    }
}

/// The fuzz target's property: any bytes parse to markers or an error, never a
/// panic; with the header made to match (so the slots are reached), every marker
/// read back encodes to the very words it was read from.
#[cfg(any(fuzzing, test))]
pub(crate) fn fuzz_parse(data: &[u8]) {
    let _ = parse(data, 0, "ns");
    let mut bytes = data.to_vec();
    if bytes.len() < HEADER {
        bytes.resize(HEADER, 0);
    }
    let slots = (bytes.len() - HEADER) / SLOT;
    bytes.truncate(HEADER + slots * SLOT);
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..12].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
    bytes[12..16].copy_from_slice(&(slots as u32).to_le_bytes());
    bytes[16..24].copy_from_slice(&0u64.to_le_bytes());
    bytes[24..32].copy_from_slice(&xxh3_64(b"ns").to_le_bytes());
    // A slot whose first byte is odd gets its right check word (a fuzzer cannot
    // forge one), so that the reader's checks past it are reached too.
    for slot in 0..slots {
        let o = HEADER + slot * SLOT;
        if bytes[o] & 1 == 1 {
            let body: [u64; WORDS - 1] = std::array::from_fn(|i| {
                u64::from_le_bytes(bytes[o + i * 8..o + i * 8 + 8].try_into().unwrap())
            });
            let last = o + (WORDS - 1) * 8;
            bytes[last..last + 8].copy_from_slice(&check(&body).to_le_bytes());
        }
    }
    let read = parse(&bytes, 0, "ns").expect("a matching header parses");
    let mut at = HEADER;
    for (fp, rec) in read {
        // Find the slot this marker came from: the next one with a check word.
        let words = loop {
            let w: [u64; WORDS] = std::array::from_fn(|i| {
                let o = at + i * 8;
                u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap())
            });
            at += SLOT;
            if w[WORDS - 1] != 0 {
                break w;
            }
        };
        assert_eq!(fp, u128::from(words[0]) << 64 | u128::from(words[1]));
        if let Ok(rec) = rec {
            let body = encode(fp, &rec);
            assert_eq!(&body[..], &words[..WORDS - 1]);
            assert_eq!(check(&body), words[WORDS - 1]);
        }
    }
    // Cut short inside its last slot: the slots before it are read as the journal
    // of that many slots reads, and the loss is said last.
    if slots > 0 {
        let cut = &bytes[..bytes.len() - SLOT / 2];
        let got = parse(cut, 0, "ns").expect("a journal cut short is read as far as it goes");
        let (loss, before) = got.split_last().expect("the loss is said");
        assert!(loss.0 == 0 && loss.1.is_err(), "{loss:?}");
        let mut whole = bytes[..bytes.len() - SLOT].to_vec();
        whole[12..16].copy_from_slice(&((slots - 1) as u32).to_le_bytes());
        assert_eq!(
            before,
            &parse(&whole, 0, "ns").expect("a matching header")[..]
        );
    }
}

#[cfg(all(test, feature = "durable", target_os = "linux"))]
mod tests {
    use super::*;

    fn rec(token: u32, payload: Option<u64>) -> Record {
        Record {
            state: RecordState::InProgress,
            token,
            at_ms: 1_000 + u64::from(token),
            expires_ms: 31_000 + u64::from(token),
            payload,
            result: None,
        }
    }

    fn tempdir() -> crate::durable::test_dir::Dir {
        crate::durable::test_dir::tempdir("journal")
    }

    fn file_bytes(dir: &Path, ns: &str) -> Vec<u8> {
        std::fs::read(path(dir, ns)).unwrap()
    }

    #[test]
    fn markers_written_are_read_back_and_cleared_ones_are_not() {
        let dir = tempdir();
        let j = Journal::create(dir.path(), "orders", 7, 4).unwrap();
        let left = j.put(&[(1, rec(1, None)), (2, rec(2, Some(99))), (3, rec(3, None))]);
        assert!(left.is_empty());
        assert!(
            !j.remove(1, Some(9)),
            "another claim's token clears nothing"
        );
        assert!(j.remove(1, Some(1)));
        assert!(!j.remove(1, None), "a cleared marker is gone");
        let mut got = parse(&file_bytes(dir.path(), "orders"), 7, "orders").unwrap();
        got.sort_by_key(|(fp, _)| *fp);
        assert_eq!(got, vec![(2, Ok(rec(2, Some(99)))), (3, Ok(rec(3, None)))]);
        assert_eq!(j.len(), 2);
    }

    #[test]
    fn a_full_journal_hands_back_what_it_could_not_hold_and_reuses_freed_slots() {
        let dir = tempdir();
        let j = Journal::create(dir.path(), "n", 1, 2).unwrap();
        let left = j.put(&[(1, rec(1, None)), (2, rec(2, None)), (3, rec(3, None))]);
        assert_eq!(left, vec![(3, rec(3, None))]);
        assert!(j.remove(2, None));
        assert!(j.put(&[(3, rec(3, None))]).is_empty());
        let got = parse(&file_bytes(dir.path(), "n"), 1, "n").unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.contains(&(3, Ok(rec(3, None)))));
    }

    #[test]
    fn a_second_marker_of_a_key_replaces_the_first() {
        let dir = tempdir();
        let j = Journal::create(dir.path(), "n", 1, 4).unwrap();
        j.put(&[(5, rec(1, None))]);
        j.put(&[(5, rec(2, None))]);
        let got = parse(&file_bytes(dir.path(), "n"), 1, "n").unwrap();
        assert_eq!(got, vec![(5, Ok(rec(2, None)))]);
        assert_eq!(j.len(), 1);
    }

    /// A renewal (an extended lease) writes its claim's marker into a free slot
    /// before it clears the old one, so that the file never holds the claim without
    /// a whole marker; with no slot free it rewrites nothing (the caller writes the
    /// marker elsewhere). It renews only the marker of its own claim.
    #[test]
    fn a_renewed_marker_goes_to_a_free_slot_first_and_never_in_place() {
        let dir = tempdir();
        let j = Journal::create(dir.path(), "n", 1, 2).unwrap();
        j.put(&[(5, rec(1, None))]);
        let longer = Record {
            expires_ms: 99_000,
            ..rec(1, None)
        };
        let other = Record {
            token: 2,
            ..longer.clone()
        };
        assert_eq!(
            j.renew(5, &other),
            Renewal::NotHere,
            "another claim's marker"
        );
        assert_eq!(
            j.renew(6, &longer),
            Renewal::NotHere,
            "no marker of the key"
        );
        let slot = |j: &Journal| j.state.lock().of[&5].0;
        let before = slot(&j);
        assert_eq!(j.renew(5, &longer), Renewal::Done);
        let after = slot(&j);
        assert_ne!(before, after, "into the free slot");
        let got = parse(&file_bytes(dir.path(), "n"), 1, "n").unwrap();
        assert_eq!(got, vec![(5, Ok(longer.clone()))]);
        // The old slot is free again; with both taken, nothing is rewritten in place.
        assert!(j.put(&[(7, rec(3, None))]).is_empty());
        let longest = Record {
            expires_ms: 123_000,
            ..rec(1, None)
        };
        assert_eq!(j.renew(5, &longest), Renewal::Full);
        let mut got = parse(&file_bytes(dir.path(), "n"), 1, "n").unwrap();
        got.sort_by_key(|(fp, _)| *fp);
        assert_eq!(got, vec![(5, Ok(longer)), (7, Ok(rec(3, None)))]);
        assert_eq!(j.len(), 2);
    }

    /// Two markers of one claim, as a crash in the middle of a renewal leaves them:
    /// the open keeps the later one (by time, then by the lease's end), in the first
    /// one's place; damaged slots and other keys are kept as they are.
    #[test]
    fn of_two_markers_of_one_key_the_open_keeps_the_later() {
        let dir = tempdir();
        let j = Journal::create(dir.path(), "n", 1, 4).unwrap();
        let renewed = Record {
            at_ms: 5_000,
            expires_ms: 99_000,
            ..rec(1, None)
        };
        j.fill(0, 5, &rec(1, None));
        j.fill(1, 7, &rec(2, None));
        j.fill(2, 5, &renewed);
        let got = parse(&file_bytes(dir.path(), "n"), 1, "n").unwrap();
        assert_eq!(got.len(), 3);
        let kept = latest_markers(got);
        assert_eq!(kept, vec![(5, Ok(renewed.clone())), (7, Ok(rec(2, None)))]);
        // The same, read the other way round; a damaged slot stays.
        let reversed = vec![
            (5, Ok(renewed.clone())),
            (9, Err("damaged".to_owned())),
            (5, Ok(rec(1, None))),
        ];
        assert_eq!(
            latest_markers(reversed),
            vec![(5, Ok(renewed)), (9, Err("damaged".to_owned()))]
        );
    }

    /// Two markers of one claim written in the same millisecond (a lease extended
    /// twice within it, or on a clock standing still) cannot be told apart by time:
    /// the open keeps the longer lease, whichever slot it was read from. Time still
    /// decides first: a later renewal that moved the end earlier is kept.
    #[test]
    fn of_two_markers_of_one_key_at_one_time_the_open_keeps_the_longer_lease() {
        let at = |at_ms, expires_ms| Record {
            at_ms,
            expires_ms,
            ..rec(1, None)
        };
        let (shorter, longer) = (at(5_000, 60_000), at(5_000, 90_000));
        for found in [
            vec![(5, Ok(shorter.clone())), (5, Ok(longer.clone()))],
            vec![(5, Ok(longer.clone())), (5, Ok(shorter.clone()))],
        ] {
            assert_eq!(
                latest_markers(found.clone()),
                vec![(5, Ok(longer.clone()))],
                "{found:?}"
            );
        }
        let shortened = at(6_000, 30_000);
        for found in [
            vec![(5, Ok(longer.clone())), (5, Ok(shortened.clone()))],
            vec![(5, Ok(shortened.clone())), (5, Ok(longer.clone()))],
        ] {
            assert_eq!(
                latest_markers(found.clone()),
                vec![(5, Ok(shortened.clone()))],
                "{found:?}"
            );
        }
    }

    #[test]
    fn a_damaged_slot_is_reported_and_a_half_written_one_reads_free() {
        let dir = tempdir();
        let j = Journal::create(dir.path(), "n", 1, 3).unwrap();
        j.put(&[(1, rec(1, None)), (2, rec(2, None))]);
        let mut bytes = file_bytes(dir.path(), "n");
        // Slot 0 holds fingerprint 1: flip a bit of its claim time.
        bytes[HEADER + 16] ^= 1;
        // Slot 2 was never filled: words without a check, as a fill cut short leaves it.
        bytes[HEADER + 2 * SLOT..HEADER + 2 * SLOT + 8].copy_from_slice(&9u64.to_le_bytes());
        let got = parse(&bytes, 1, "n").unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.contains(&(2, Ok(rec(2, None)))));
        assert!(got.iter().any(|(fp, r)| *fp == 1 && r.is_err()));
    }

    #[test]
    fn a_file_of_another_version_database_or_namespace_is_refused() {
        let dir = tempdir();
        drop(Journal::create(dir.path(), "n", 1, 2).unwrap());
        let bytes = file_bytes(dir.path(), "n");
        assert_eq!(parse(&bytes, 2, "n"), Err(ParseError::Foreign));
        assert_eq!(parse(&bytes, 1, "m"), Err(ParseError::Foreign));
        assert_eq!(parse(&bytes[..10], 1, "n"), Err(ParseError::NotAJournal));
        let mut v2 = bytes.clone();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(parse(&v2, 1, "n"), Err(ParseError::Version(2)));
        std::fs::write(path(dir.path(), "n"), &v2).unwrap();
        match read(dir.path(), "n", 1) {
            Err(Error::IncompatibleFormat {
                found, supported, ..
            }) => {
                assert_eq!((found, supported), (Some(2), JOURNAL_VERSION));
            }
            other => panic!("expected IncompatibleFormat, got {other:?}"),
        }
        assert_eq!(
            file_bytes(dir.path(), "n"),
            v2,
            "a refused file is left as it is"
        );
        assert!(read(dir.path(), "absent", 1).unwrap().is_none());
        // The errors name the journal, not a database directory.
        let e = read(dir.path(), "n", 1).unwrap_err().to_string();
        assert!(
            e.contains("claim-marker journal") && e.contains("version 2"),
            "{e}"
        );
        let mut foreign = bytes.clone();
        foreign[24] ^= 1;
        std::fs::write(path(dir.path(), "n"), &foreign).unwrap();
        let e = read(dir.path(), "n", 1).unwrap_err().to_string();
        assert!(e.contains("is not a claim-marker journal"), "{e}");
    }

    /// A journal of this database and namespace damaged in its length is read as far
    /// as it goes, and says what was lost; its header is not refused either.
    #[test]
    fn a_journal_cut_short_or_lengthened_is_read_as_far_as_it_goes() {
        let dir = tempdir();
        let j = Journal::create(dir.path(), "n", 1, 3).unwrap();
        j.put(&[(1, rec(1, None))]);
        let bytes = file_bytes(dir.path(), "n");
        let at = bytes[HEADER..]
            .chunks(SLOT)
            .position(|s| s.iter().any(|&b| b != 0))
            .expect("the marker's slot");
        let lost = |got: &[ReadSlot]| {
            got.iter()
                .filter(|(fp, r)| *fp == 0 && r.is_err())
                .map(|(_, r)| r.clone().unwrap_err())
                .collect::<Vec<_>>()
        };
        // Cut inside the last slot: the whole slots before it are read.
        let cut = &bytes[..bytes.len() - 1];
        let got = parse(cut, 1, "n").unwrap();
        assert_eq!(got.contains(&(1, Ok(rec(1, None)))), at < 2, "{got:?}");
        let why = lost(&got);
        assert_eq!(why.len(), 1, "{got:?}");
        assert!(
            why[0].contains("its 2 whole slot(s) were read"),
            "{}",
            why[0]
        );
        // Lengthened: its slots are read, and the mismatch said.
        let mut long = bytes.clone();
        long.extend_from_slice(&[7; 10]);
        let got = parse(&long, 1, "n").unwrap();
        assert!(got.contains(&(1, Ok(rec(1, None)))));
        let why = &lost(&got)[0];
        assert!(
            why.contains("is 266 bytes") && why.contains("its 3 whole slot(s) were read"),
            "{why}"
        );
        // Only the header, or cut inside it after the bytes that say whose journal
        // it is: every slot lost, nothing read.
        for len in [HEADER, HEADER - 1, IDENTITY] {
            let got = parse(&bytes[..len], 1, "n").unwrap();
            assert_eq!(got.len(), 1, "{len}");
            assert!(
                lost(&got)[0].contains("its 0 whole slot(s) were read"),
                "{len}"
            );
        }
        // Cut before them: not a journal.
        assert_eq!(
            parse(&bytes[..IDENTITY - 1], 1, "n"),
            Err(ParseError::NotAJournal)
        );
        // The open's first look at the header lets it through.
        std::fs::write(path(dir.path(), "n"), cut).unwrap();
        check_header(dir.path(), "n", Some(1)).unwrap();
        assert_eq!(
            read(dir.path(), "n", 1).unwrap().unwrap(),
            parse(cut, 1, "n").unwrap()
        );
    }

    #[test]
    fn the_fuzz_targets_checks_hold_on_some_inputs() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in [0, 10, 64, 100, 128, 200, 300, 700, 4096] {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            fuzz_parse(&data);
        }
    }

    #[test]
    fn a_header_claiming_more_slots_than_any_build_makes_is_read_as_damaged() {
        let dir = tempdir();
        let j = Journal::create(dir.path(), "n", 1, 3).unwrap();
        j.put(&[(1, rec(1, None))]);
        let mut bytes = file_bytes(dir.path(), "n");
        // The most a build makes is read as it is.
        let most = crate::config::MAX_JOURNAL_SLOTS;
        bytes[12..16].copy_from_slice(&(most as u32).to_le_bytes());
        assert_eq!(
            parse_header(&bytes, (HEADER + most * SLOT) as u64, Some(1), "n"),
            Ok(most)
        );
        let slots = crate::config::MAX_JOURNAL_SLOTS + 1;
        bytes[12..16].copy_from_slice(&(slots as u32).to_le_bytes());
        assert_eq!(
            parse_header(&bytes, (HEADER + slots * SLOT) as u64, Some(1), "n"),
            Err(ParseError::TooLarge)
        );
        // Its count is damage: the slots the file holds are read, and the loss said.
        std::fs::write(path(dir.path(), "n"), &bytes).unwrap();
        check_header(dir.path(), "n", Some(1)).unwrap();
        let got = read(dir.path(), "n", 1).unwrap().unwrap();
        assert!(got.contains(&(1, Ok(rec(1, None)))), "{got:?}");
        assert!(got.iter().any(|(fp, r)| *fp == 0
            && r.as_ref()
                .is_err_and(|e| e.contains("its 3 whole slot(s) were read"))));
        // The file's length is given apart from the bytes read (`read_head` reads
        // no more than `READ_LIMIT`): a file far longer than its bytes read parses
        // from those.
        let huge = READ_LIMIT * 4;
        let got = parse_read(&bytes, huge, 1, "n").unwrap();
        assert!(got.contains(&(1, Ok(rec(1, None)))));
        // Bytes short of the length given (a file cut while it was read) are read
        // as damage, not past their end.
        let mut whole = bytes.clone();
        whole[12..16].copy_from_slice(&3u32.to_le_bytes());
        let got = parse_read(&whole[..HEADER + SLOT + 5], whole.len() as u64, 1, "n").unwrap();
        assert!(
            got.last().is_some_and(|(fp, r)| *fp == 0 && r.is_err()),
            "{got:?}"
        );
        // Of another database, the count is never looked at.
        assert_eq!(parse(&bytes, 2, "n"), Err(ParseError::Foreign));
    }
}
