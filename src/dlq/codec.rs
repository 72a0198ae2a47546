//! The stored form of a dead letter: one versioned, little-endian encoding, and a
//! decoder that refuses any malformed input (it never panics and never reads past the
//! end). The memory-only store keeps the same bytes, so both stores share one path.
//!
//! ```text
//! offset size field
//! 0      1    format version (LETTER_VERSION)
//! 1      1    state: 1 quarantined, 2 under review, 5 replayed, 6 archived
//!             (3 schema check and 4 idempotency check appear in the history
//!             only: a replay's passing steps are never a stored state)
//! 2      1    flags: bit 0 = replayed as "already done"
//! 3      1    reserved, 0
//! 4      4    replay attempts (u32)
//! 8      8    quarantined at (wall-clock ms)
//! 16     4    key length (u32), then the key
//! ..     4    payload length (u32), then the payload
//! ..     2    reason length (u16), then the reason (UTF-8)
//! ..     4    history length (u32), then each transition:
//!             8 at_ms, 1 from (0 = none), 1 to, 2 actor length, actor (UTF-8),
//!             2 reason length, reason (UTF-8)
//! ```
//!
//! Reasons and notes are accepted at most `MAX_REASON_LEN` bytes long, but the decoder
//! reads any text up to its 65,535-byte field: a letter that an earlier build stored
//! with a longer note (the note of a handler that outlived its lease quoted its
//! error whole) is read, listed and shown as any other, not refused as corrupt.

use std::fmt;

use super::{MessageState, Transition, MAX_DEAD_LETTER_PAYLOAD};
use crate::bytes::{Reader, Truncated};

/// The dead-letter format this build writes and reads.
pub(crate) const LETTER_VERSION: u8 = 1;

const FLAG_ALREADY_DONE: u8 = 1;
/// The smallest encoded transition: time, two states, two empty strings.
const MIN_TRANSITION: usize = 8 + 1 + 1 + 2 + 2;

/// A dead letter as stored (without its id, which is the store's key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Letter {
    pub(crate) state: MessageState,
    pub(crate) already_done: bool,
    pub(crate) attempts: u32,
    pub(crate) quarantined_at_ms: u64,
    pub(crate) key: Vec<u8>,
    pub(crate) payload: Vec<u8>,
    pub(crate) reason: String,
    pub(crate) history: Vec<Transition>,
}

/// Why bytes are not a valid dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecodeError {
    Truncated,
    TrailingBytes,
    Version(u8),
    State(u8),
    Flags(u8),
    PayloadTooLong(u32),
    NotUtf8,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => f.write_str("dead letter is truncated"),
            DecodeError::TrailingBytes => f.write_str("dead letter has trailing bytes"),
            DecodeError::Version(v) => {
                write!(f, "dead-letter format version {v} is not supported")
            }
            DecodeError::State(s) => write!(f, "dead-letter state byte {s} is invalid"),
            DecodeError::Flags(b) => write!(f, "dead-letter flag byte {b:#04x} is invalid"),
            DecodeError::PayloadTooLong(n) => {
                write!(f, "dead-letter payload length {n} is over the limit")
            }
            DecodeError::NotUtf8 => f.write_str("dead-letter text is not UTF-8"),
        }
    }
}

fn put_bytes32(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Texts are bounded well below 64 KiB when they are accepted; the cut here only keeps
/// the encoding well formed whatever a caller inside the crate passes.
fn put_text16(out: &mut Vec<u8>, s: &str) {
    let s = super::truncate(s, u16::MAX as usize);
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl Letter {
    /// The encoding of `self`.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            32 + self.key.len() + self.payload.len() + self.reason.len() + 48 * self.history.len(),
        );
        out.push(LETTER_VERSION);
        out.push(self.state.code());
        out.push(if self.already_done {
            FLAG_ALREADY_DONE
        } else {
            0
        });
        out.push(0);
        out.extend_from_slice(&self.attempts.to_le_bytes());
        out.extend_from_slice(&self.quarantined_at_ms.to_le_bytes());
        put_bytes32(&mut out, &self.key);
        put_bytes32(&mut out, &self.payload);
        put_text16(&mut out, &self.reason);
        out.extend_from_slice(&(self.history.len() as u32).to_le_bytes());
        for t in &self.history {
            out.extend_from_slice(&t.at_ms.to_le_bytes());
            out.push(t.from.map_or(0, MessageState::code));
            out.push(t.to.code());
            put_text16(&mut out, &t.actor);
            put_text16(&mut out, &t.reason);
        }
        out
    }

    /// Decodes one dead letter, refusing anything malformed.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Letter, DecodeError> {
        Letter::decode_as(bytes, true).map(|(letter, _)| letter)
    }

    /// Decodes one dead letter without copying its payload: the letter with an empty
    /// payload, and the payload's length. Exactly as strict as [`Letter::decode`]
    /// (every byte is checked, the payload's length and presence included): the same
    /// bytes are refused with the same error.
    pub(crate) fn decode_without_payload(bytes: &[u8]) -> Result<(Letter, usize), DecodeError> {
        Letter::decode_as(bytes, false)
    }

    /// The decoder: the letter, its payload copied only `with_payload`, and the
    /// payload's length.
    fn decode_as(bytes: &[u8], with_payload: bool) -> Result<(Letter, usize), DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != LETTER_VERSION {
            return Err(DecodeError::Version(version));
        }
        let state = read_state(&mut r)?;
        // A letter is stored only at rest: the checks a replay passes through are
        // steps of its history, never a stored state (a damaged byte reading as one
        // is refused, not taken as a message to replay).
        if matches!(
            state,
            MessageState::SchemaCheck | MessageState::IdempotencyCheck
        ) {
            return Err(DecodeError::State(state.code()));
        }
        let flags = r.u8()?;
        if flags & !FLAG_ALREADY_DONE != 0 {
            return Err(DecodeError::Flags(flags));
        }
        let reserved = r.u8()?;
        if reserved != 0 {
            return Err(DecodeError::Flags(reserved));
        }
        let attempts = r.u32()?;
        let quarantined_at_ms = r.u64()?;
        let key_len = r.u32()?;
        let key = r.take(key_len as usize)?.to_vec();
        let payload_len = r.u32()?;
        if payload_len as usize > MAX_DEAD_LETTER_PAYLOAD {
            return Err(DecodeError::PayloadTooLong(payload_len));
        }
        let payload = r.take(payload_len as usize)?;
        let payload = match with_payload {
            true => payload.to_vec(),
            false => Vec::new(),
        };
        let reason = text16(&mut r)?;
        let count = r.u32()? as usize;
        // Never trust a count for an allocation: each entry takes bytes that must be there.
        let mut history = Vec::with_capacity(count.min(r.remaining() / MIN_TRANSITION));
        for _ in 0..count {
            let at_ms = r.u64()?;
            let from = match r.u8()? {
                0 => None,
                c => Some(MessageState::from_code(c).ok_or(DecodeError::State(c))?),
            };
            let to = read_state(&mut r)?;
            let actor = text16(&mut r)?;
            let reason = text16(&mut r)?;
            history.push(Transition {
                at_ms,
                actor,
                from,
                to,
                reason,
            });
        }
        if r.remaining() != 0 {
            return Err(DecodeError::TrailingBytes);
        }
        let letter = Letter {
            state,
            already_done: flags & FLAG_ALREADY_DONE != 0,
            attempts,
            quarantined_at_ms,
            key,
            payload,
            reason,
            history,
        };
        Ok((letter, payload_len as usize))
    }
}

impl From<Truncated> for DecodeError {
    fn from(_: Truncated) -> Self {
        DecodeError::Truncated
    }
}

fn read_state(r: &mut Reader<'_>) -> Result<MessageState, DecodeError> {
    let c = r.u8()?;
    MessageState::from_code(c).ok_or(DecodeError::State(c))
}

/// A string of at most 65,535 bytes, prefixed by its length.
fn text16(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    let n = r.u16()? as usize;
    let b = r.take(n)?;
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Letter {
        Letter {
            state: MessageState::Quarantined,
            already_done: false,
            attempts: 2,
            quarantined_at_ms: 1_700_000_000_000,
            key: b"pay-1".to_vec(),
            payload: b"{\"amount\":10}".to_vec(),
            reason: "downstream-unavailable:payments-api 503".to_owned(),
            history: vec![
                Transition {
                    at_ms: 1_700_000_000_000,
                    actor: "consumer".to_owned(),
                    from: None,
                    to: MessageState::Quarantined,
                    reason: "downstream-unavailable:payments-api 503".to_owned(),
                },
                Transition {
                    at_ms: 1_700_000_000_500,
                    actor: "operator".to_owned(),
                    from: Some(MessageState::Quarantined),
                    to: MessageState::UnderReview,
                    reason: "replay requested".to_owned(),
                },
            ],
        }
    }

    #[test]
    fn round_trips_every_state_and_flag() {
        let resting = MessageState::ALL.into_iter().filter(|s| {
            !matches!(
                s,
                MessageState::SchemaCheck | MessageState::IdempotencyCheck
            )
        });
        for state in resting {
            for already_done in [false, true] {
                for history in [vec![], sample().history] {
                    let l = Letter {
                        state,
                        already_done,
                        history,
                        ..sample()
                    };
                    assert_eq!(Letter::decode(&l.encode()), Ok(l));
                }
            }
        }
    }

    #[test]
    fn a_replays_passing_steps_are_never_a_stored_state() {
        for state in [MessageState::SchemaCheck, MessageState::IdempotencyCheck] {
            let l = Letter { state, ..sample() };
            assert_eq!(
                Letter::decode(&l.encode()),
                Err(DecodeError::State(state.code()))
            );
        }
        // In the history they are steps like any other.
        let mut l = sample();
        for (from, to) in [
            (MessageState::UnderReview, MessageState::SchemaCheck),
            (MessageState::SchemaCheck, MessageState::IdempotencyCheck),
            (MessageState::IdempotencyCheck, MessageState::Quarantined),
        ] {
            l.history.push(Transition {
                at_ms: 1_700_000_000_500,
                actor: "replay".to_owned(),
                from: Some(from),
                to,
                reason: "step".to_owned(),
            });
        }
        assert_eq!(Letter::decode(&l.encode()), Ok(l));
    }

    #[test]
    fn header_is_versioned_and_little_endian() {
        let b = sample().encode();
        assert_eq!(&b[..4], &[LETTER_VERSION, 1, 0, 0]);
        assert_eq!(&b[4..8], &2u32.to_le_bytes());
        assert_eq!(&b[8..16], &1_700_000_000_000u64.to_le_bytes());
        assert_eq!(&b[16..20], &5u32.to_le_bytes());
        assert_eq!(&b[20..25], b"pay-1");
    }

    #[test]
    fn every_truncation_is_refused() {
        let b = sample().encode();
        for n in 0..b.len() {
            assert_eq!(Letter::decode(&b[..n]), Err(DecodeError::Truncated), "{n}");
            assert_eq!(
                Letter::decode_without_payload(&b[..n]),
                Err(DecodeError::Truncated),
                "{n}"
            );
        }
    }

    /// What the store's open reads: the letter but its payload, which is checked as
    /// strictly (its length, its bytes' presence) and never copied.
    #[test]
    fn decoding_without_the_payload_is_as_strict_and_keeps_everything_else() {
        let b = sample().encode();
        let (header, len) = Letter::decode_without_payload(&b).unwrap();
        assert_eq!(len, sample().payload.len());
        assert_eq!(
            header,
            Letter {
                payload: Vec::new(),
                ..sample()
            }
        );
        // Every single-byte change (and a byte more) is refused or accepted alike,
        // with the same error or the same letter but its payload.
        let mut variants = vec![[b.as_slice(), &[0]].concat()];
        for i in 0..b.len() {
            for v in [0u8, 1, 2, 5, 7, 0x7f, 0xff] {
                let mut c = b.clone();
                c[i] = v;
                variants.push(c);
            }
        }
        for c in variants {
            let full = Letter::decode(&c).map(|l| {
                let len = l.payload.len();
                (
                    Letter {
                        payload: Vec::new(),
                        ..l
                    },
                    len,
                )
            });
            assert_eq!(Letter::decode_without_payload(&c), full, "{c:?}");
        }
    }

    #[test]
    fn malformed_bytes_are_refused() {
        let b = sample().encode();
        let with = |i: usize, v: u8| {
            let mut c = b.clone();
            c[i] = v;
            Letter::decode(&c)
        };
        assert_eq!(with(0, 9), Err(DecodeError::Version(9)));
        assert_eq!(with(1, 0), Err(DecodeError::State(0)));
        assert_eq!(with(1, 7), Err(DecodeError::State(7)));
        assert_eq!(with(2, 2), Err(DecodeError::Flags(2)));
        assert_eq!(with(3, 1), Err(DecodeError::Flags(1)));
        let mut c = b.clone();
        c.push(0);
        assert_eq!(Letter::decode(&c), Err(DecodeError::TrailingBytes));
        // A payload length beyond the limit, and a huge history count.
        let payload_at = 20 + 5;
        let mut c = b.clone();
        c[payload_at..payload_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Letter::decode(&c),
            Err(DecodeError::PayloadTooLong(u32::MAX))
        );
        let empty = Letter {
            history: vec![],
            ..sample()
        }
        .encode();
        let mut c = empty.clone();
        let n = c.len();
        c[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Letter::decode(&c), Err(DecodeError::Truncated));
        // Text that is not UTF-8.
        let reason_at = payload_at + 4 + sample().payload.len() + 2;
        let mut c = empty;
        c[reason_at] = 0xff;
        assert_eq!(Letter::decode(&c), Err(DecodeError::NotUtf8));
    }
}
