//! The crate's error type.

use std::fmt;

/// Why a key was refused before anything was looked up or changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The key has no bytes.
    Empty,
    /// The key is longer than the namespace's `max_key_len`.
    TooLong {
        /// The key's length in bytes.
        len: usize,
        /// The namespace's limit.
        max: usize,
    },
}

impl KeyError {
    /// Checks `key` against a namespace's rules: not empty, at most `max` bytes.
    #[inline]
    pub(crate) fn check(key: &[u8], max: usize) -> Result<(), KeyError> {
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > max {
            return Err(KeyError::TooLong {
                len: key.len(),
                max,
            });
        }
        Ok(())
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => f.write_str("the key is empty"),
            KeyError::TooLong { len, max } => {
                write!(f, "the key is {len} bytes long, over the limit of {max}")
            }
        }
    }
}

/// A failure of the durable tier's storage (RocksDB or the disk under it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    operation: &'static str,
    detail: String,
}

impl StoreError {
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(crate) fn new(operation: &'static str, detail: String) -> Self {
        StoreError { operation, detail }
    }

    /// What the engine was doing: "read", "write completion", "open", ...
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The storage engine's own description of the failure.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "durable store failed during {}: {}",
            self.operation, self.detail
        )
    }
}

impl std::error::Error for StoreError {}

/// Everything that can go wrong in idem. Each variant says what happened. An operation
/// that returns an error changed nothing a caller could tell from the keys' answers,
/// with these exceptions:
/// - a completion whose write succeeded and whose sync of the write-ahead log then
///   failed (a grouped fsync under `SyncPolicy::Always`, or the sync a `Periodic`
///   completion makes itself once its engine was dropped) returns [`Error::Store`]
///   with its record, and any co-committed state changes, applied and readable (see
///   [`ClaimGuard::complete_with`](crate::ClaimGuard::complete_with)); so does a
///   claim (or batch) whose sliding window's record rewrite was applied and whose
///   sync then failed: the window is extended in both tiers;
/// - a dead letter's write that landed and whose sync then failed returns
///   [`Error::Store`] with the write made: a [`Dlq::quarantine`](crate::Dlq::quarantine)'s
///   letter is stored, under the id the call took; a
///   [`Dlq::archive`](crate::Dlq::archive) or [`Dlq::review`](crate::Dlq::review)
///   moved the message; a [`Dlq::replay`](crate::Dlq::replay) recorded the message at
///   hand as replayed, archived, already done or back in quarantine (see each
///   method);
/// - a [`Namespace::forget`](crate::Namespace::forget) whose delete was applied
///   returns [`Error::Store`] with the key forgotten in both tiers all the same when
///   the sync after it failed, or when a second delete of the same forget (for a
///   claim of the key acquired while it ran) was refused;
/// - a completion whose durable write the store refused under `FailClosed` gives its
///   claim up, as a release does (its marker goes, and a redelivery acquires the key
///   and retries): the guard is spent whatever the error;
/// - a failed [`Namespace::claim_batch`](crate::Namespace::claim_batch) keeps the
///   sliding windows it extended before it failed (they only extend what the keys
///   had), and [`Namespace::complete_batch`](crate::Namespace::complete_batch) settles
///   guards of other namespaces on their own (see each method).
///
/// Housekeeping on the way to a refusal is not undone: keys found expired are
/// reclaimed, a full durable namespace drops done keys from its hot tier (they stay
/// durable), and [`Stats`](crate::Stats) counts what was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `complete`, `release` or `extend_lease` was called on a claim whose lease had
    /// run out, or whose key was re-claimed or forgotten since: the caller no longer
    /// holds the key, and its result (or extension) was not recorded.
    LeaseLost,
    /// The key was seen before with a different payload fingerprint (key reuse).
    PayloadMismatch,
    /// The namespace already holds `max_keys` unexpired keys and, with no durable tier,
    /// evicts none of them.
    CapacityExceeded {
        /// The namespace that is full.
        namespace: String,
        /// Its configured bound.
        max_keys: usize,
    },
    /// The key was refused (empty, or over the namespace's limit).
    InvalidKey(KeyError),
    /// A result passed to `complete_with_result` is larger than the namespace accepts.
    ResultTooLarge {
        /// The result's length in bytes.
        len: usize,
        /// The namespace's limit.
        max: usize,
    },
    /// A co-committed state change's key and value together are longer than
    /// [`MAX_STATE_LEN`](crate::MAX_STATE_LEN) (see [`StateChanges::put`](crate::StateChanges::put)).
    StateTooLarge {
        /// The largest such change (key and value together), in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// No namespace of that name was configured.
    UnknownNamespace(String),
    /// The same namespace name was configured twice.
    DuplicateNamespace(String),
    /// The durable tier failed; with the namespace's `FailClosed` policy nothing was
    /// decided or changed, except where a write was applied before the failure (a
    /// completion's or a forget's failed sync, a forget's second delete refused: see
    /// the type's docs).
    Store(StoreError),
    /// The database directory is already open, by this process or another.
    AlreadyOpen {
        /// The directory.
        path: std::path::PathBuf,
    },
    /// The directory holds a database this build cannot read (another format
    /// version, or not an idem database).
    IncompatibleFormat {
        /// The directory.
        path: std::path::PathBuf,
        /// The format version found, if any.
        found: Option<u32>,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// A stored record could not be decoded. The engine keeps serving other keys.
    CorruptRecord {
        /// The namespace.
        namespace: String,
        /// The key's 128-bit fingerprint.
        fingerprint: u128,
        /// What is wrong with it.
        reason: String,
    },
    /// A co-commit named a state family that was not declared with
    /// `EngineBuilder::state_family`.
    UnknownStateFamily(String),
    /// The operation needs the durable tier and the engine is memory-only.
    NotDurable,
    /// No dead letter has that id in the namespace's dead-letter store.
    UnknownMessage {
        /// The namespace.
        namespace: String,
        /// The id asked for.
        id: crate::dlq::MessageId,
    },
    /// A dead letter cannot go from its current state to the one asked for (archiving
    /// a replayed message, replaying an archived one, ...). Nothing changed.
    InvalidTransition {
        /// The message.
        id: crate::dlq::MessageId,
        /// Its current state.
        from: crate::dlq::MessageState,
        /// The state asked for.
        to: crate::dlq::MessageState,
    },
    /// A payload offered to the dead-letter store is larger than it keeps.
    PayloadTooLarge {
        /// The payload's length in bytes.
        len: usize,
        /// The limit, [`MAX_DEAD_LETTER_PAYLOAD`](crate::MAX_DEAD_LETTER_PAYLOAD).
        max: usize,
    },
    /// A reason, note or actor name given to the dead-letter store was refused (empty,
    /// not starting with a classification, or too long).
    InvalidReason(&'static str),
    /// A stored dead letter could not be decoded. Other messages are still served.
    CorruptDeadLetter {
        /// The namespace.
        namespace: String,
        /// The message, when the damage is in a message rather than in the store's
        /// own bookkeeping.
        id: Option<crate::dlq::MessageId>,
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration value is out of range.
    InvalidConfig {
        /// The namespace concerned, or empty for an engine-wide setting.
        namespace: String,
        /// The setting and what is wrong with it.
        reason: &'static str,
    },
    /// A lease passed to [`ClaimGuard::extend_lease`](crate::ClaimGuard::extend_lease)
    /// is out of range: zero, or past the 2^30 ticks a deadline can lie ahead.
    /// The claim is unchanged.
    InvalidLease(&'static str),
    /// Memory that the configuration takes up front could not be allocated (a
    /// preallocated index or slab, or a prefilter's filter, larger than the allocator
    /// grants), or the namespaces' preallocated indexes and slabs together would
    /// take more than the memory the process may use
    /// ([`MemoryLimit`](crate::MemoryLimit)). Nothing was started and no directory
    /// was opened.
    OutOfMemory {
        /// The namespace concerned.
        namespace: String,
        /// What could not be allocated.
        what: &'static str,
    },
    /// The system would not start one of the engine's background threads
    /// (`idem-maintenance`, or `idem-wal-sync` for a periodic sync). Nothing is left
    /// running: a thread already started is stopped, and the durable directory, if
    /// one was opened, is closed again. A database the open created is removed
    /// again (the directory is left as it was found). In a database that was there
    /// before, the open may have moved claim markers from the journals into the
    /// store, as any open does (the namespaces' settings are written only after the
    /// threads start); what it deletes once it has reported it (the markers of
    /// expired orphans, damaged journals) stays, so the next open reports every
    /// orphan this one would have.
    ThreadRefused {
        /// The thread's name.
        thread: &'static str,
        /// The system's answer.
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::LeaseLost => f.write_str(
                "the claim's lease was lost (expired, re-claimed or forgotten); nothing was recorded",
            ),
            Error::PayloadMismatch => {
                f.write_str("the key was seen before with a different payload")
            }
            Error::CapacityExceeded {
                namespace,
                max_keys,
            } => write!(
                f,
                "namespace {namespace:?} is full: it holds its limit of {max_keys} unexpired keys"
            ),
            Error::InvalidKey(e) => write!(f, "invalid key: {e}"),
            Error::ResultTooLarge { len, max } => {
                write!(f, "the result is {len} bytes long, over the limit of {max}")
            }
            Error::StateTooLarge { len, max } => write!(
                f,
                "a state change is {len} bytes long, over the limit of {max}"
            ),
            Error::UnknownNamespace(name) => write!(f, "no namespace named {name:?}"),
            Error::DuplicateNamespace(name) => {
                write!(f, "namespace {name:?} is configured twice")
            }
            Error::Store(e) => e.fmt(f),
            Error::AlreadyOpen { path } => write!(
                f,
                "the database at {} is already open (by this process or another)",
                path.display()
            ),
            // A claim-marker journal beside the database (`idem-journal-*.bin`).
            Error::IncompatibleFormat {
                path,
                found,
                supported,
            } if is_journal_file(path) => match found {
                Some(v) => write!(
                    f,
                    "the claim-marker journal {} has format version {v}; this build reads \
                     version {supported}",
                    path.display()
                ),
                None => write!(
                    f,
                    "the file {} is not a claim-marker journal this build can read for this \
                     database and namespace (its header, seed or namespace does not \
                     match)",
                    path.display()
                ),
            },
            Error::IncompatibleFormat {
                path,
                found: Some(v),
                supported,
            } => write!(
                f,
                "the database at {} has format version {v}; this build reads version {supported}",
                path.display()
            ),
            Error::IncompatibleFormat { path, .. } => write!(
                f,
                "the directory {} holds no idem database this build can read",
                path.display()
            ),
            Error::CorruptRecord {
                namespace,
                fingerprint,
                reason,
            } => write!(
                f,
                "corrupt record in namespace {namespace:?} for fingerprint {fingerprint:032x}: {reason}"
            ),
            Error::UnknownStateFamily(name) => {
                write!(f, "no state family named {name:?} was declared")
            }
            Error::NotDurable => f.write_str("the engine has no durable tier"),
            Error::UnknownMessage { namespace, id } => {
                write!(f, "no dead letter {id} in namespace {namespace:?}")
            }
            Error::InvalidTransition { id, from, to } => {
                write!(f, "dead letter {id} cannot go from {from} to {to}")
            }
            Error::PayloadTooLarge { len, max } => write!(
                f,
                "the payload is {len} bytes long, over the dead-letter limit of {max}"
            ),
            Error::InvalidReason(why) => write!(f, "invalid dead-letter reason: {why}"),
            Error::CorruptDeadLetter {
                namespace,
                id: Some(id),
                reason,
            } => write!(
                f,
                "corrupt dead letter {id} in namespace {namespace:?}: {reason}"
            ),
            Error::CorruptDeadLetter {
                namespace, reason, ..
            } => write!(
                f,
                "corrupt dead-letter store of namespace {namespace:?}: {reason}"
            ),
            Error::InvalidConfig { namespace, reason } if namespace.is_empty() => {
                write!(f, "invalid engine configuration: {reason}")
            }
            Error::InvalidConfig { namespace, reason } => {
                write!(f, "invalid configuration of namespace {namespace:?}: {reason}")
            }
            Error::InvalidLease(reason) => write!(f, "invalid lease: {reason}"),
            Error::OutOfMemory { namespace, what } => {
                write!(f, "namespace {namespace:?}: could not allocate {what}")
            }
            Error::ThreadRefused { thread, reason } => {
                write!(f, "the system would not start the {thread} thread: {reason}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidKey(e) => Some(e),
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl std::error::Error for KeyError {}

impl From<KeyError> for Error {
    fn from(e: KeyError) -> Self {
        Error::InvalidKey(e)
    }
}

/// `Result` with idem's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether `path` names a claim-marker journal file (the durable tier's
/// `idem-journal-<hash>.bin`), which [`Error::IncompatibleFormat`] also reports.
fn is_journal_file(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("idem-journal-"))
}
