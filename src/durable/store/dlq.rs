//! The dead-letter store of each namespace, in the column family `dlq:<namespace>`.
//!
//! ```text
//! key                         value
//! "m" + id (u64, big-endian)  an encoded dead letter (crate::dlq::codec)
//! "next"                      the next id to hand out (u64, little-endian)
//! ```
//!
//! Ids are big-endian so that a scan returns messages in quarantine order. The
//! counter is written in the same atomic write as the message that takes an id.

use rocksdb::{DBRawIterator, ReadOptions, WriteBatch, WriteOptions};

use super::{store_err, Store};
use crate::error::Error;

const NEXT_KEY: &[u8] = b"next";
const MESSAGE_TAG: u8 = b'm';

/// The column family of namespace `ns`'s dead letters.
pub(super) fn cf_name(ns: &str) -> String {
    format!("dlq:{ns}")
}

/// The store key of dead letter `id`.
pub(crate) fn message_key(id: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = MESSAGE_TAG;
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

impl Store {
    /// The next dead-letter id of `ns` (1 for a namespace that never quarantined).
    pub(crate) fn dlq_next_id(&self, ns: &str) -> Result<u64, Error> {
        let cf = self.cf(&cf_name(ns))?;
        let v = self
            .db
            .get_cf(cf, NEXT_KEY)
            .map_err(|e| store_err("read dead letters", e))?;
        match v {
            None => Ok(1),
            Some(b) => <[u8; 8]>::try_from(b.as_slice())
                .map(u64::from_le_bytes)
                .map_err(|_| Error::CorruptDeadLetter {
                    namespace: ns.to_owned(),
                    id: None,
                    reason: "the id counter is not 8 bytes".to_owned(),
                }),
        }
    }

    /// `read` of the stored bytes of dead letter `id`, if there is one: the bytes are
    /// read in place (pinned in RocksDB), never copied.
    pub(crate) fn dlq_read<R>(
        &self,
        ns: &str,
        id: u64,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, Error> {
        let cf = self.cf(&cf_name(ns))?;
        let v = self
            .db
            .get_pinned_cf(cf, message_key(id))
            .map_err(|e| store_err("read dead letter", e))?;
        Ok(v.map(|v| read(&v)))
    }

    /// Calls `letter` with every dead letter of `ns` (id, stored bytes), by ascending
    /// id, and returns how many of the family's keys are damaged ([`scan_letters`]).
    /// Those are left where they are and counted, so that one damaged key does not
    /// hide every letter. One letter's bytes at a time, read in place and never
    /// copied: the scan holds no payload.
    pub(crate) fn dlq_scan(
        &self,
        ns: &str,
        letter: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<u64, Error> {
        let cf = self.cf(&cf_name(ns))?;
        scan_letters(ns, self.db.raw_iterator_cf_opt(cf, scan_options()), letter)
    }

    /// Stores dead letter `id`; with `next`, also the id counter, in the same write.
    /// `Ok(Some(e))`: a synced write applied, but another fsync of the log failed
    /// after it began ([`Store::unsynced_since`]), so it may not be on the disk.
    pub(crate) fn dlq_put(
        &self,
        ns: &str,
        id: u64,
        bytes: &[u8],
        next: Option<u64>,
        sync: bool,
    ) -> Result<Option<Error>, Error> {
        self.check_writable()?;
        let since = self.sync_failures();
        let cf = self.cf(&cf_name(ns))?;
        let mut batch = WriteBatch::default();
        batch.put_cf(cf, message_key(id), bytes);
        if let Some(n) = next {
            batch.put_cf(cf, NEXT_KEY, n.to_le_bytes());
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        // The testing hook fails RocksDB's own sync as RocksDB reports one: the write
        // is refused, its batch not applied.
        let written = match sync {
            true => self.check_syncable(),
            false => Ok(()),
        }
        .and_then(|()| {
            self.db
                .write_opt(batch, &wo)
                .map_err(|e| store_err("write dead letter", e))
        });
        if let Err(e) = written {
            if sync {
                // Its fsync may have failed over writes of the log made before it
                // (other namespaces' completions, unsynced), as a group's would:
                // every later sync asked for says so ([`Store::sync_on_request`]).
                self.note_sync_failure();
            }
            return Err(e);
        }
        #[cfg(test)]
        super::after_dlq_put();
        Ok(sync.then(|| self.unsynced_since(since)).flatten())
    }
}

/// The read options of a scan of the letters: a scan that reads every letter once
/// (a store's open) does not fill the block cache with them.
pub(crate) fn scan_options() -> ReadOptions {
    let mut o = ReadOptions::default();
    o.fill_cache(false);
    o
}

/// Calls `letter` with each dead letter of namespace `ns` (id, stored bytes, read in
/// place) from a raw iterator over its family, by ascending id, and returns the count
/// of the family's damaged keys (each logged): those of the letters' prefix that are
/// not 9 bytes long, the id counter if its value is not 8 bytes, and every other key.
/// The family holds nothing else, so any other key is damage too: a letter's key
/// whose tag byte was damaged sorts outside the letters (before them or past the
/// counter), and counted, the loss of that letter is reported rather than silent.
pub(crate) fn scan_letters(
    ns: &str,
    mut it: DBRawIterator<'_>,
    letter: &mut dyn FnMut(u64, &[u8]),
) -> Result<u64, Error> {
    let mut damaged = 0;
    it.seek_to_first();
    while let (Some(k), Some(v)) = (it.key(), it.value()) {
        match k.split_first() {
            Some((&MESSAGE_TAG, id)) => match <[u8; 8]>::try_from(id) {
                Ok(id) => letter(u64::from_be_bytes(id), v),
                Err(_) => {
                    tracing::warn!(
                        namespace = %ns,
                        key_len = k.len(),
                        "a dead-letter key of the wrong length is left in place and counted as corrupt"
                    );
                    damaged += 1;
                }
            },
            // A damaged counter is counted here too (for the engine, which reads it
            // as 1, and for a read-only open alike).
            _ if k == NEXT_KEY => {
                if v.len() != 8 {
                    tracing::warn!(namespace = %ns, "the dead-letter id counter is damaged");
                    damaged += 1;
                }
            }
            _ => {
                tracing::warn!(
                    namespace = %ns,
                    key_len = k.len(),
                    "a key of the dead-letter store that is neither a letter's nor the id counter is left in place and counted as corrupt"
                );
                damaged += 1;
            }
        }
        it.next();
    }
    // An iterator that stopped on an error is not at the end of the letters.
    it.status().map_err(|e| store_err("scan dead letters", e))?;
    Ok(damaged)
}
