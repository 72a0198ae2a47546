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

/// Everything that can go wrong in idem. Each variant says what happened; none of them
/// leaves a change behind: an operation that returns an error changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `complete` or `release` was called on a claim whose lease had run out, or whose
    /// key was re-claimed or forgotten since: the caller no longer holds the key and its
    /// result was not recorded.
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
    /// No namespace of that name was configured.
    UnknownNamespace(String),
    /// The same namespace name was configured twice.
    DuplicateNamespace(String),
    /// A configuration value is out of range.
    InvalidConfig {
        /// The namespace concerned, or empty for an engine-wide setting.
        namespace: String,
        /// The setting and what is wrong with it.
        reason: &'static str,
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
            Error::UnknownNamespace(name) => write!(f, "no namespace named {name:?}"),
            Error::DuplicateNamespace(name) => {
                write!(f, "namespace {name:?} is configured twice")
            }
            Error::InvalidConfig { namespace, reason } if namespace.is_empty() => {
                write!(f, "invalid engine configuration: {reason}")
            }
            Error::InvalidConfig { namespace, reason } => {
                write!(f, "invalid configuration of namespace {namespace:?}: {reason}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidKey(e) => Some(e),
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
