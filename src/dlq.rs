//! Dead-letter replay: a quarantine store per namespace whose replay goes through a
//! schema check and through the same claim state as the live path.
//!
//! A message moves through
//! `Quarantined -> UnderReview -> SchemaCheck -> IdempotencyCheck -> Replayed | Archived`;
//! a replay whose handler fails goes back to `Quarantined`. Every transition is kept in
//! the message's history with its time, actor and reason.
//!
//! What is stored, and what a crash can leave behind: a message is stored only in a
//! resting state (`Quarantined`, `UnderReview`, `Replayed`, `Archived`). The steps a
//! replay takes (`UnderReview`, `SchemaCheck`, `IdempotencyCheck`) are held in memory
//! while it works on the message and written into the history together with the
//! outcome, in one write. A replayed message's record is written in the same atomic
//! write as its key's completion, so a crash leaves every message either replayed with
//! its key done, or as it was before the replay took it up.

pub(crate) mod codec;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use crate::clock::Clock;
use crate::engine::{Claim, ClaimGuard, KeyState, Namespace};
use crate::error::{Error, KeyError, Result};
use crate::sync::{Arc, Mutex};
use codec::Letter;

/// The largest payload the dead-letter store keeps, in bytes (1 MiB).
pub const MAX_DEAD_LETTER_PAYLOAD: usize = 1 << 20;
/// The longest reason or note the dead-letter store keeps, in bytes.
pub const MAX_REASON_LEN: usize = 4096;
/// The longest actor name, in bytes.
pub const MAX_ACTOR_LEN: usize = 256;
/// The recent window of [`Dlq::health`]: arrivals over the last hour...
pub const DEFAULT_RECENT_WINDOW: Duration = Duration::from_secs(3600);
/// ...against the baseline of the 24 hours before it.
pub const DEFAULT_BASELINE_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The actor of transitions made by an auto-archive policy.
pub const ACTOR_AUTO_ARCHIVE: &str = "policy:auto-archive";
/// The actor of transitions made by an auto-replay policy.
pub const ACTOR_AUTO_REPLAY: &str = "policy:auto-replay";
/// The actor a [`Dlq`] handle records unless given another with [`Dlq::as_actor`].
pub const DEFAULT_ACTOR: &str = "operator";

/// A dead letter's id, unique within its namespace and never reused. Ids grow in
/// quarantine order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(u64);

impl MessageId {
    /// The id with number `n` (as printed by `Display` and `idem dlq list`).
    pub fn new(n: u64) -> Self {
        MessageId(n)
    }

    /// The id's number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Where a dead letter is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MessageState {
    /// Waiting for a replay or an operator.
    Quarantined,
    /// Taken up: by an operator ([`Dlq::review`], stored) or by a replay (a step).
    UnderReview,
    /// A replay is running the schema check on it.
    SchemaCheck,
    /// A replay is claiming its key in the namespace.
    IdempotencyCheck,
    /// Done: its key took effect, by this replay or earlier ("already done").
    Replayed,
    /// Done: put aside without processing (incompatible schema, retention, operator).
    Archived,
}

impl MessageState {
    /// Every state, in order.
    pub const ALL: [MessageState; 6] = [
        MessageState::Quarantined,
        MessageState::UnderReview,
        MessageState::SchemaCheck,
        MessageState::IdempotencyCheck,
        MessageState::Replayed,
        MessageState::Archived,
    ];

    /// `Replayed` and `Archived`: no transition leaves them.
    pub fn is_terminal(self) -> bool {
        matches!(self, MessageState::Replayed | MessageState::Archived)
    }

    /// The state's name, as the CLI prints it: `quarantined`, `under-review`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            MessageState::Quarantined => "quarantined",
            MessageState::UnderReview => "under-review",
            MessageState::SchemaCheck => "schema-check",
            MessageState::IdempotencyCheck => "idempotency-check",
            MessageState::Replayed => "replayed",
            MessageState::Archived => "archived",
        }
    }

    /// The state named `name` (as [`as_str`](Self::as_str) prints it).
    pub fn parse(name: &str) -> Option<MessageState> {
        MessageState::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the state machine has the edge `self -> to`.
    pub fn can_go_to(self, to: MessageState) -> bool {
        use MessageState::*;
        matches!(
            (self, to),
            (Quarantined, UnderReview)
                | (Quarantined, Archived)
                | (UnderReview, SchemaCheck)
                | (UnderReview, Archived)
                | (SchemaCheck, IdempotencyCheck)
                | (SchemaCheck, Archived)
                | (IdempotencyCheck, Replayed)
                | (IdempotencyCheck, Quarantined)
        )
    }

    fn code(self) -> u8 {
        match self {
            MessageState::Quarantined => 1,
            MessageState::UnderReview => 2,
            MessageState::SchemaCheck => 3,
            MessageState::IdempotencyCheck => 4,
            MessageState::Replayed => 5,
            MessageState::Archived => 6,
        }
    }

    fn from_code(c: u8) -> Option<MessageState> {
        MessageState::ALL.into_iter().find(|s| s.code() == c)
    }
}

impl fmt::Display for MessageState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of a dead letter's history.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transition {
    /// When (wall-clock ms, from the engine's clock).
    pub at_ms: u64,
    /// Who: an operator's name, `policy:auto-archive`, `policy:auto-replay`, ...
    pub actor: String,
    /// The state left; `None` for the quarantine itself.
    pub from: Option<MessageState>,
    /// The state entered.
    pub to: MessageState,
    /// Why.
    pub reason: String,
}

/// How a replayed message took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// The replay's handler applied it.
    Applied,
    /// Its key was already done in the namespace: it was not processed again.
    AlreadyDone,
}

/// A dead letter with its history, as [`Dlq::get`] and [`Dlq::list`] return it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    header: DeadLetterHeader,
    payload: Vec<u8>,
}

impl DeadLetter {
    /// Its id.
    pub fn id(&self) -> MessageId {
        self.header.id
    }

    /// Its state now. While a replay in this process works on the message, the step
    /// it is at; the history gets those steps when the replay writes the outcome.
    pub fn state(&self) -> MessageState {
        self.header.state
    }

    /// The message's key in the namespace.
    pub fn key(&self) -> &[u8] {
        self.header.key()
    }

    /// The payload as quarantined (a schema transform is applied at replay, never
    /// stored).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Why it was (last) quarantined: the quarantine reason, or the error of the last
    /// replay that failed.
    pub fn reason(&self) -> &str {
        self.header.reason()
    }

    /// The classification that starts [`reason`](Self::reason): everything before the
    /// first whitespace (`downstream-unavailable:payments-api`).
    pub fn reason_class(&self) -> &str {
        self.header.reason_class()
    }

    /// How many times a replay ran the handler on it.
    pub fn attempts(&self) -> u32 {
        self.header.attempts()
    }

    /// When it was first quarantined (wall-clock ms): a replay that sends it back
    /// does not change it. Selections by quarantine window, the arrival rates and the
    /// age of the oldest waiting message go by it.
    pub fn quarantined_at_ms(&self) -> u64 {
        self.header.quarantined_at_ms()
    }

    /// When it last entered quarantine (wall-clock ms): its quarantine, or the
    /// latest replay whose handler failed and sent it back. The auto-archive's
    /// retention ([`DlqPolicy::archive_after`]) counts from here.
    pub fn waiting_since_ms(&self) -> u64 {
        self.header.waiting_since_ms()
    }

    /// Every transition, oldest first; the first is the quarantine.
    pub fn history(&self) -> &[Transition] {
        self.header.history()
    }

    /// For a replayed message, whether the replay applied it or found it done.
    pub fn replay_outcome(&self) -> Option<ReplayOutcome> {
        self.header.replay_outcome()
    }

    /// Everything but the payload's bytes.
    pub fn header(&self) -> &DeadLetterHeader {
        &self.header
    }
}

/// A dead letter without its payload's bytes (its length only), as
/// [`Dlq::list_headers`] returns it: what a listing needs, read without holding
/// payloads (up to [`MAX_DEAD_LETTER_PAYLOAD`] each) in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterHeader {
    id: MessageId,
    state: MessageState,
    /// The letter, its payload left empty.
    letter: Letter,
    payload_len: usize,
}

impl DeadLetterHeader {
    /// Its id.
    pub fn id(&self) -> MessageId {
        self.id
    }

    /// Its state now, as [`DeadLetter::state`] says.
    pub fn state(&self) -> MessageState {
        self.state
    }

    /// The message's key in the namespace.
    pub fn key(&self) -> &[u8] {
        &self.letter.key
    }

    /// The length of the payload as quarantined, in bytes ([`Dlq::get`] reads it).
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// Why it was (last) quarantined, as [`DeadLetter::reason`] says.
    pub fn reason(&self) -> &str {
        &self.letter.reason
    }

    /// The classification that starts [`reason`](Self::reason): everything before the
    /// first whitespace.
    pub fn reason_class(&self) -> &str {
        reason_class(&self.letter.reason)
    }

    /// How many times a replay ran the handler on it.
    pub fn attempts(&self) -> u32 {
        self.letter.attempts
    }

    /// When it was first quarantined (wall-clock ms), as
    /// [`DeadLetter::quarantined_at_ms`] says.
    pub fn quarantined_at_ms(&self) -> u64 {
        self.letter.quarantined_at_ms
    }

    /// When it last entered quarantine (wall-clock ms), as
    /// [`DeadLetter::waiting_since_ms`] says.
    pub fn waiting_since_ms(&self) -> u64 {
        waiting_since(&self.letter)
    }

    /// Every transition, oldest first; the first is the quarantine.
    pub fn history(&self) -> &[Transition] {
        &self.letter.history
    }

    /// For a replayed message, whether the replay applied it or found it done.
    pub fn replay_outcome(&self) -> Option<ReplayOutcome> {
        match self.letter.state {
            MessageState::Replayed if self.letter.already_done => Some(ReplayOutcome::AlreadyDone),
            MessageState::Replayed => Some(ReplayOutcome::Applied),
            _ => None,
        }
    }
}

/// When `l` last entered quarantine: the latest transition into `Quarantined` in its
/// history (its quarantine, or a replay that sent it back), never before its first
/// quarantine (a clock set back since reads as that).
fn waiting_since(l: &Letter) -> u64 {
    l.history
        .iter()
        .rev()
        .find(|t| t.to == MessageState::Quarantined)
        .map_or(l.quarantined_at_ms, |t| t.at_ms.max(l.quarantined_at_ms))
}

/// The classification of a reason: everything before its first whitespace.
fn reason_class(reason: &str) -> &str {
    reason.split(char::is_whitespace).next().unwrap_or("")
}

/// Whether a message of class `class` falls under the selected class `wanted`: the
/// same class, or a sub-class of it (`downstream-unavailable` selects
/// `downstream-unavailable:payments-api`).
fn class_matches(class: &str, wanted: &str) -> bool {
    class == wanted
        || (class.len() > wanted.len()
            && class.starts_with(wanted)
            && class[wanted.len()..].starts_with(':'))
}

/// Reports message `mid` as left alone because the namespace refuses its key.
fn refuse_key(mid: MessageId, why: &crate::error::KeyError, report: &mut ReplayReport) {
    report.notes.insert(mid, format!("key-refused: {why}"));
    report.refused_key.push(mid);
}

/// Leaves message `mid` as it is because its key is recorded (done, or held by a
/// claim) with another payload's fingerprint than the letter's.
fn payload_mismatch(mid: MessageId, report: &mut ReplayReport) {
    report.notes.insert(
        mid,
        "payload-mismatch: the key is recorded with the fingerprint of another payload \
         (it was used for another message); left as it was"
            .to_owned(),
    );
    report.payload_mismatch.push(mid);
}

/// Leaves message `mid` as it is because its key's done record does not decode
/// (`e`, an [`Error::CorruptRecord`]), noted in `report`.
fn unreadable_key(mid: MessageId, e: &Error, report: &mut ReplayReport) {
    report.notes.insert(mid, format!("key-unreadable: {e}"));
    report.unreadable_key.push(mid);
}

/// `s` cut to at most `max` bytes, at a character boundary.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn validate_reason(reason: &str) -> Result<()> {
    if reason.is_empty() || reason.starts_with(char::is_whitespace) {
        return Err(Error::InvalidReason(
            "a reason starts with its classification, e.g. \"downstream-unavailable:payments-api\"",
        ));
    }
    if reason.len() > MAX_REASON_LEN {
        return Err(Error::InvalidReason(
            "a reason or note is at most 4096 bytes",
        ));
    }
    Ok(())
}

/// The user-supplied schema check every replay passes: can today's code take this
/// payload?
pub trait SchemaCheck {
    /// The verdict on one payload. It must not have side effects: a dry run calls it
    /// too.
    fn check(&self, payload: &[u8]) -> SchemaVerdict;
}

impl<F: Fn(&[u8]) -> SchemaVerdict> SchemaCheck for F {
    fn check(&self, payload: &[u8]) -> SchemaVerdict {
        self(payload)
    }
}

/// A schema check's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaVerdict {
    /// The payload is replayed as it is.
    Compatible,
    /// The payload is replayed as these bytes instead (an upgrade of an old schema).
    /// The stored payload is left unchanged.
    Transform(Vec<u8>),
    /// The payload cannot be replayed: the message is archived with this reason.
    Incompatible(String),
}

/// Whether a replay acts or only says what it would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplayMode {
    /// Decides and reports, changes nothing: the schema check runs, the key is looked
    /// up with [`Namespace::check_with_payload`] (reading the durable tier failing
    /// closed, as an `Execute` replay's claims do), never claimed, and the handler is
    /// not called.
    #[default]
    DryRun,
    /// Replays.
    Execute,
}

/// Which dead letters [`Dlq::list`] and [`Dlq::replay`] take: by state, reason class,
/// quarantine time window and id. Criteria combine with "and".
///
/// `Selection::default()` selects every quarantined message.
///
/// ```
/// use idem::{MessageState, Selection};
///
/// let outage = Selection::default()
///     .reason_class("downstream-unavailable:payments-api")
///     .quarantined_between(1_700_000_000_000, 1_700_000_900_000);
/// let everything = Selection::all();
/// let reviewed = Selection::default().state(MessageState::UnderReview);
/// # let _ = (outage, everything, reviewed);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    states: Option<BTreeSet<MessageState>>,
    class: Option<String>,
    from_ms: Option<u64>,
    until_ms: Option<u64>,
    ids: Option<BTreeSet<MessageId>>,
    limit: Option<usize>,
    /// Messages left out whatever else matches (a policy run's messages that an
    /// earlier auto-replay entry of the same run handled).
    excluded: BTreeSet<u64>,
}

impl Selection {
    /// Every message, whatever its state.
    pub fn all() -> Self {
        Selection {
            states: Some(MessageState::ALL.into_iter().collect()),
            ..Selection::default()
        }
    }

    /// Adds `state` to the states selected. The first call replaces the default
    /// (quarantined only): `Selection::default().state(UnderReview)` selects the
    /// messages under review only.
    pub fn state(mut self, state: MessageState) -> Self {
        self.states.get_or_insert_with(BTreeSet::new).insert(state);
        self
    }

    /// Messages whose reason class is `class` or a sub-class of it (`class` followed
    /// by `:`).
    pub fn reason_class(mut self, class: &str) -> Self {
        self.class = Some(class.to_owned());
        self
    }

    /// Messages quarantined at or after `from_ms` and before `until_ms` (wall-clock).
    pub fn quarantined_between(mut self, from_ms: u64, until_ms: u64) -> Self {
        self.from_ms = Some(from_ms);
        self.until_ms = Some(until_ms);
        self
    }

    /// These messages only. Unless [`state`](Self::state) is also given, their state
    /// does not matter for the selection (replay refuses those already replayed or
    /// archived with [`Error::InvalidTransition`]); an unknown id is
    /// [`Error::UnknownMessage`].
    pub fn ids(mut self, ids: impl IntoIterator<Item = MessageId>) -> Self {
        self.ids.get_or_insert_with(BTreeSet::new).extend(ids);
        self
    }

    /// At most `n` messages (the oldest first). A replay counts only the messages it
    /// can replay: the replayed and archived ones it passes over do not use up `n`.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    fn state_matches(&self, state: MessageState) -> bool {
        match &self.states {
            Some(s) => s.contains(&state),
            None => self.ids.is_some() || state == MessageState::Quarantined,
        }
    }

    fn time_matches(&self, at_ms: u64) -> bool {
        self.from_ms.is_none_or(|f| at_ms >= f) && self.until_ms.is_none_or(|u| at_ms < u)
    }

    fn id_matches(&self, id: MessageId) -> bool {
        self.ids.as_ref().is_none_or(|ids| ids.contains(&id)) && !self.excluded.contains(&id.0)
    }
}

/// What a replay did, or in a dry run would do, with each selected message. A message
/// is in exactly one of `replayed`, `already_done`, `archived`, `failed`,
/// `skipped_in_progress`, `refused_key`, `unreadable_key` and `payload_mismatch`;
/// each list is in id order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayReport {
    /// The mode the report comes from.
    pub mode: ReplayMode,
    /// Handled by the handler and completed (dry run: would be handed to it).
    pub replayed: Vec<MessageId>,
    /// Their key was already done: recorded as replayed, not processed again.
    pub already_done: Vec<MessageId>,
    /// Archived by the schema check.
    pub archived: Vec<MessageId>,
    /// The handler failed: back in quarantine with one more attempt. (A claim lost
    /// after the handler succeeded is recorded as replayed, not failed.) Always
    /// empty in a dry run.
    pub failed: Vec<MessageId>,
    /// Their key is held by a live claim elsewhere (or another replay works on the
    /// message), or they were replayed, archived, or taken up for review (when the
    /// selection did not ask for reviewed messages) since the replay selected them
    /// (then with a note): left as they were.
    pub skipped_in_progress: Vec<MessageId>,
    /// The namespace refuses their key now ([`Error::InvalidKey`]: longer than its
    /// `max_key_len`, lowered since they were quarantined, or empty): left as they
    /// were, with a note, while the rest of the replay goes on.
    pub refused_key: Vec<MessageId>,
    /// Their key's done record in the durable tier does not decode
    /// ([`Error::CorruptRecord`]): whether it was applied cannot be told, so they
    /// are left as they were, with a note, while the rest of the replay goes on.
    pub unreadable_key: Vec<MessageId>,
    /// Their key is recorded, done or held by a live claim, with the fingerprint of
    /// another payload than theirs ([`Error::PayloadMismatch`]: a claim with a
    /// payload stored it, and the key was used for another message): left as they
    /// were, with a note, while the rest of the replay goes on.
    pub payload_mismatch: Vec<MessageId>,
    /// The messages among `replayed` and `failed` whose payload the schema check
    /// transformed.
    pub transformed: Vec<MessageId>,
    /// Why archived and failed messages ended where they did, and until when a
    /// skipped message's key is held.
    pub notes: BTreeMap<MessageId, String>,
    /// The message at which a handler gave no verdict ([`HandlerFailure::NoVerdict`])
    /// and why: it is left as it was, in no list above, and the replay stopped there
    /// (the selected messages after it were not taken up).
    pub stopped: Option<(MessageId, String)>,
}

impl ReplayReport {
    /// How many messages the report covers.
    pub fn total(&self) -> usize {
        self.replayed.len()
            + self.already_done.len()
            + self.archived.len()
            + self.failed.len()
            + self.skipped_in_progress.len()
            + self.refused_key.len()
            + self.unreadable_key.len()
            + self.payload_mismatch.len()
    }

    /// Every message the report covers.
    fn ids(&self) -> impl Iterator<Item = MessageId> + '_ {
        self.replayed
            .iter()
            .chain(&self.already_done)
            .chain(&self.archived)
            .chain(&self.failed)
            .chain(&self.skipped_in_progress)
            .chain(&self.refused_key)
            .chain(&self.unreadable_key)
            .chain(&self.payload_mismatch)
            .copied()
    }

    /// Adds `other`'s messages; each list stays in id order.
    fn merge(&mut self, other: ReplayReport) {
        for (list, more) in [
            (&mut self.replayed, other.replayed),
            (&mut self.already_done, other.already_done),
            (&mut self.archived, other.archived),
            (&mut self.failed, other.failed),
            (&mut self.skipped_in_progress, other.skipped_in_progress),
            (&mut self.refused_key, other.refused_key),
            (&mut self.unreadable_key, other.unreadable_key),
            (&mut self.payload_mismatch, other.payload_mismatch),
            (&mut self.transformed, other.transformed),
        ] {
            list.extend(more);
            list.sort_unstable();
        }
        self.notes.extend(other.notes);
        if self.stopped.is_none() {
            self.stopped = other.stopped;
        }
    }
}

/// The state of a dead-letter store, from [`Dlq::health`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DlqHealth {
    /// Messages waiting: quarantined or under review.
    pub depth: u64,
    /// Messages quarantined.
    pub quarantined: u64,
    /// Messages under review.
    pub under_review: u64,
    /// Messages replayed (applied or already done).
    pub replayed: u64,
    /// Messages archived.
    pub archived: u64,
    /// Stored messages that could not be decoded, and keys of the store that are
    /// neither a message's nor its id counter's (a damaged key, from which no id can
    /// be read), a damaged id counter included. None is ever dropped, and none keeps
    /// the store from opening.
    pub corrupt: u64,
    /// How long the oldest waiting message has waited; `None` when none waits.
    pub oldest_age: Option<Duration>,
    /// Replays that reached `Replayed` (applied, or found already done).
    pub replay_successes: u64,
    /// Replays that landed back in quarantine (the handler failed).
    pub replay_failures: u64,
    /// The recent window of the arrival rate, in whole milliseconds (as counted).
    pub recent_window: Duration,
    /// The baseline window, just before the recent one, in whole milliseconds.
    pub baseline_window: Duration,
    /// Messages first quarantined within the recent window: the last
    /// `recent_window` up to now, now included (at most `recent_window` ago,
    /// excluded).
    pub arrivals_recent: u64,
    /// Messages first quarantined within the baseline window: the `baseline_window`
    /// just before the recent one, which ends where the recent window starts.
    pub arrivals_baseline: u64,
}

impl DlqHealth {
    /// Successes over all replays that ran to an outcome (schema archivals and
    /// skipped keys are not replays); `None` before the first.
    pub fn replay_success_rate(&self) -> Option<f64> {
        let n = self.replay_successes + self.replay_failures;
        (n > 0).then(|| self.replay_successes as f64 / n as f64)
    }

    /// Arrivals per hour over the recent window.
    pub fn arrival_rate_recent(&self) -> f64 {
        per_hour(self.arrivals_recent, self.recent_window)
    }

    /// Arrivals per hour over the baseline window.
    pub fn arrival_rate_baseline(&self) -> f64 {
        per_hour(self.arrivals_baseline, self.baseline_window)
    }

    /// The recent arrival rate over the baseline rate (2.0: twice the usual); `None`
    /// when the baseline saw no arrival.
    pub fn arrival_ratio(&self) -> Option<f64> {
        let base = self.arrival_rate_baseline();
        (base > 0.0).then(|| self.arrival_rate_recent() / base)
    }
}

fn per_hour(n: u64, window: Duration) -> f64 {
    let hours = window.as_secs_f64() / 3600.0;
    if hours > 0.0 {
        n as f64 / hours
    } else {
        0.0
    }
}

/// What runs without an explicit replay call, in [`Dlq::run_policies`]. Everything a
/// policy does not name waits for an operator.
///
/// ```
/// use std::time::Duration;
/// use idem::DlqPolicy;
///
/// let policy = DlqPolicy::new()
///     .archive_after(Duration::from_secs(14 * 24 * 3600))
///     // The payments-api outage of this morning: replay what it quarantined.
///     .auto_replay("downstream-unavailable:payments-api", 1_700_000_000_000, 1_700_003_600_000);
/// # let _ = policy;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DlqPolicy {
    archive_after: Option<Duration>,
    auto_replay: Vec<(String, u64, u64)>,
}

impl DlqPolicy {
    /// No policy: nothing happens without an explicit call.
    pub fn new() -> Self {
        Self::default()
    }

    /// Archives quarantined messages once they have waited `retention` since they
    /// last entered quarantine ([`DeadLetter::waiting_since_ms`]): since their
    /// quarantine, or since the latest replay whose handler failed and sent them
    /// back, so that a message someone replayed lately is not archived for the age
    /// of its first failure. Messages under review are left to their reviewer.
    pub fn archive_after(mut self, retention: Duration) -> Self {
        self.archive_after = Some(retention);
        self
    }

    /// Pre-approves the replay of quarantined messages of reason class `class` (or a
    /// sub-class) quarantined in `[from_ms, until_ms)`. They still pass the schema
    /// check and the idempotency check.
    pub fn auto_replay(mut self, class: &str, from_ms: u64, until_ms: u64) -> Self {
        self.auto_replay.push((class.to_owned(), from_ms, until_ms));
        self
    }
}

/// What [`Dlq::run_policies`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyReport {
    /// Messages archived for retention.
    pub archived: Vec<MessageId>,
    /// What the pre-approved replays did.
    pub replay: ReplayReport,
}

/// The error that stopped a replay or a policy run part-way, with the report of what
/// it did before: the error of [`Dlq::replay_partial`], [`Dlq::replay_with_partial`]
/// (`R` = [`ReplayReport`]) and [`Dlq::run_policies_partial`] (`R` =
/// [`PolicyReport`]).
///
/// `report` lists exactly the messages the call handled (or, in a dry run, decided
/// on) before the error, each as a report of a call that ran to its end would: those
/// it changed (replayed, already done, archived, failed) keep that outcome, and
/// those it passed over (skipped, refused key, unreadable key, payload mismatch) were
/// left as they were. That includes the message at hand when its write landed and
/// only the fsync after it failed (it is recorded as what the report says, and
/// `error` says the write may not last). The message at hand is otherwise left as it
/// was, and so are the selected messages after it, which are in no list.
/// An error refused before anything was done (an unknown id, a store opened
/// read-only) comes with an empty report.
///
/// It displays as `error` does, and converts into it (`?` in a function returning
/// [`Result`]), dropping the report.
///
/// ```
/// use idem::{Engine, Interrupted, NamespaceConfig, ReplayMode, SchemaVerdict, Selection};
///
/// let engine = Engine::builder().namespace("payments", NamespaceConfig::new()).build()?;
/// let dlq = engine.dlq("payments")?;
/// dlq.quarantine(b"pay-1001", b"v2:amount=10.00", "timeout:payments-api")?;
/// let schema = |_: &[u8]| SchemaVerdict::Compatible;
/// let charge = |_: &[u8], _: &[u8]| -> Result<(), String> { Ok(()) };
/// match dlq.replay_partial(&Selection::default(), &schema, charge, ReplayMode::Execute) {
///     Ok(report) => assert_eq!(report.replayed.len(), 1),
///     Err(Interrupted { report, error, .. }) => {
///         // `report.replayed` and the other lists: done before `error`, and kept.
///         eprintln!("replayed {} before: {error}", report.replayed.len());
///         return Err(error);
///     }
/// }
/// # Ok::<(), idem::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Interrupted<R> {
    /// What the call did before the error.
    pub report: R,
    /// The error that stopped it.
    pub error: Error,
}

impl<R> fmt::Display for Interrupted<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<R: fmt::Debug> std::error::Error for Interrupted<R> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl<R> From<Interrupted<R>> for Error {
    fn from(e: Interrupted<R>) -> Error {
        e.error
    }
}

/// What a call that may stop part-way returns: its report, or the error with the
/// report of what it did before.
type Partial<R> = std::result::Result<R, Interrupted<R>>;

/// The durable store behind a dead-letter store, when there is one.
#[cfg(feature = "durable")]
pub(crate) type StoreHandle = std::sync::Arc<crate::durable::Store>;
/// Without the `durable` feature there is no store: this type has no values.
#[cfg(not(feature = "durable"))]
pub(crate) enum StoreHandle {}

/// The dead-letter stores of an engine, one per namespace, opened on first use.
pub(crate) struct Registry(Mutex<HashMap<String, Arc<Inner>>>);

impl Registry {
    pub(crate) fn new() -> Self {
        Registry(Mutex::new(HashMap::new()))
    }

    pub(crate) fn open(
        &self,
        ns: Namespace,
        clock: std::sync::Arc<dyn Clock>,
        store: Option<StoreHandle>,
    ) -> Result<Dlq> {
        let mut map = self.0.lock();
        let inner = match map.get(ns.name()) {
            Some(inner) => inner.clone(),
            None => {
                let name = ns.name().to_owned();
                let inner = Arc::new(Inner::open(Home::Engine { ns, store }, clock)?);
                map.insert(name, inner.clone());
                inner
            }
        };
        Ok(Dlq {
            inner,
            actor: DEFAULT_ACTOR.to_owned(),
        })
    }
}

/// What the health report needs of one message, kept in memory for every message.
#[derive(Debug, Clone, Copy)]
struct Summary {
    state: MessageState,
    /// When it was first quarantined.
    quarantined_at_ms: u64,
    /// When it last entered quarantine ([`waiting_since`]).
    waiting_since_ms: u64,
    successes: u32,
    failures: u32,
}

impl Summary {
    fn of(l: &Letter) -> Summary {
        let mut s = Summary {
            state: l.state,
            quarantined_at_ms: l.quarantined_at_ms,
            waiting_since_ms: waiting_since(l),
            successes: 0,
            failures: 0,
        };
        for t in &l.history {
            match (t.from, t.to) {
                (Some(MessageState::IdempotencyCheck), MessageState::Replayed) => s.successes += 1,
                (Some(MessageState::IdempotencyCheck), MessageState::Quarantined) => {
                    s.failures += 1
                }
                _ => {}
            }
        }
        s
    }
}

struct State {
    next_id: u64,
    /// Every message's summary, by id.
    index: BTreeMap<u64, Summary>,
    /// Ids whose stored bytes could not be decoded when the store was opened.
    corrupt: BTreeSet<u64>,
    /// Keys found in the store at open that are neither a letter's nor the id
    /// counter (damaged: no id can be read from them); left in place, counted as
    /// corrupt.
    damaged_keys: u64,
    /// The id counter was damaged at open (counted as corrupt, apart from
    /// `damaged_keys`) and no quarantine has written it again since.
    counter_damaged: bool,
    /// The memory-only store: encoded letters by id.
    memory: BTreeMap<u64, Vec<u8>>,
    /// Messages a replay of this process works on, with the step it is at.
    busy: HashMap<u64, MessageState>,
}

/// Where a dead-letter store keeps its messages, and whose claim state its replays
/// go through.
enum Home {
    /// A namespace of an engine: the messages are in the engine's durable store if it
    /// has one, in memory otherwise; a replay claims keys in the namespace.
    Engine {
        ns: Namespace,
        store: Option<StoreHandle>,
    },
    /// A database opened read-only ([`Dlq::open_read_only`]): messages and keys are
    /// read from it as it was when opened, and nothing is ever written.
    #[cfg(feature = "durable")]
    ReadOnly {
        name: String,
        db: Box<crate::durable::inspect::ReadOnlyDb>,
    },
}

impl Home {
    fn name(&self) -> &str {
        match self {
            Home::Engine { ns, .. } => ns.name(),
            #[cfg(feature = "durable")]
            Home::ReadOnly { name, .. } => name,
        }
    }

    /// Calls `letter` with every stored message (id, encoded letter), by ascending id,
    /// one at a time (the memory-only store starts empty); returns the id counter, how
    /// many damaged keys the store holds (the counter's own damage not included),
    /// and whether the counter is damaged.
    fn scan(&self, letter: &mut dyn FnMut(u64, &[u8])) -> Result<(u64, u64, bool)> {
        match self {
            Home::Engine { store: None, .. } => {
                let _ = letter;
                Ok((1, 0, false))
            }
            #[cfg(feature = "durable")]
            Home::Engine { ns, store: Some(s) } => {
                // A damaged id counter is read as 1 (the scan counts it as a damaged
                // key): the ids the letters hold say where to go on (`Inner::open`),
                // and the next quarantine writes the counter again.
                let (next, counter_damaged) = match s.dlq_next_id(ns.name()) {
                    Err(Error::CorruptDeadLetter { .. }) => (1, true),
                    next => (next?, false),
                };
                let damaged = s.dlq_scan(ns.name(), letter)?;
                let damaged = damaged.saturating_sub(u64::from(counter_damaged));
                Ok((next, damaged, counter_damaged))
            }
            #[cfg(not(feature = "durable"))]
            Home::Engine {
                store: Some(never), ..
            } => match *never {},
            #[cfg(feature = "durable")]
            Home::ReadOnly { name, db } => {
                let damaged = db.dead_letters(name, letter)?;
                Ok((1, damaged, false))
            }
        }
    }
}

/// The refusal of a change to a dead-letter store opened read-only.
#[cfg(feature = "durable")]
fn read_only(namespace: &str) -> Error {
    Error::Store(crate::error::StoreError::new(
        "write dead letter",
        format!("the dead-letter store of namespace {namespace:?} was opened read-only"),
    ))
}

pub(crate) struct Inner {
    home: Home,
    clock: std::sync::Arc<dyn Clock>,
    state: Mutex<State>,
}

impl Inner {
    /// Opens the store in `home`: one scan of its letters, each decoded (and checked)
    /// whole but for its payload, which is neither copied nor kept. The index keeps
    /// each message's summary; payloads are read when a message is read, one at a
    /// time ([`Inner::load`]).
    fn open(home: Home, clock: std::sync::Arc<dyn Clock>) -> Result<Inner> {
        let mut index = BTreeMap::new();
        let mut corrupt = BTreeSet::new();
        let mut last = None;
        let (next_id, damaged_keys, counter_damaged) = home.scan(&mut |id, bytes| {
            match Letter::decode_without_payload(bytes) {
                Ok((l, _)) => {
                    index.insert(id, Summary::of(&l));
                }
                Err(e) => {
                    tracing::warn!(namespace = %home.name(), id, error = %e, "corrupt dead letter");
                    corrupt.insert(id);
                }
            }
            last = Some(id);
        })?;
        let st = State {
            // Never hand out an id that is taken, whatever the counter says.
            next_id: last.map_or(next_id, |id: u64| next_id.max(id.saturating_add(1))),
            index,
            corrupt,
            damaged_keys,
            counter_damaged,
            memory: BTreeMap::new(),
            busy: HashMap::new(),
        };
        Ok(Inner {
            home,
            clock,
            state: Mutex::new(st),
        })
    }

    fn name(&self) -> &str {
        self.home.name()
    }

    /// The engine namespace that replays claim keys in; a store opened read-only has
    /// none and refuses every change with [`Error::Store`].
    fn namespace(&self) -> Result<&Namespace> {
        match &self.home {
            Home::Engine { ns, .. } => Ok(ns),
            #[cfg(feature = "durable")]
            Home::ReadOnly { name, .. } => Err(read_only(name)),
        }
    }

    /// The state of `key` in the namespace for a replay of `payload`, as
    /// [`Namespace::check_with_payload`] reports it ([`Error::PayloadMismatch`] where
    /// the key holds another payload's fingerprint): for a database opened
    /// read-only, as an engine opened now would find it.
    fn check(&self, key: &[u8], payload: &[u8]) -> Result<Option<KeyState>> {
        match &self.home {
            Home::Engine { ns, .. } => failing_closed(|| ns.check_with_payload(key, payload)),
            #[cfg(feature = "durable")]
            Home::ReadOnly { name, db } => {
                // The limit an engine opened now would apply: the application's, as
                // the database last stored it.
                if let Some(max) = db.max_key_len(name)? {
                    KeyError::check(key, max)?;
                }
                let found = db.key(name, key, crate::clock::read_capped(&*self.clock), true)?;
                // A live record (done, or a claim's marker, which an engine opened now
                // holds as an orphan with its payload) is compared as a claim would.
                if let Some(stored) = found.as_ref().and_then(|k| k.payload_fingerprint) {
                    if stored != db.payload_fingerprint(payload) {
                        return Err(Error::PayloadMismatch);
                    }
                }
                Ok(found.map(|k| match k.done {
                    true => KeyState::Done {
                        completed_at_ms: k.at_ms,
                        expires_at_ms: k.expires_at_ms,
                        result: k.result.map(std::sync::Arc::from),
                    },
                    false => KeyState::InProgress {
                        lease_expires_at_ms: k.expires_at_ms,
                    },
                }))
            }
        }
    }

    fn corrupt(&self, id: u64, reason: String) -> Error {
        Error::CorruptDeadLetter {
            namespace: self.name().to_owned(),
            id: Some(MessageId(id)),
            reason,
        }
    }

    fn unknown(&self, id: u64) -> Error {
        Error::UnknownMessage {
            namespace: self.name().to_owned(),
            id: MessageId(id),
        }
    }

    /// `decode` of the stored bytes of letter `id`, read in place: unknown ids are
    /// errors, and so are bytes that do not decode.
    fn read<T>(
        &self,
        st: &State,
        id: u64,
        decode: impl FnOnce(&[u8]) -> std::result::Result<T, codec::DecodeError>,
    ) -> Result<T> {
        let decoded = match &self.home {
            Home::Engine { store: None, .. } => st.memory.get(&id).map(|b| decode(b)),
            #[cfg(feature = "durable")]
            Home::Engine { ns, store: Some(s) } => s.dlq_read(ns.name(), id, decode)?,
            #[cfg(not(feature = "durable"))]
            Home::Engine {
                store: Some(never), ..
            } => match *never {},
            #[cfg(feature = "durable")]
            Home::ReadOnly { name, db } => db.dead_letter(name, id, decode)?,
        };
        match decoded {
            None => Err(self.unknown(id)),
            Some(d) => d.map_err(|e| self.corrupt(id, e.to_string())),
        }
    }

    /// The stored letter `id`, its payload included: unknown and corrupt ids are
    /// errors.
    fn load(&self, st: &State, id: u64) -> Result<Letter> {
        self.read(st, id, Letter::decode)
    }

    /// The stored letter `id` but its payload (left empty), and the payload's length:
    /// unknown and corrupt ids are errors, as for [`Inner::load`].
    fn load_without_payload(&self, st: &State, id: u64) -> Result<(Letter, usize)> {
        self.read(st, id, Letter::decode_without_payload)
    }

    /// Stores `letter` as message `id` (with the id counter when `next` is given): an
    /// error whether or not the write landed (see [`Inner::write_letter`]).
    fn store_letter(
        &self,
        st: &mut State,
        id: u64,
        letter: &Letter,
        next: Option<u64>,
    ) -> Result<()> {
        self.write_letter(st, id, letter, next)?.into_result()
    }

    /// [`Inner::store_letter`], telling a write that landed and whose sync then failed
    /// (`Ok(Completed::Unsynced)`: stored, and known to the index so) from one that
    /// wrote nothing (an error).
    fn write_letter(
        &self,
        st: &mut State,
        id: u64,
        letter: &Letter,
        next: Option<u64>,
    ) -> Result<Completed> {
        let bytes = letter.encode();
        match &self.home {
            #[cfg(feature = "durable")]
            Home::Engine { ns, store: Some(s) } => {
                // Fsynced as the namespace's completions are (`Store::syncs`), a
                // write that met the engine's drop included.
                let policy = ns.config().sync;
                let sync = s.syncs(policy);
                let since = s.sync_failures();
                let unsynced = s.dlq_put(ns.name(), id, &bytes, next, sync)?;
                // The counter is whole again once a letter's write has stored it.
                st.counter_damaged &= next.is_none();
                // (An fsync of the log that failed while a synced write was made may
                // have covered it: that write is not known to be on the disk.)
                let synced =
                    unsynced.map_or_else(|| s.sync_if_closed_since(policy, sync, since), Err);
                if let Err(e) = synced {
                    // Written, its sync failed: known to the index as the store
                    // holds it (its id taken), and the error says the write may
                    // not last.
                    st.index.insert(id, Summary::of(letter));
                    if let Some(next) = next {
                        st.next_id = st.next_id.max(next);
                    }
                    return Ok(Completed::Unsynced(e));
                }
            }
            #[cfg(not(feature = "durable"))]
            Home::Engine {
                store: Some(never), ..
            } => match *never {},
            Home::Engine { store: None, .. } => {
                let _ = next;
                st.memory.insert(id, bytes);
            }
            #[cfg(feature = "durable")]
            Home::ReadOnly { name, .. } => return Err(read_only(name)),
        }
        st.index.insert(id, Summary::of(letter));
        Ok(Completed::Synced)
    }

    /// Records message `id`, whose handler succeeded after its claim of `key` ran out,
    /// as replayed (`done`, its history up to "applied"): the key is claimed again
    /// and completed with it, or, held or done by another claim meanwhile, the message
    /// is stored as replayed alone, with a note saying so. A completion whose write
    /// landed and whose fsync then failed is reported as what it is: the key done and
    /// the message replayed, written but not known to be on disk.
    fn replayed_after_lease_lost(
        &self,
        id: u64,
        key: &[u8],
        done: Letter,
        report: &mut ReplayReport,
    ) -> Result<()> {
        // The handler has applied the message: whatever the claim answers, the letter
        // is recorded as replayed, so that no later replay applies it again. The key
        // is claimed as the replay's own claim was: with the letter's payload.
        let claimed = failing_closed(|| {
            self.namespace()
                .and_then(|ns| ns.claim_with_payload(key, &done.payload))
        });
        self.record_after_lease_lost(id, claimed, done, report)
    }

    /// [`Inner::replayed_after_lease_lost`] once its key's claim again answered
    /// `claimed`. Every note it stores or reports is cut to [`MAX_REASON_LEN`]: it
    /// quotes an error's text, which can be of any length (a store's own message,
    /// with its paths).
    fn record_after_lease_lost(
        &self,
        id: u64,
        claimed: Result<Claim>,
        mut done: Letter,
        report: &mut ReplayReport,
    ) -> Result<()> {
        let mid = MessageId(id);
        let taken = match claimed {
            Err(Error::PayloadMismatch) => "taken meanwhile by a claim of another payload \
                 (held or completed with another payload's fingerprint), so it is not \
                 recorded as done for this message"
                .to_owned(),
            Err(e) => format!(
                "not recorded as done: claiming it again failed ({e}), so a redelivery \
                 of the key is not caught"
            ),
            Ok(Claim::Acquired(guard)) => match self.complete_replayed(guard, id, &done) {
                Ok(Completed::Synced) => {
                    report.notes.insert(
                        mid,
                        "applied; the replay's claim ran out first and the key was claimed again to complete it"
                            .to_owned(),
                    );
                    report.replayed.push(mid);
                    return Ok(());
                }
                // The key's done record and the message's `Replayed` record were
                // written together, and read back so: only the fsync after them
                // failed. Nothing is left to store (storing the letter again would
                // write over the one the completion wrote); the note says what holds.
                Ok(Completed::Unsynced(e)) => {
                    let why = format!(
                        "applied; the replay's claim ran out first and the key was \
                         claimed again and completed: the key is recorded as done and \
                         the message as replayed, in one write, but the fsync after \
                         that write failed ({e}), so a power loss before the next sync \
                         could still lose both"
                    );
                    report
                        .notes
                        .insert(mid, truncate(&why, MAX_REASON_LEN).to_owned());
                    report.replayed.push(mid);
                    return Ok(());
                }
                // Its lease ran out again, or the store refused the write (nothing
                // written; or what was cannot be read back to tell): the message was
                // applied all the same, and is recorded so below (a refusing store
                // refuses that too, and the replay stops with its error).
                Err(e) => format!(
                    "not recorded as done: claimed again, but that claim's completion \
                     failed too ({e}), so a redelivery of the key is not caught"
                ),
            },
            Ok(Claim::InProgress(_)) => "held by another claim meanwhile".to_owned(),
            Ok(Claim::Duplicate(_)) => "completed by another claim meanwhile".to_owned(),
        };
        let why = format!("applied; the replay's claim ran out first and the key was {taken}");
        let why = truncate(&why, MAX_REASON_LEN).to_owned();
        if let Some(last) = done.history.last_mut() {
            last.reason = why.clone();
        }
        let written = self.write_letter(&mut self.state.lock(), id, &done, None)?;
        report.notes.insert(mid, why);
        report.replayed.push(mid);
        written.into_result()
    }

    /// Completes a replayed message's claim and stores its `Replayed` record (`letter`):
    /// with a durable tier in one atomic write. `Ok(Completed::Unsynced)` when the
    /// write landed and only the grouped fsync after it failed; an error when nothing
    /// was written ([`Error::LeaseLost`] among them), or when what was cannot be read
    /// back.
    fn complete_replayed(&self, guard: ClaimGuard, id: u64, letter: &Letter) -> Result<Completed> {
        match &self.home {
            #[cfg(feature = "durable")]
            Home::Engine { store: Some(_), .. } => {
                let key = crate::durable::dlq_message_key(id).to_vec();
                let op = crate::durable::StateOp::DeadLetter(key, letter.encode());
                let r = guard.complete_co_committed(&[(String::new(), op)]);
                let mut st = self.state.lock();
                match r {
                    Ok(()) => {
                        st.index.insert(id, Summary::of(letter));
                        Ok(Completed::Synced)
                    }
                    Err(Error::LeaseLost) => Err(Error::LeaseLost),
                    // A failed write wrote nothing, but a failed sync after the write
                    // (group commit) left the letter written, in the same batch as
                    // the key's done record: the index follows what is stored, and a
                    // letter stored as replayed says the write landed. (The letter
                    // was not replayed before: a replay takes up only letters that
                    // are not, and holds this one.)
                    Err(e) => match self.load_without_payload(&st, id) {
                        Ok((stored, _)) => {
                            st.index.insert(id, Summary::of(&stored));
                            match stored.state {
                                MessageState::Replayed => Ok(Completed::Unsynced(e)),
                                _ => Err(e),
                            }
                        }
                        Err(_) => Err(e),
                    },
                }
            }
            #[cfg(not(feature = "durable"))]
            Home::Engine {
                store: Some(never), ..
            } => match *never {},
            Home::Engine { store: None, .. } => {
                guard.complete()?;
                let mut st = self.state.lock();
                st.memory.insert(id, letter.encode());
                st.index.insert(id, Summary::of(letter));
                Ok(Completed::Synced)
            }
            // No claim is ever taken through a store opened read-only.
            #[cfg(feature = "durable")]
            Home::ReadOnly { name, .. } => Err(read_only(name)),
        }
    }

    /// The ids `sel` picks among the stored messages (index order: oldest first).
    /// Explicitly named ids must exist.
    fn select(&self, st: &State, sel: &Selection) -> Result<Vec<u64>> {
        if let Some(ids) = &sel.ids {
            for id in ids {
                if st.corrupt.contains(&id.0) {
                    return Err(self.corrupt(id.0, "undecodable at open".to_owned()));
                }
                if !st.index.contains_key(&id.0) {
                    return Err(self.unknown(id.0));
                }
            }
        }
        let mut out: Vec<u64> = st
            .index
            .iter()
            .filter(|(id, s)| {
                sel.id_matches(MessageId(**id))
                    && sel.state_matches(s.state)
                    && sel.time_matches(s.quarantined_at_ms)
            })
            .map(|(id, _)| *id)
            .collect();
        if let Some(class) = &sel.class {
            let mut kept = Vec::with_capacity(out.len());
            for id in out {
                let (letter, _) = self.load_without_payload(st, id)?;
                if class_matches(reason_class(&letter.reason), class) {
                    kept.push(id);
                }
            }
            out = kept;
        }
        if let Some(n) = sel.limit {
            out.truncate(n);
        }
        Ok(out)
    }

    /// Message `id` as `get` and `list` show it, from its stored `letter`.
    fn dead_letter(&self, st: &State, id: u64, mut letter: Letter) -> DeadLetter {
        let payload = std::mem::take(&mut letter.payload);
        DeadLetter {
            header: self.header(st, id, letter, payload.len()),
            payload,
        }
    }

    /// Message `id` as `list_headers` shows it, from its stored `letter` (its payload
    /// left out) and its payload's length.
    fn header(&self, st: &State, id: u64, letter: Letter, payload_len: usize) -> DeadLetterHeader {
        DeadLetterHeader {
            id: MessageId(id),
            state: st.busy.get(&id).copied().unwrap_or(letter.state),
            letter,
            payload_len,
        }
    }

    /// Moves message `id` to `to` (an operator's or a policy's transition).
    fn transition(&self, id: u64, to: MessageState, actor: &str, note: &str) -> Result<()> {
        self.transition_from(id, None, to, actor, note).map(|_| ())
    }

    /// [`Inner::transition`]; with `expected`, only from that state: `Ok(false)`,
    /// changing nothing, if the message is in another state or a replay holds it (a
    /// policy acting on what it selected earlier, which may have moved since).
    fn transition_from(
        &self,
        id: u64,
        expected: Option<MessageState>,
        to: MessageState,
        actor: &str,
        note: &str,
    ) -> Result<bool> {
        match self.transition_written(id, expected, None, to, actor, note)? {
            None => Ok(false),
            Some(written) => written.into_result().map(|()| true),
        }
    }

    /// [`Inner::transition_from`], telling a write that landed and whose sync then
    /// failed (`Some(Completed::Unsynced)`) from one that wrote nothing (an error);
    /// `None` for a message passed over. With `waited_by` (the auto-archive's cutoff),
    /// also only a message that entered quarantine last at or before it: one that a
    /// replay sent back since the policy picked it has not waited its retention.
    fn transition_written(
        &self,
        id: u64,
        expected: Option<MessageState>,
        waited_by: Option<u64>,
        to: MessageState,
        actor: &str,
        note: &str,
    ) -> Result<Option<Completed>> {
        self.namespace()?;
        validate_reason(note)?;
        let mut st = self.state.lock();
        if expected.is_some() {
            let summary = st.index.get(&id);
            let moved = st.busy.contains_key(&id)
                || summary.map(|s| s.state) != expected
                || waited_by.is_some_and(|c| summary.is_some_and(|s| s.waiting_since_ms > c));
            if moved {
                return Ok(None);
            }
        }
        if let Some(step) = st.busy.get(&id) {
            return Err(Error::InvalidTransition {
                id: MessageId(id),
                from: *step,
                to,
            });
        }
        let mut letter = self.load(&st, id)?;
        if !letter.state.can_go_to(to) {
            return Err(Error::InvalidTransition {
                id: MessageId(id),
                from: letter.state,
                to,
            });
        }
        letter.history.push(Transition {
            at_ms: crate::clock::read_capped(&*self.clock),
            actor: actor.to_owned(),
            from: Some(letter.state),
            to,
            reason: note.to_owned(),
        });
        letter.state = to;
        self.write_letter(&mut st, id, &letter, None).map(Some)
    }
}

/// Runs `f` (a replay's claim or a dry run's look-up) with the durable tier read
/// failing closed (`crate::durable::failing_closed`); without a durable tier there
/// is nothing to read, and `f` runs as it is.
fn failing_closed<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(feature = "durable")]
    return crate::durable::failing_closed(f);
    #[cfg(not(feature = "durable"))]
    f()
}

/// How a write that landed ended: a replayed message's completion, or a letter's.
enum Completed {
    /// Written, and synced as the namespace's `SyncPolicy` asks.
    Synced,
    /// Written (for a completion, the key done and the message replayed: every reader
    /// sees both), and the fsync after the write failed with this error. (Only a
    /// durable store has an fsync to fail.)
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    Unsynced(Error),
}

impl Completed {
    /// `Ok` when synced; the sync's error otherwise (what the write's caller returns
    /// once it has reported the write).
    fn into_result(self) -> Result<()> {
        match self {
            Completed::Synced => Ok(()),
            Completed::Unsynced(e) => Err(e),
        }
    }
}

/// Marks a message as taken up by a replay of this process, until dropped.
struct Busy<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Busy<'_> {
    fn step(&self, step: MessageState) {
        self.inner.state.lock().busy.insert(self.id, step);
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.inner.state.lock().busy.remove(&self.id);
    }
}

/// The dead-letter store of one namespace, from [`Engine::dlq`](crate::Engine::dlq).
///
/// With a durable tier it lives in the same RocksDB database (column family
/// `dlq:<namespace>`) and survives restarts and crashes; on a memory-only engine it
/// is kept in memory and lost with the process ([`is_durable`](Self::is_durable)
/// says which). Handles are cheap to clone and share one store. A tool that only
/// looks at a database opens its store with `Dlq::open_read_only` (with the durable tier),
/// without an engine.
///
/// Replay goes through the namespace's own claim state: a key the namespace knows as
/// done is never processed again, in any mode.
///
/// ```
/// use idem::{Engine, MessageState, NamespaceConfig, ReplayMode, SchemaVerdict, Selection};
///
/// let engine = Engine::builder()
///     .namespace("payments", NamespaceConfig::new())
///     .build()?; // with `.durable(dir)` the store survives restarts
/// let dlq = engine.dlq("payments")?;
/// let id = dlq.quarantine(
///     b"pay-1001",
///     b"v2:amount=10.00",
///     "downstream-unavailable:payments-api 503 after 5 retries",
/// )?;
///
/// // Payloads from before the v2 migration cannot be replayed.
/// let schema = |payload: &[u8]| {
///     if payload.starts_with(b"v2:") {
///         SchemaVerdict::Compatible
///     } else {
///         SchemaVerdict::Incompatible("pre-v2 payload".into())
///     }
/// };
/// let charge = |_key: &[u8], _payload: &[u8]| -> Result<(), String> { Ok(()) };
///
/// let plan = dlq.replay(&Selection::default(), &schema, charge, ReplayMode::DryRun)?;
/// let done = dlq.replay(&Selection::default(), &schema, charge, ReplayMode::Execute)?;
/// assert_eq!(plan.replayed, done.replayed);
/// assert_eq!(dlq.get(id)?.state(), MessageState::Replayed);
/// // The key is done in the namespace: the live path now sees a duplicate.
/// assert!(engine.namespace("payments")?.claim(b"pay-1001")?.is_duplicate());
/// # Ok::<(), idem::Error>(())
/// ```
#[derive(Clone)]
pub struct Dlq {
    inner: Arc<Inner>,
    actor: String,
}

impl fmt::Debug for Dlq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dlq")
            .field("namespace", &self.inner.name())
            .field("durable", &self.is_durable())
            .field("read_only", &self.is_read_only())
            .field("actor", &self.actor)
            .finish()
    }
}

/// A replay handler: applies one message (key, payload), or says why it could not.
type Handler<'a> = dyn FnMut(&[u8], &[u8]) -> std::result::Result<(), HandlerFailure> + 'a;

/// Why a replay's handler did not apply a message ([`Dlq::replay_with`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerFailure {
    /// The handler ran and failed: the message goes back to quarantine with one more
    /// attempt and this as its reason (what an `Err` of [`Dlq::replay`]'s handler
    /// does).
    Failed(String),
    /// The handler gave no verdict on the message (it could not be started, say):
    /// the message is left exactly as it was, its claim released, and the replay
    /// stops there ([`ReplayReport::stopped`]).
    NoVerdict(String),
}

impl Dlq {
    /// The namespace this store belongs to.
    pub fn namespace(&self) -> &str {
        self.inner.name()
    }

    /// Whether the store is persisted in the durable tier. `false` on a memory-only
    /// engine: the dead letters are then lost when the process ends.
    pub fn is_durable(&self) -> bool {
        match &self.inner.home {
            Home::Engine { store, .. } => store.is_some(),
            #[cfg(feature = "durable")]
            Home::ReadOnly { .. } => true,
        }
    }

    /// Whether the store was opened with `Dlq::open_read_only`.
    pub fn is_read_only(&self) -> bool {
        !matches!(self.inner.home, Home::Engine { .. })
    }

    /// The dead-letter store of namespace `namespace` in the durable database at
    /// `path`, opened read-only, without an engine: for tools that look at a
    /// database (`idem dlq list|show|health|replay --dry-run`).
    ///
    /// RocksDB's read-only open takes no lock and writes nothing, so it works while
    /// an application serves from the database, and it stores no settings and
    /// touches no journal or prefilter file, as opening an engine would. The store
    /// is seen as it was when opened. [`get`](Self::get), [`list`](Self::list),
    /// [`health`](Self::health) and a [`ReplayMode::DryRun`] replay work (the dry
    /// run looks keys up in the database: a done record within its retention, a
    /// claim marker within its lease, as of `clock`); every change (quarantine,
    /// review, archive, an executed replay, the policies) is refused with
    /// [`Error::Store`], and nothing is written.
    ///
    /// [`Error::UnknownNamespace`] for a namespace the database does not hold,
    /// [`Error::Store`] if `path` is not there, cannot be read or is no directory,
    /// [`Error::IncompatibleFormat`] if it holds no idem database of this build's
    /// format.
    #[cfg(feature = "durable")]
    pub fn open_read_only(
        path: impl AsRef<std::path::Path>,
        namespace: &str,
        clock: impl Clock,
    ) -> Result<Dlq> {
        let db = crate::durable::inspect::ReadOnlyDb::open(path.as_ref())?;
        if !db.has_namespace(namespace) {
            return Err(Error::UnknownNamespace(namespace.to_owned()));
        }
        let home = Home::ReadOnly {
            name: namespace.to_owned(),
            db: Box::new(db),
        };
        Ok(Dlq {
            inner: Arc::new(Inner::open(home, std::sync::Arc::new(clock))?),
            actor: DEFAULT_ACTOR.to_owned(),
        })
    }

    /// Checks `actor` by the rule of [`as_actor`](Self::as_actor) (1 to
    /// [`MAX_ACTOR_LEN`] bytes, no whitespace; [`Error::InvalidReason`] otherwise),
    /// without a handle: for tools that check their input before opening a database.
    pub fn validate_actor(actor: &str) -> Result<()> {
        if actor.is_empty() || actor.len() > MAX_ACTOR_LEN || actor.contains(char::is_whitespace) {
            return Err(Error::InvalidReason(
                "an actor is 1 to 256 bytes with no whitespace",
            ));
        }
        Ok(())
    }

    /// Checks a note for [`review`](Self::review) or [`archive`](Self::archive) by
    /// the rule of reasons (it starts with its classification, not with whitespace,
    /// and is at most [`MAX_REASON_LEN`] bytes; [`Error::InvalidReason`] otherwise),
    /// without a handle.
    pub fn validate_note(note: &str) -> Result<()> {
        validate_reason(note)
    }

    /// A handle that records `actor` as the author of its transitions (default
    /// `"operator"`). Refused with [`Error::InvalidReason`] if empty, longer than
    /// [`MAX_ACTOR_LEN`] or containing whitespace.
    pub fn as_actor(&self, actor: &str) -> Result<Dlq> {
        Dlq::validate_actor(actor)?;
        Ok(Dlq {
            inner: self.inner.clone(),
            actor: actor.to_owned(),
        })
    }

    /// The actor this handle records.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// Puts a message that exhausted its retries in quarantine and returns its id.
    ///
    /// `reason` starts with a classification without whitespace (for example
    /// `downstream-unavailable:payments-api`); free text may follow after a space.
    /// Refused without any change: an invalid key ([`Error::InvalidKey`], by the
    /// namespace's rules), a payload over [`MAX_DEAD_LETTER_PAYLOAD`]
    /// ([`Error::PayloadTooLarge`]), a reason that is empty, oversized or does not
    /// start with its classification ([`Error::InvalidReason`]), a damaged id
    /// counter already at the last id ([`Error::CorruptDeadLetter`] without an id), a
    /// store failure ([`Error::Store`]). One store
    /// failure is not a refusal: a write that landed and whose fsync then failed
    /// (under `SyncPolicy::Always`, or under `Periodic` once the engine was dropped)
    /// returns [`Error::Store`] with the letter stored, under the id this call took
    /// ([`list`](Self::list) shows it, and the next letter's id is one past it). A
    /// caller that quarantines the message again on that error stores a second letter
    /// of it; replayed, whichever goes second finds its key done and is not applied
    /// again.
    pub fn quarantine(&self, key: &[u8], payload: &[u8], reason: &str) -> Result<MessageId> {
        KeyError::check(key, self.inner.namespace()?.config().max_key_len)?;
        if payload.len() > MAX_DEAD_LETTER_PAYLOAD {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: MAX_DEAD_LETTER_PAYLOAD,
            });
        }
        validate_reason(reason)?;
        let now = crate::clock::read_capped(&*self.inner.clock);
        let letter = Letter {
            state: MessageState::Quarantined,
            already_done: false,
            attempts: 0,
            quarantined_at_ms: now,
            key: key.to_vec(),
            payload: payload.to_vec(),
            reason: reason.to_owned(),
            history: vec![Transition {
                at_ms: now,
                actor: self.actor.clone(),
                from: None,
                to: MessageState::Quarantined,
                reason: reason.to_owned(),
            }],
        };
        let mut st = self.inner.state.lock();
        let id = st.next_id;
        // Only a damaged counter reaches the end of the ids: wrapping round would
        // write over message 0 and the ones after it.
        let next = id.checked_add(1).ok_or_else(|| Error::CorruptDeadLetter {
            namespace: self.namespace().to_owned(),
            id: None,
            reason: "the next message id is past the last one (u64::MAX)".into(),
        })?;
        self.inner.store_letter(&mut st, id, &letter, Some(next))?;
        st.next_id = next;
        Ok(MessageId(id))
    }

    /// The message `id` with its history. [`Error::UnknownMessage`] if there is none,
    /// [`Error::CorruptDeadLetter`] if it cannot be decoded.
    pub fn get(&self, id: MessageId) -> Result<DeadLetter> {
        let st = self.inner.state.lock();
        let letter = self.inner.load(&st, id.0)?;
        Ok(self.inner.dead_letter(&st, id.0, letter))
    }

    /// The messages `selection` picks, oldest first, each with its history and its
    /// payload. Each payload is read when its message is (up to
    /// [`MAX_DEAD_LETTER_PAYLOAD`] each, all held in what this returns);
    /// [`list_headers`](Self::list_headers) lists without them.
    pub fn list(&self, selection: &Selection) -> Result<Vec<DeadLetter>> {
        let st = self.inner.state.lock();
        let ids = self.inner.select(&st, selection)?;
        ids.into_iter()
            .map(|id| {
                let letter = self.inner.load(&st, id)?;
                Ok(self.inner.dead_letter(&st, id, letter))
            })
            .collect()
    }

    /// [`list`](Self::list) without the payloads: the messages `selection` picks,
    /// oldest first, each with its history and its payload's length. No payload is
    /// copied or kept: a listing of large payloads takes the memory of their headers
    /// only. [`get`](Self::get) reads one message's payload.
    pub fn list_headers(&self, selection: &Selection) -> Result<Vec<DeadLetterHeader>> {
        let st = self.inner.state.lock();
        let ids = self.inner.select(&st, selection)?;
        ids.into_iter()
            .map(|id| {
                let (letter, len) = self.inner.load_without_payload(&st, id)?;
                Ok(self.inner.header(&st, id, letter, len))
            })
            .collect()
    }

    /// Takes a quarantined message up for review (`Quarantined -> UnderReview`):
    /// [`Selection::default`], and so the auto-archive and auto-replay policies, no
    /// longer pick it; an explicit replay or [`archive`](Self::archive) still can.
    /// A write that landed and whose sync then failed (under `SyncPolicy::Always`, or
    /// under `Periodic` once the engine was dropped) returns [`Error::Store`] with the
    /// message under review all the same.
    pub fn review(&self, id: MessageId, note: &str) -> Result<()> {
        self.inner
            .transition(id.0, MessageState::UnderReview, &self.actor, note)
    }

    /// Archives a quarantined or reviewed message with `note` as the reason. A
    /// message already replayed or archived, or one a replay is working on, is
    /// refused with [`Error::InvalidTransition`]; nothing changes. A write that landed
    /// and whose sync then failed (under `SyncPolicy::Always`, or under `Periodic` once
    /// the engine was dropped) returns [`Error::Store`] with the message archived all
    /// the same (archiving it again is then refused as above).
    pub fn archive(&self, id: MessageId, note: &str) -> Result<()> {
        self.inner
            .transition(id.0, MessageState::Archived, &self.actor, note)
    }

    /// Replays the selected messages (quarantined or under review), oldest first.
    ///
    /// Each passes the schema check, then the idempotency check: its key is claimed in
    /// the namespace as the live path claims it, with the payload it was quarantined
    /// with ([`Namespace::claim_with_payload`]; every letter has a payload, possibly
    /// empty, and a schema transform does not change the one compared).
    /// `Duplicate`: the message is recorded as replayed, already done, and not
    /// processed. `InProgress`: it is left as it was. [`Error::PayloadMismatch`] (the
    /// key is recorded, done or held, with another payload's fingerprint): it is left
    /// as it was, listed in [`ReplayReport::payload_mismatch`]. `Acquired`:
    /// `handler(key, payload)` runs (on the transformed payload if the check
    /// transformed it); on `Ok` the key is completed, storing the quarantined
    /// payload's fingerprint as a live completion would, and the message recorded as
    /// replayed in the same atomic write; on `Err` the claim is released and the
    /// message goes back to quarantine with one more attempt and the error as its
    /// reason.
    ///
    /// [`ReplayMode::DryRun`] takes the same decisions with
    /// [`Namespace::check_with_payload`] and changes nothing; right after it (with
    /// nothing changing in between) `Execute` produces the same partition, except
    /// where a handler fails: its message moves from `replayed` to `failed`, and its
    /// claim is released, so a later message of the same key that the dry run
    /// counted as done by it (in `already_done`, or in `payload_mismatch` for
    /// another payload) takes the key and is replayed (or fails) instead.
    ///
    /// Errors: a selection naming an unknown message or one already replayed or
    /// archived is refused before anything is done, and so is an `Execute` replay of
    /// a store opened read-only. A claim or store error stops the replay and is
    /// returned: messages handled before it keep their outcome, and the message at
    /// hand is left as it was, except after a write of it that landed and whose fsync
    /// failed: a completion's (it is recorded as replayed, its key done), or the
    /// letter's own as the replay archives it (schema), records it already done, or
    /// sends it back to quarantine (handler failure): it is recorded so, and the error
    /// returned. A handler that succeeded after its claim's lease ran out is recorded
    /// as replayed whatever its key's claim again answers, and that claim reports in
    /// the message's note rather than stopping the replay: that the key was held or
    /// completed by another claim meanwhile, could not be claimed or completed (not
    /// recorded as done), or was completed with a write whose fsync failed (recorded
    /// as done, written but not known to be on disk). Only a store that refuses the
    /// `Replayed` record's write too stops the replay there, with its error: the
    /// message is then left as it was, and, as after a crash before its completion,
    /// the next replay runs its handler again.
    /// [`replay_partial`](Self::replay_partial) returns the error with the report of
    /// the messages handled before it.
    pub fn replay(
        &self,
        selection: &Selection,
        schema: &dyn SchemaCheck,
        handler: impl FnMut(&[u8], &[u8]) -> std::result::Result<(), String>,
        mode: ReplayMode,
    ) -> Result<ReplayReport> {
        Ok(self.replay_partial(selection, schema, handler, mode)?)
    }

    /// As [`Dlq::replay`], but an error that stops the replay comes with the report of
    /// what it did before ([`Interrupted`]): the messages handled before the error,
    /// which keep their outcome, and the message at hand if its write landed before
    /// the error (only the fsync after it failed).
    // The report is as large in `Ok` as in `Err`: boxing the error would save nothing.
    #[allow(clippy::result_large_err)]
    pub fn replay_partial(
        &self,
        selection: &Selection,
        schema: &dyn SchemaCheck,
        mut handler: impl FnMut(&[u8], &[u8]) -> std::result::Result<(), String>,
        mode: ReplayMode,
    ) -> std::result::Result<ReplayReport, Interrupted<ReplayReport>> {
        let mut handler =
            |key: &[u8], payload: &[u8]| handler(key, payload).map_err(HandlerFailure::Failed);
        self.replay_as(&self.actor, selection, schema, &mut handler, mode)
    }

    /// As [`Dlq::replay`], with a handler that can also say it gave no verdict
    /// ([`HandlerFailure::NoVerdict`]): that message is left as it was and the replay
    /// stops before the next, its report saying where and why
    /// ([`ReplayReport::stopped`]). For a handler that can fail to run at all (a
    /// command that cannot be found), whose failure says nothing of the message and
    /// would otherwise count an attempt and replace its reason, for every message.
    /// [`replay_with_partial`](Self::replay_with_partial) returns an error with the
    /// report of the messages handled before it.
    pub fn replay_with(
        &self,
        selection: &Selection,
        schema: &dyn SchemaCheck,
        handler: impl FnMut(&[u8], &[u8]) -> std::result::Result<(), HandlerFailure>,
        mode: ReplayMode,
    ) -> Result<ReplayReport> {
        Ok(self.replay_with_partial(selection, schema, handler, mode)?)
    }

    /// As [`Dlq::replay_with`], but an error that stops the replay comes with the
    /// report of what it did before, as [`replay_partial`](Self::replay_partial)'s
    /// does ([`Interrupted`]).
    // The report is as large in `Ok` as in `Err`: boxing the error would save nothing.
    #[allow(clippy::result_large_err)]
    pub fn replay_with_partial(
        &self,
        selection: &Selection,
        schema: &dyn SchemaCheck,
        mut handler: impl FnMut(&[u8], &[u8]) -> std::result::Result<(), HandlerFailure>,
        mode: ReplayMode,
    ) -> std::result::Result<ReplayReport, Interrupted<ReplayReport>> {
        self.replay_as(&self.actor, selection, schema, &mut handler, mode)
    }

    // The report is as large in `Ok` as in `Err`: boxing the error would save nothing.
    #[allow(clippy::result_large_err)]
    fn replay_as(
        &self,
        actor: &str,
        selection: &Selection,
        schema: &dyn SchemaCheck,
        handler: &mut Handler<'_>,
        mode: ReplayMode,
    ) -> Partial<ReplayReport> {
        let mut report = ReplayReport {
            mode,
            ..ReplayReport::default()
        };
        let outcome = self.replay_into(actor, selection, schema, handler, mode, &mut report);
        // The schema check runs before the key is looked at: a transformed message
        // that then turned out done or held (or at which an error stopped the replay)
        // is not listed as transformed.
        let ReplayReport {
            transformed,
            replayed,
            failed,
            ..
        } = &mut report;
        let acted: HashSet<MessageId> = replayed.iter().chain(failed.iter()).copied().collect();
        transformed.retain(|id| acted.contains(id));
        match outcome {
            Ok(()) => Ok(report),
            Err(error) => Err(Interrupted { report, error }),
        }
    }

    /// [`Dlq::replay_as`] into `report`, which holds what was done when an error
    /// stops it.
    fn replay_into(
        &self,
        actor: &str,
        selection: &Selection,
        schema: &dyn SchemaCheck,
        handler: &mut Handler<'_>,
        mode: ReplayMode,
        report: &mut ReplayReport,
    ) -> Result<()> {
        if mode == ReplayMode::Execute {
            self.inner.namespace()?;
        }
        let ids = {
            let st = self.inner.state.lock();
            // The limit counts replayable messages: applied after the others go.
            let unlimited = Selection {
                limit: None,
                ..selection.clone()
            };
            let ids = self.inner.select(&st, &unlimited)?;
            let mut replayable = Vec::with_capacity(ids.len());
            for id in ids {
                let state = st.index[&id].state;
                if state.is_terminal() {
                    if selection.ids.is_some() {
                        return Err(Error::InvalidTransition {
                            id: MessageId(id),
                            from: state,
                            to: MessageState::UnderReview,
                        });
                    }
                    continue;
                }
                replayable.push(id);
            }
            if let Some(n) = selection.limit {
                replayable.truncate(n);
            }
            replayable
        };
        match mode {
            ReplayMode::DryRun => {
                let mut will_be_done = HashMap::new();
                for id in ids {
                    self.decide(id, schema, &mut will_be_done, report)?;
                }
            }
            ReplayMode::Execute => {
                for id in ids {
                    self.replay_one(actor, id, selection, schema, handler, report)?;
                    if report.stopped.is_some() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// A dry run's decision for message `id`.
    fn decide(
        &self,
        id: u64,
        schema: &dyn SchemaCheck,
        will_be_done: &mut HashMap<Vec<u8>, u128>,
        report: &mut ReplayReport,
    ) -> Result<()> {
        let mid = MessageId(id);
        let letter = {
            let st = self.inner.state.lock();
            if st.busy.contains_key(&id) {
                report.skipped_in_progress.push(mid);
                return Ok(());
            }
            self.inner.load(&st, id)?
        };
        match schema.check(&letter.payload) {
            SchemaVerdict::Incompatible(why) => {
                report
                    .notes
                    .insert(mid, format!("schema-incompatible: {why}"));
                report.archived.push(mid);
                return Ok(());
            }
            SchemaVerdict::Transform(_) => report.transformed.push(mid),
            SchemaVerdict::Compatible => {}
        }
        // An earlier message of this run with the same key would have completed it,
        // with its payload's fingerprint.
        let payload = xxhash_rust::xxh3::xxh3_128(&letter.payload);
        match will_be_done.get(&letter.key) {
            Some(earlier) if *earlier == payload => {
                report.already_done.push(mid);
                return Ok(());
            }
            Some(_) => {
                payload_mismatch(mid, report);
                return Ok(());
            }
            None => {}
        }
        let state = match self.inner.check(&letter.key, &letter.payload) {
            Err(Error::InvalidKey(e)) => {
                refuse_key(mid, &e, report);
                return Ok(());
            }
            Err(Error::PayloadMismatch) => {
                payload_mismatch(mid, report);
                return Ok(());
            }
            Err(e @ Error::CorruptRecord { .. }) => {
                unreadable_key(mid, &e, report);
                return Ok(());
            }
            r => r?,
        };
        match state {
            Some(KeyState::Done { .. }) => report.already_done.push(mid),
            Some(KeyState::InProgress {
                lease_expires_at_ms,
            }) => {
                report.notes.insert(
                    mid,
                    format!("key held by a live claim until {lease_expires_at_ms} ms"),
                );
                report.skipped_in_progress.push(mid);
            }
            None => {
                will_be_done.insert(letter.key, payload);
                report.replayed.push(mid);
            }
        }
        Ok(())
    }

    /// Replays message `id`, which `selection` picked.
    fn replay_one(
        &self,
        actor: &str,
        id: u64,
        selection: &Selection,
        schema: &dyn SchemaCheck,
        handler: &mut Handler<'_>,
        report: &mut ReplayReport,
    ) -> Result<()> {
        use MessageState::*;
        let inner = &*self.inner;
        let mid = MessageId(id);
        let (busy, mut letter) = {
            let mut st = inner.state.lock();
            if st.busy.contains_key(&id) {
                report.skipped_in_progress.push(mid);
                return Ok(());
            }
            let letter = inner.load(&st, id)?;
            if letter.state.is_terminal() || !selection.state_matches(letter.state) {
                // Replayed or archived since the selection (by the handler of an
                // earlier message, or another thread), or taken up for review by an
                // operator when the selection did not ask for reviewed messages:
                // left as it is, and said.
                report.skipped_in_progress.push(mid);
                report.notes.insert(
                    mid,
                    format!(
                        "{} since the replay selected it; left as it was",
                        letter.state
                    ),
                );
                return Ok(());
            }
            st.busy.insert(id, UnderReview);
            (Busy { inner, id }, letter)
        };
        let step = |from: MessageState, to: MessageState, reason: String| Transition {
            at_ms: crate::clock::read_capped(&*inner.clock),
            actor: actor.to_owned(),
            from: Some(from),
            to,
            reason,
        };
        let mut steps = Vec::new();
        if letter.state == Quarantined {
            steps.push(step(
                Quarantined,
                UnderReview,
                "replay-requested".to_owned(),
            ));
        }
        steps.push(step(UnderReview, SchemaCheck, "schema-check".to_owned()));
        busy.step(SchemaCheck);
        let transformed = match schema.check(&letter.payload) {
            SchemaVerdict::Incompatible(why) => {
                let why =
                    truncate(&format!("schema-incompatible: {why}"), MAX_REASON_LEN).to_owned();
                steps.push(step(SchemaCheck, Archived, why.clone()));
                letter.history.append(&mut steps);
                letter.state = Archived;
                let written = inner.write_letter(&mut inner.state.lock(), id, &letter, None)?;
                report.notes.insert(mid, why);
                report.archived.push(mid);
                return written.into_result();
            }
            SchemaVerdict::Transform(p) => {
                let why = format!(
                    "schema-transformed: {} -> {} bytes",
                    letter.payload.len(),
                    p.len()
                );
                steps.push(step(SchemaCheck, IdempotencyCheck, why));
                report.transformed.push(mid);
                Some(p)
            }
            SchemaVerdict::Compatible => {
                steps.push(step(
                    SchemaCheck,
                    IdempotencyCheck,
                    "schema-compatible".to_owned(),
                ));
                None
            }
        };
        busy.step(IdempotencyCheck);
        // With the letter's payload, as the consumer that quarantined it would claim
        // it (the stored payload, not a schema transform of it: the fingerprint
        // identifies the message): a key recorded with another payload is left
        // alone, and the completion stores this payload's fingerprint. A replay
        // never decides from the hot tier alone: where the namespace fails open, a
        // claim whose durable read failed would acquire a key done on disk (after a
        // restart the hot tier does not know it) and apply it again, so its claim
        // reads failing closed.
        let ns = inner.namespace()?;
        let claimed = failing_closed(|| ns.claim_with_payload(&letter.key, &letter.payload));
        let claim = match claimed {
            Err(Error::InvalidKey(e)) => {
                refuse_key(mid, &e, report);
                return Ok(());
            }
            Err(Error::PayloadMismatch) => {
                payload_mismatch(mid, report);
                return Ok(());
            }
            Err(e @ Error::CorruptRecord { .. }) => {
                unreadable_key(mid, &e, report);
                return Ok(());
            }
            r => r?,
        };
        let guard = match claim {
            Claim::InProgress(held) => {
                // Someone holds the key: the message stays exactly as it was.
                report.notes.insert(
                    mid,
                    format!(
                        "key held by a live claim until {} ms",
                        held.lease_expires_at_ms()
                    ),
                );
                report.skipped_in_progress.push(mid);
                return Ok(());
            }
            Claim::Duplicate(done) => {
                let why = format!("already-done: completed at {} ms", done.completed_at_ms());
                steps.push(step(IdempotencyCheck, Replayed, why));
                letter.history.append(&mut steps);
                letter.state = Replayed;
                letter.already_done = true;
                let written = inner.write_letter(&mut inner.state.lock(), id, &letter, None)?;
                report.already_done.push(mid);
                return written.into_result();
            }
            Claim::Acquired(guard) => guard,
        };
        let outcome = handler(
            &letter.key,
            transformed.as_deref().unwrap_or(&letter.payload),
        );
        letter.attempts = letter.attempts.saturating_add(1);
        let failure = match outcome {
            Ok(()) => {
                let mut done = letter.clone();
                done.history.extend(steps.iter().cloned());
                done.history
                    .push(step(IdempotencyCheck, Replayed, "applied".to_owned()));
                done.state = Replayed;
                match inner.complete_replayed(guard, id, &done) {
                    Ok(Completed::Synced) => {
                        report.replayed.push(mid);
                        return Ok(());
                    }
                    // Recorded as replayed, its key done, and the error returned.
                    Ok(Completed::Unsynced(e)) => {
                        report.replayed.push(mid);
                        return Err(e);
                    }
                    Err(Error::LeaseLost) => {
                        // The handler applied the message; only the claim ran out.
                        // Sending it back to quarantine would apply it again at the
                        // next replay: the key is claimed anew and completed, or, if
                        // another claim took it meanwhile, the message is recorded
                        // as replayed all the same.
                        return inner.replayed_after_lease_lost(id, &letter.key, done, report);
                    }
                    // One atomic write: nothing was written, and the message is as it
                    // was.
                    Err(e) => return Err(e),
                }
            }
            Err(HandlerFailure::NoVerdict(why)) => {
                // Nothing is known of the message: it stays as it was (its attempt not
                // counted, its reason kept), and the replay stops here.
                let _ = guard.release();
                report.stopped = Some((mid, truncate(why.trim(), MAX_REASON_LEN).to_owned()));
                return Ok(());
            }
            Err(HandlerFailure::Failed(e)) => {
                // A release refused as LeaseLost leaves the key claimable all the same.
                let _ = guard.release();
                let e = e.trim();
                if e.is_empty() {
                    "replay-failed".to_owned()
                } else {
                    truncate(e, MAX_REASON_LEN).to_owned()
                }
            }
        };
        steps.push(step(IdempotencyCheck, Quarantined, failure.clone()));
        letter.history.append(&mut steps);
        letter.state = Quarantined;
        letter.reason = failure.clone();
        let written = inner.write_letter(&mut inner.state.lock(), id, &letter, None)?;
        report.notes.insert(mid, failure);
        report.failed.push(mid);
        drop(busy);
        written.into_result()
    }

    /// Runs the policies once, as of the engine's clock: first the auto-archive of
    /// quarantined messages past the retention, counted from when each last entered
    /// quarantine ([`DlqPolicy::archive_after`]; actor `policy:auto-archive`, the
    /// retention recorded as the reason), then each pre-approved replay (actor
    /// `policy:auto-replay`) through both checks, with `schema` and `handler`.
    /// Everything else is left for an explicit call.
    ///
    /// An error stops the run and is returned; what the run did before it stays done
    /// ([`run_policies_partial`](Self::run_policies_partial) returns its report with
    /// the error).
    pub fn run_policies(
        &self,
        policy: &DlqPolicy,
        schema: &dyn SchemaCheck,
        handler: impl FnMut(&[u8], &[u8]) -> std::result::Result<(), String>,
    ) -> Result<PolicyReport> {
        Ok(self.run_policies_partial(policy, schema, handler)?)
    }

    /// As [`Dlq::run_policies`], but an error that stops the run comes with the report
    /// of what it did before ([`Interrupted`]): the messages archived for retention
    /// before it, and what the auto-replays before it did, as
    /// [`replay_partial`](Self::replay_partial) reports it (the message at hand
    /// included if its write landed and only the fsync after it failed).
    // The report is as large in `Ok` as in `Err`: boxing the error would save nothing.
    #[allow(clippy::result_large_err)]
    pub fn run_policies_partial(
        &self,
        policy: &DlqPolicy,
        schema: &dyn SchemaCheck,
        mut handler: impl FnMut(&[u8], &[u8]) -> std::result::Result<(), String>,
    ) -> std::result::Result<PolicyReport, Interrupted<PolicyReport>> {
        let mut handler =
            |key: &[u8], payload: &[u8]| handler(key, payload).map_err(HandlerFailure::Failed);
        let mut out = PolicyReport {
            replay: ReplayReport {
                mode: ReplayMode::Execute,
                ..ReplayReport::default()
            },
            ..PolicyReport::default()
        };
        match self.run_policies_into(policy, schema, &mut handler, &mut out) {
            Ok(()) => Ok(out),
            Err(error) => Err(Interrupted { report: out, error }),
        }
    }

    /// [`Dlq::run_policies_partial`] into `out`, which holds what was done when an
    /// error stops it.
    fn run_policies_into(
        &self,
        policy: &DlqPolicy,
        schema: &dyn SchemaCheck,
        handler: &mut Handler<'_>,
        out: &mut PolicyReport,
    ) -> Result<()> {
        self.inner.namespace()?;
        if let Some(retention) = policy.archive_after {
            // None (nothing has waited that long) while the clock reads less than
            // the retention.
            let cutoff = crate::clock::read_capped(&*self.inner.clock)
                .checked_sub(retention.as_millis().min(u64::MAX as u128) as u64);
            let due: Vec<u64> = {
                let st = self.inner.state.lock();
                st.index
                    .iter()
                    .filter(|(id, s)| {
                        s.state == MessageState::Quarantined
                            && cutoff.is_some_and(|c| s.waiting_since_ms <= c)
                            && !st.busy.contains_key(id)
                    })
                    .map(|(id, _)| *id)
                    .collect()
            };
            let note = format!(
                "retention: quarantined for {} s or more",
                retention.as_secs()
            );
            // Each only if still quarantined, not being replayed, and not sent back
            // since: an operator may have taken it up for review since, or a replay
            // finished it, or failed and sent it back to wait its retention again.
            for id in due {
                let written = self.inner.transition_written(
                    id,
                    Some(MessageState::Quarantined),
                    cutoff,
                    MessageState::Archived,
                    ACTOR_AUTO_ARCHIVE,
                    &note,
                )?;
                if let Some(written) = written {
                    // Archived, even when only the sync after the write failed.
                    out.archived.push(MessageId(id));
                    written.into_result()?;
                }
            }
        }
        // Entries may overlap (a class and one of its sub-classes, say): a message
        // one entry handled (a failure whose new reason another entry's class still
        // matches, one skipped while held) is not taken up again in the same run.
        let mut handled = BTreeSet::new();
        for (class, from_ms, until_ms) in &policy.auto_replay {
            let mut sel = Selection::default()
                .reason_class(class)
                .quarantined_between(*from_ms, *until_ms);
            sel.excluded.clone_from(&handled);
            let (r, error) = match self.replay_as(
                ACTOR_AUTO_REPLAY,
                &sel,
                schema,
                handler,
                ReplayMode::Execute,
            ) {
                Ok(r) => (r, None),
                Err(Interrupted { report, error }) => (report, Some(error)),
            };
            handled.extend(r.ids().map(|id| id.0));
            out.replay.merge(r);
            if let Some(e) = error {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Depth, age of the oldest waiting message, replay success rate and arrival
    /// rate over the last hour against the 24 hours before it.
    pub fn health(&self) -> DlqHealth {
        // Both windows are hours long: nothing to refuse.
        self.health_of(
            DEFAULT_RECENT_WINDOW.as_millis() as u64,
            DEFAULT_BASELINE_WINDOW.as_millis() as u64,
        )
    }

    /// [`health`](Self::health) with the arrival rate over the last `recent`
    /// against the `baseline` before it.
    ///
    /// Windows are counted in whole milliseconds, the clock's unit (a fraction of one
    /// is dropped), and each holds exactly that many: a message quarantined `age`
    /// before now is a recent arrival if `age < recent`, a baseline one if
    /// `recent <= age < recent + baseline`. A window shorter than 1 ms holds no
    /// instant, and a rate over it means nothing: it is refused with
    /// [`Error::InvalidConfig`] (a zero window is a caller's mistake, not a quiet
    /// rate of 0 that would hide a spike).
    pub fn health_over(&self, recent: Duration, baseline: Duration) -> Result<DlqHealth> {
        let ms = |d: Duration| d.as_millis().min(u64::MAX as u128) as u64;
        let (recent_ms, baseline_ms) = (ms(recent), ms(baseline));
        if recent_ms == 0 || baseline_ms == 0 {
            return Err(Error::InvalidConfig {
                namespace: self.namespace().to_owned(),
                reason: "a dead-letter health window is at least 1 ms",
            });
        }
        Ok(self.health_of(recent_ms, baseline_ms))
    }

    /// [`health_over`](Self::health_over) with windows of `recent_ms` and
    /// `baseline_ms` milliseconds, neither zero.
    fn health_of(&self, recent_ms: u64, baseline_ms: u64) -> DlqHealth {
        let now = crate::clock::read_capped(&*self.inner.clock);
        let st = self.inner.state.lock();
        let mut h = DlqHealth {
            depth: 0,
            quarantined: 0,
            under_review: 0,
            replayed: 0,
            archived: 0,
            corrupt: st.corrupt.len() as u64 + st.damaged_keys + u64::from(st.counter_damaged),
            oldest_age: None,
            replay_successes: 0,
            replay_failures: 0,
            recent_window: Duration::from_millis(recent_ms),
            baseline_window: Duration::from_millis(baseline_ms),
            arrivals_recent: 0,
            arrivals_baseline: 0,
        };
        let mut oldest: Option<u64> = None;
        for s in st.index.values() {
            match s.state {
                MessageState::Replayed => h.replayed += 1,
                MessageState::Archived => h.archived += 1,
                waiting => {
                    if waiting == MessageState::UnderReview {
                        h.under_review += 1;
                    } else {
                        h.quarantined += 1;
                    }
                    oldest =
                        Some(oldest.map_or(s.quarantined_at_ms, |o| o.min(s.quarantined_at_ms)));
                }
            }
            h.replay_successes += u64::from(s.successes);
            h.replay_failures += u64::from(s.failures);
            // A message quarantined after now (the clock went back since) is in
            // neither window.
            if let Some(age) = now.checked_sub(s.quarantined_at_ms) {
                if age < recent_ms {
                    h.arrivals_recent += 1;
                } else if age - recent_ms < baseline_ms {
                    h.arrivals_baseline += 1;
                }
            }
        }
        h.depth = h.quarantined + h.under_review;
        h.oldest_age = oldest.map(|o| Duration::from_millis(now.saturating_sub(o)));
        h
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync + 'static>() {}
    is::<Dlq>();
}

#[cfg(all(test, not(idem_loom)))]
mod tests {
    use super::*;
    use crate::{Engine, NamespaceConfig};

    /// An archive whose letter's write landed while the engine dropped (under
    /// `Periodic`: the write then syncs itself) and whose sync failed returns the
    /// store's error with the message archived, as its docs say; archiving it again
    /// is refused.
    #[cfg(feature = "durable")]
    #[test]
    fn an_archive_whose_sync_failed_returns_the_error_with_the_message_archived() {
        let dir =
            std::env::temp_dir().join(format!("idem-dlq-archive-sync-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let engine = Engine::builder()
                .namespace(
                    "ns",
                    NamespaceConfig::new().sync(crate::SyncPolicy::Periodic(
                        std::time::Duration::from_secs(1),
                    )),
                )
                .maintenance_interval(None)
                .durable(&dir)
                .build()
                .unwrap();
            let dlq = engine.dlq("ns").unwrap();
            let id = dlq.quarantine(b"k", b"p", "outage:db").unwrap();
            let engine = std::cell::RefCell::new(Some(engine));
            crate::durable::set_after_dlq_put(move || {
                let engine = engine.borrow_mut().take().expect("the engine");
                engine.debug_fail_syncs(true);
                drop(engine);
            });
            let r = dlq.archive(id, "operator: not wanted");
            assert!(
                matches!(&r, Err(Error::Store(e)) if e.operation() == "sync"),
                "{r:?}"
            );
            assert_eq!(dlq.get(id).unwrap().state(), MessageState::Archived);
            let again = dlq.archive(id, "operator: not wanted");
            assert!(
                matches!(again, Err(Error::InvalidTransition { .. })),
                "{again:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A handler that outlived its claim's lease, whose key's claim again failed
    /// with an error of a long text (a store's own message can quote paths of any
    /// length): the message is recorded as replayed with a note cut to
    /// [`MAX_REASON_LEN`] bytes at a character boundary, stored and reported alike.
    /// (Before, the note quoted the whole error: a stored reason over the limit.)
    #[test]
    fn a_note_after_a_lost_lease_is_cut_to_the_longest_reason() {
        let engine = Engine::builder()
            .namespace("ns", NamespaceConfig::new())
            .maintenance_interval(None)
            .build()
            .unwrap();
        let dlq = engine.dlq("ns").unwrap();
        let id = dlq.quarantine(b"k", b"p", "outage:db").unwrap();
        let mut done = dlq.inner.load(&dlq.inner.state.lock(), id.0).unwrap();
        done.history.push(Transition {
            at_ms: 0,
            actor: "operator".to_owned(),
            from: Some(MessageState::IdempotencyCheck),
            to: MessageState::Replayed,
            reason: "applied".to_owned(),
        });
        done.state = MessageState::Replayed;
        // Three-byte characters: a cut at the limit may fall inside one.
        let detail = "\u{20ac}".repeat(MAX_REASON_LEN);
        let claimed = Err(Error::Store(crate::error::StoreError::new("read", detail)));
        let mut report = ReplayReport::default();
        dlq.inner
            .record_after_lease_lost(id.0, claimed, done, &mut report)
            .unwrap();
        assert_eq!(report.replayed, vec![id]);
        let stored = dlq.get(id).unwrap();
        assert_eq!(stored.state(), MessageState::Replayed);
        let reason = &stored.history().last().unwrap().reason;
        assert!(reason.len() <= MAX_REASON_LEN, "{} bytes", reason.len());
        // The longest cut at a character boundary: less than a character short.
        assert!(reason.len() > MAX_REASON_LEN - 3, "{} bytes", reason.len());
        assert!(reason.ends_with('\u{20ac}'));
        assert!(reason.starts_with("applied; the replay's claim ran out first"));
        assert!(reason.contains("not recorded as done: claiming it again failed"));
        assert_eq!(&report.notes[&id], reason);
        // Every note stored is one `validate_note` accepts, and the message reads,
        // lists and refuses a second archive as any replayed message does.
        assert_eq!(validate_reason(reason), Ok(()));
        assert_eq!(dlq.list(&Selection::all()).unwrap(), vec![stored]);
        assert!(matches!(
            dlq.archive(id, "x: y"),
            Err(Error::InvalidTransition { .. })
        ));
    }

    /// A message the auto-archive picked as due, which a replay then sent back to
    /// quarantine (its handler failed) before the archive reached it, is passed over:
    /// it waits its retention again from that failure. (Before, the transition
    /// checked only that the message was still quarantined, and archived it.)
    #[test]
    fn the_auto_archive_passes_over_a_message_sent_back_since_it_was_picked() {
        let clock = crate::ManualClock::new(1_000_000);
        let engine = Engine::builder()
            .namespace("ns", NamespaceConfig::new())
            .clock(clock.clone())
            .maintenance_interval(None)
            .build()
            .unwrap();
        let dlq = engine.dlq("ns").unwrap();
        let sent_back = dlq.quarantine(b"s", b"p", "test:reason").unwrap();
        let waiting = dlq.quarantine(b"w", b"p", "test:reason").unwrap();
        clock.advance(Duration::from_secs(60));
        // The policy's cutoff, as it picks both: quarantined a minute ago or more.
        let cutoff = crate::clock::read_capped(&*dlq.inner.clock) - 60_000;
        clock.advance(Duration::from_secs(1));
        let r = dlq
            .replay(
                &Selection::default().ids([sent_back]),
                &|_: &[u8]| SchemaVerdict::Compatible,
                |_: &[u8], _: &[u8]| Err("boom: down".to_owned()),
                ReplayMode::Execute,
            )
            .unwrap();
        assert_eq!(r.failed, vec![sent_back]);
        let archive = |id: MessageId| {
            dlq.inner
                .transition_written(
                    id.0,
                    Some(MessageState::Quarantined),
                    Some(cutoff),
                    MessageState::Archived,
                    ACTOR_AUTO_ARCHIVE,
                    "retention: test",
                )
                .map(|w| w.is_some())
        };
        assert_eq!(archive(sent_back), Ok(false));
        assert_eq!(archive(waiting), Ok(true));
        assert_eq!(
            dlq.get(sent_back).unwrap().state(),
            MessageState::Quarantined
        );
        assert_eq!(dlq.get(waiting).unwrap().state(), MessageState::Archived);
    }

    /// The auto-archive's transition acts only on a message still quarantined and
    /// not held by a replay: one that moved since the policy picked it is passed over
    /// (`Ok(false)`, nothing changed), where the operator's transition refuses it.
    #[test]
    fn a_transition_from_an_expected_state_passes_over_a_message_that_moved() {
        let engine = Engine::builder()
            .namespace("ns", NamespaceConfig::new())
            .maintenance_interval(None)
            .build()
            .unwrap();
        let dlq = engine.dlq("ns").unwrap();
        let reviewed = dlq.quarantine(b"r", b"p", "test:reason").unwrap();
        let held = dlq.quarantine(b"h", b"p", "test:reason").unwrap();
        let waiting = dlq.quarantine(b"w", b"p", "test:reason").unwrap();
        dlq.review(reviewed, "hold: by hand").unwrap();
        dlq.inner
            .state
            .lock()
            .busy
            .insert(held.0, MessageState::UnderReview);
        let archive = |id: MessageId| {
            dlq.inner.transition_from(
                id.0,
                Some(MessageState::Quarantined),
                MessageState::Archived,
                ACTOR_AUTO_ARCHIVE,
                "retention: test",
            )
        };
        assert_eq!(archive(reviewed), Ok(false));
        assert_eq!(archive(held), Ok(false));
        assert_eq!(archive(waiting), Ok(true));
        assert_eq!(
            dlq.get(reviewed).unwrap().state(),
            MessageState::UnderReview
        );
        assert_eq!(dlq.get(waiting).unwrap().state(), MessageState::Archived);
        // Without an expected state (an operator's), a message a replay holds is
        // refused with an error.
        assert!(matches!(
            dlq.inner
                .transition(held.0, MessageState::Archived, "operator", "x: y"),
            Err(Error::InvalidTransition { .. })
        ));
        dlq.inner.state.lock().busy.remove(&held.0);
        assert_eq!(dlq.get(held).unwrap().state(), MessageState::Quarantined);
    }
}
