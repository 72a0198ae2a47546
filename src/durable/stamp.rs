//! The database's stamp: a 40-byte file beside the database, `idem-format.bin`,
//! holding the format version and the fingerprint seed that RocksDB's own metadata
//! holds, and a hash of RocksDB's `IDENTITY` file (made when the database was
//! created), so that a stamp left beside other database files is not believed. The open reads it before it opens anything, so a database of another
//! version or seed is refused with nothing written, without a read-only open of
//! RocksDB first (which replays the whole write-ahead log: 2.8 s after a crash of a
//! 10 M-key fill). Without a stamp whole and of this layout, or with one that would
//! refuse the database (a stale stamp must not refuse a good database for good), the
//! open falls back to that read-only look, and writes the stamp once the database is
//! known to be ours. A stamp that accepts is believed: whatever changes the metadata
//! it vouches for (a later format's upgrade) removes the stamp first and writes it
//! last. This build writes that metadata only when it creates a database.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, StoreError};

const MAGIC: &[u8; 8] = b"IDEMSTMP";
const LEN: usize = 40;
/// The longest `IDENTITY` file read: RocksDB writes a 36-character UUID there. A
/// longer one is not hashed, and counts as unreadable.
const IDENTITY_LIMIT: u64 = 4096;

/// The stamp file of the database in `dir`.
pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join("idem-format.bin")
}

/// What a stamp says of its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// The database's format version.
    pub(crate) format: u32,
    /// Its fingerprint seed.
    pub(crate) seed: u64,
    /// The xxh3-64 of the database's `IDENTITY` file.
    pub(crate) identity: u64,
}

impl Stamp {
    fn encode(self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&self.format.to_le_bytes());
        b[16..24].copy_from_slice(&self.seed.to_le_bytes());
        b[24..32].copy_from_slice(&self.identity.to_le_bytes());
        let check = xxh3_64(&b[..32]);
        b[32..].copy_from_slice(&check.to_le_bytes());
        b
    }

    /// The stamp in `bytes`, or `None` if they are not a whole one.
    fn decode(bytes: &[u8]) -> Option<Stamp> {
        let b: &[u8; LEN] = bytes.try_into().ok()?;
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        if &b[..8] != MAGIC || word(32) != xxh3_64(&b[..32]) {
            return None;
        }
        Some(Stamp {
            format: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            seed: word(16),
            identity: word(24),
        })
    }
}

/// The stamp of the database in `dir`: `None` if there is none, it is not whole, or
/// it was made for another database than the one whose files are there now (its
/// `IDENTITY` differs): the open then looks at RocksDB's own metadata instead. A
/// stamp or `IDENTITY` that is not a regular file (a FIFO, a directory, a device),
/// or longer than it can be, is not read, and counts as none.
pub(crate) fn read(dir: &Path) -> Option<Stamp> {
    let stamp = Stamp::decode(&super::read_bounded(&path(dir), LEN as u64).ok()?)?;
    (identity(dir) == Some(stamp.identity)).then_some(stamp)
}

/// The xxh3-64 of the `IDENTITY` file of the database in `dir`, which RocksDB writes
/// when it creates the database; `None` if it cannot be read, is not a regular file
/// or is longer than [`IDENTITY_LIMIT`].
pub(crate) fn identity(dir: &Path) -> Option<u64> {
    super::read_bounded(&dir.join("IDENTITY"), IDENTITY_LIMIT)
        .ok()
        .map(|b| xxh3_64(&b))
}

/// Writes the stamp of the database in `dir`: made whole under a temporary name
/// (created anew: [`super::create_fresh`]), synced, renamed into place, the
/// directory synced.
pub(crate) fn write(dir: &Path, stamp: Stamp) -> Result<(), Error> {
    let to = path(dir);
    let tmp = to.with_extension("tmp");
    let io = |e: std::io::Error| {
        let _ = std::fs::remove_file(&tmp);
        Error::Store(StoreError::new(
            "write stamp",
            format!("{}: {e}", to.display()),
        ))
    };
    let mut f = super::create_fresh(&tmp).map_err(io)?;
    f.write_all(&stamp.encode()).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, &to).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_reads_back_and_a_damaged_one_reads_as_none() {
        let dir = crate::durable::test_dir::tempdir("stamp");
        assert_eq!(read(dir.path()), None);
        std::fs::write(dir.path().join("IDENTITY"), "one database").unwrap();
        let s = Stamp {
            format: 7,
            seed: 0x0123_4567_89ab_cdef,
            identity: identity(dir.path()).unwrap(),
        };
        write(dir.path(), s).unwrap();
        assert_eq!(read(dir.path()), Some(s));
        // Beside another database's files, the stamp is not believed.
        std::fs::write(dir.path().join("IDENTITY"), "another database").unwrap();
        assert_eq!(read(dir.path()), None);
        std::fs::write(dir.path().join("IDENTITY"), "one database").unwrap();
        let good = std::fs::read(path(dir.path())).unwrap();
        for at in [0, 9, 17, 26, 38] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            std::fs::write(path(dir.path()), &bad).unwrap();
            assert_eq!(read(dir.path()), None, "byte {at} flipped");
        }
        std::fs::write(path(dir.path()), &good[..LEN - 1]).unwrap();
        assert_eq!(read(dir.path()), None, "short");
    }
}
