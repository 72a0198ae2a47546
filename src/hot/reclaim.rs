//! When an outgrown table may be freed: reclamation for the shards' lock-free reads.
//!
//! A lock-free reader ([`ShardSlot::optimistic_duplicate`](super::ShardSlot)) follows
//! pointers a lock holder published (the index's bucket array, the slab's
//! chunk-address table). When a shard outgrows one, the lock holder publishes the
//! replacement and hands the old one to [`retire`]; it is freed only once no reader
//! that could have read the old pointer is still reading.
//!
//! The reader's side must cost next to nothing, because every single duplicate claim
//! takes it: a reader ([`pin`]) stores the current epoch into a slot of its own thread
//! (a cache line no other thread writes), and clears it when done. No read-modify-write,
//! no store to a shared line, and on Linux no fence either.
//!
//! The cost moves to the retiring side, which is rare (a table is outgrown a few dozen
//! times in a shard's life). [`retire`] advances the global epoch, tags the garbage with
//! the epoch before it, and frees garbage once every pinned reader's epoch is later than
//! its tag: a reader whose epoch is later loaded it after the advance, so it sees the
//! replacement (and a collection frees only garbage retired before it began: what is
//! retired after its barrier may be read by a reader it found idle). To see the
//! readers' slots without a fence on their side, the retiring
//! thread first makes every thread of the process run a full memory barrier
//! (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`): after it, a reader's store of its
//! epoch is either visible, or was not yet made, and then the reader's later loads see
//! the replacement. Where that system call is not available, readers issue a
//! sequentially consistent fence after their store and the retiring side one before its
//! scan (the classic store-fence-load pairing).
//!
//! Rust's memory model has no process-wide barrier, so the fence-free pairing rests
//! on the kernel's guarantee rather than on the model, as in user-space RCU built on
//! the same call; the fallback is within the model, and its steps ([`steps`]) are the
//! ones the loom models in `tests/loom.rs` explore. The mode is chosen once per
//! process, with the first reader's slot; the unit tests run the readers' tests again
//! in a child process that is told to take the fallback.
//!
//! Each thread's slot has an index, unique among the live threads and reused after a
//! thread ends; [`OwnedCounter`] uses it to give the first [`OWNED`] threads a counter
//! stripe only they write, with plain stores.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam::utils::CachePadded;
use parking_lot::Mutex;

/// The protocol's steps, apart from where its words live: the process-wide code below
/// runs them on its statics, and the loom model (`tests/loom.rs`, through
/// `idem::loom_reclaim`) runs the same functions on loom's atomics, in the fenced mode
/// (loom has no process-wide barrier to model the other).
pub(crate) mod steps {
    use std::sync::atomic::{compiler_fence, Ordering};

    /// A word of the protocol: the global epoch, or a reader's slot (its pinned epoch,
    /// 0 when not reading).
    pub(crate) trait Word {
        fn load(&self, order: Ordering) -> u64;
        fn store(&self, value: u64, order: Ordering);
        fn fetch_add(&self, value: u64, order: Ordering) -> u64;
    }

    impl Word for std::sync::atomic::AtomicU64 {
        #[inline(always)]
        fn load(&self, order: Ordering) -> u64 {
            self.load(order)
        }
        #[inline(always)]
        fn store(&self, value: u64, order: Ordering) {
            self.store(value, order)
        }
        #[inline(always)]
        fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
            self.fetch_add(value, order)
        }
    }

    #[cfg(idem_loom)]
    impl Word for loom::sync::atomic::AtomicU64 {
        fn load(&self, order: Ordering) -> u64 {
            self.load(order)
        }
        fn store(&self, value: u64, order: Ordering) {
            self.store(value, order)
        }
        fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
            self.fetch_add(value, order)
        }
    }

    /// A reader's pin: its slot takes the current epoch, then (`fenced`) a sequentially
    /// consistent fence orders that store before the reader's loads of what is
    /// published; without it only the compiler's, where the retiring side makes every
    /// thread run a barrier instead.
    #[inline(always)]
    pub(crate) fn enter<W: Word>(epoch: &W, slot: &W, fenced: bool) {
        let e = epoch.load(Ordering::Acquire);
        // Release, not Relaxed: a retirer's scan that reads this epoch must also see
        // this thread's earlier pins' reads done (an unpin's release store of 0 heads
        // no release sequence that a later plain store would continue). On x86 both
        // are a plain store.
        slot.store(e, Ordering::Release);
        if fenced {
            crate::sync::fence(Ordering::SeqCst);
        } else {
            compiler_fence(Ordering::SeqCst);
        }
    }

    /// A reader's unpin. Release: the reads made while pinned come before a retirer's
    /// scan that finds the slot clear.
    #[inline(always)]
    pub(crate) fn leave<W: Word>(slot: &W) {
        slot.store(0, Ordering::Release);
    }

    /// The retiring side, once the replacement is published: advances the epoch and
    /// returns the garbage's tag (the epoch before). SeqCst: the publication before it
    /// is seen by every reader that loads a later epoch (their load is an acquire).
    #[inline]
    pub(crate) fn advance<W: Word>(epoch: &W) -> u64 {
        epoch.fetch_add(1, Ordering::SeqCst)
    }

    /// The bound of a collection, read before its barrier: only garbage tagged below
    /// it is covered (what is retired later may have been published after the barrier,
    /// and read by a reader the scan found idle). Acquire: the publications of the
    /// garbage below it come first.
    #[inline]
    pub(crate) fn bound<W: Word>(epoch: &W) -> u64 {
        epoch.load(Ordering::Acquire)
    }

    /// The retiring side's half of the fenced mode, between the bound and the scan.
    #[inline]
    pub(crate) fn fence() {
        crate::sync::fence(Ordering::SeqCst);
    }

    /// After the barrier: the oldest epoch a pinned reader holds, or `bound` if it is
    /// older. Garbage tagged below it can be freed ([`freeable`]).
    pub(crate) fn oldest<'a, W: Word + 'a>(
        bound: u64,
        slots: impl IntoIterator<Item = &'a W>,
    ) -> u64 {
        slots
            .into_iter()
            .map(|s| s.load(Ordering::Acquire))
            .filter(|&e| e != 0)
            .min()
            .unwrap_or(u64::MAX)
            .min(bound)
    }

    /// Whether garbage tagged `tag` can be freed by a collection that found `oldest`.
    #[inline]
    pub(crate) fn freeable(tag: u64, oldest: u64) -> bool {
        tag < oldest
    }
}

/// What every reader loads: the global epoch (0 in a slot means "not reading", so it
/// starts at 1) and whether `membarrier` is registered for this process (set once,
/// before any reader pins: see [`Registry::register`]). A line of their own, so that
/// no write elsewhere (an allocator's counter, say) takes it from the readers' caches.
struct Global {
    epoch: AtomicU64,
    membarrier: AtomicBool,
}

static GLOBAL: CachePadded<Global> = CachePadded::new(Global {
    epoch: AtomicU64::new(1),
    membarrier: AtomicBool::new(false),
});

/// One thread's reader slot: the epoch it pinned at, or 0.
#[derive(Default)]
struct Slot {
    active: AtomicU64,
}

/// Every slot ever handed out (leaked: at most one per thread alive at once), and the
/// indices of those whose threads have ended, for reuse.
struct Registry {
    slots: Vec<&'static CachePadded<Slot>>,
    free: Vec<usize>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    slots: Vec::new(),
    free: Vec::new(),
});

/// Whether the registry has decided on `membarrier` yet.
static DECIDED: AtomicBool = AtomicBool::new(false);

impl Registry {
    /// Takes a slot for the calling thread.
    fn register() -> (usize, &'static CachePadded<Slot>) {
        let mut r = REGISTRY.lock();
        if !DECIDED.load(Ordering::Relaxed) {
            // Decided under the lock, before the first slot exists; `collect` reads
            // the choice and runs its barrier under the same lock, so it never skips
            // the barrier while a registered reader pins without a fence.
            GLOBAL.membarrier.store(
                !fenced_for_test() && register_membarrier(),
                Ordering::Relaxed,
            );
            DECIDED.store(true, Ordering::Relaxed);
        }
        if let Some(i) = r.free.pop() {
            return (i, r.slots[i]);
        }
        let slot: &'static CachePadded<Slot> = Box::leak(Box::default());
        r.slots.push(slot);
        (r.slots.len() - 1, slot)
    }
}

/// The calling thread's slot, returned to the registry when the thread ends.
struct Reader {
    index: usize,
    slot: &'static CachePadded<Slot>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.slot.active.store(0, Ordering::Release);
        REGISTRY.lock().free.push(self.index);
    }
}

std::thread_local! {
    static READER: Reader = {
        let (index, slot) = Registry::register();
        Reader { index, slot }
    };
}

#[cfg(debug_assertions)]
std::thread_local! {
    /// Pins the thread holds, outer and nested (debug builds check the nesting order).
    static PINS_HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts a pin made (`+1`) or dropped (`-1`) on this thread; a debug build's check
/// that an outer pin is dropped last: its slot clear would leave the nested ones
/// unprotected. Returns the count before the change (`None` if the thread's count is
/// gone: then nothing is checked).
#[cfg(debug_assertions)]
fn count_pin(delta: isize) -> Option<usize> {
    PINS_HELD
        .try_with(|c| {
            let before = c.get();
            c.set(before.wrapping_add_signed(delta));
            before
        })
        .ok()
}

/// A pinned reader: while it lives, nothing retired after it was made is freed. Not
/// `Send`: it stands for the calling thread's slot. Pins are kept on the stack of a
/// call: a nested one is dropped before the one it is nested in (debug builds panic
/// otherwise), and none is kept in a thread-local (the thread's slot is cleared when
/// its thread-locals are).
pub(crate) struct Pin {
    slot: &'static CachePadded<Slot>,
    index: usize,
    /// Made while the thread was pinned already: the outer pin clears the slot.
    nested: bool,
    _thread: PhantomData<*const ()>,
}

impl std::fmt::Debug for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pin")
            .field("index", &self.index)
            .field("nested", &self.nested)
            .finish()
    }
}

impl Pin {
    /// The calling thread's index, unique among live threads (see [`OwnedCounter`]).
    #[inline]
    pub(crate) fn thread_index(&self) -> usize {
        self.index
    }
}

/// Pins the calling thread for lock-free reads; `None` while the thread is being torn
/// down (its slot is gone: the caller takes the lock instead). A nested pin keeps the
/// outermost one's epoch.
#[inline]
pub(crate) fn pin() -> Option<Pin> {
    READER
        .try_with(|r| {
            // Only this thread stores into its slot.
            let nested = r.slot.active.load(Ordering::Relaxed) != 0;
            if !nested {
                steps::enter(
                    &GLOBAL.epoch,
                    &r.slot.active,
                    !GLOBAL.membarrier.load(Ordering::Relaxed),
                );
            }
            #[cfg(debug_assertions)]
            count_pin(1);
            Pin {
                slot: r.slot,
                index: r.index,
                nested,
                _thread: PhantomData,
            }
        })
        .ok()
}

impl Drop for Pin {
    #[inline]
    fn drop(&mut self) {
        if !self.nested {
            steps::leave(&self.slot.active);
        }
        #[cfg(debug_assertions)]
        {
            if let Some(held) = count_pin(-1) {
                assert!(
                    self.nested || held == 1,
                    "an outer pin was dropped while {} pin(s) nested in it lived",
                    held.saturating_sub(1)
                );
            }
        }
    }
}

/// The retiring side's half: a full barrier on every thread of the process. False if
/// readers pin without a fence and the barrier failed (it does not once registered):
/// then no reader's slot can be trusted, and nothing is freed.
fn heavy_fence() -> bool {
    if GLOBAL.membarrier.load(Ordering::Relaxed) {
        return membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    }
    steps::fence();
    true
}

#[cfg(target_os = "linux")]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
#[cfg(target_os = "linux")]
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;
#[cfg(not(target_os = "linux"))]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: i32 = 0;

#[cfg(all(target_os = "linux", not(miri)))]
#[allow(unsafe_code)]
fn membarrier(cmd: libc::c_int) -> bool {
    // SAFETY: `membarrier` takes two integers and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_uint) == 0 }
}

/// Without the system call (elsewhere, and under Miri, which has none): readers
/// fence.
#[cfg(any(not(target_os = "linux"), miri))]
fn membarrier(_cmd: i32) -> bool {
    false
}

/// Registers the process for expedited private barriers; false where the kernel has
/// none (then readers fence).
#[cfg(target_os = "linux")]
fn register_membarrier() -> bool {
    membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)
}

#[cfg(not(target_os = "linux"))]
fn register_membarrier() -> bool {
    false
}

/// The variable that makes a unit-test process pin with fences whatever its kernel
/// has, so the fallback is tested too (see `fenced_readers_pass_the_reclamation_tests`).
#[cfg(test)]
const FENCED_FOR_TEST: &str = "IDEM_TEST_FENCED_READERS";

/// Whether this (unit-test) process was started to pin with fences.
#[cfg(test)]
fn fenced_for_test() -> bool {
    std::env::var_os(FENCED_FOR_TEST).is_some()
}

/// Outside tests, the kernel alone decides.
#[cfg(not(test))]
#[inline]
fn fenced_for_test() -> bool {
    false
}

/// Whether readers pin without a fence (the process has `membarrier`).
#[cfg(test)]
pub(crate) fn fence_free() -> bool {
    // Decided with the first slot.
    drop(pin());
    GLOBAL.membarrier.load(Ordering::Relaxed)
}

/// Garbage waiting for its readers.
struct Retired {
    /// The epoch before the advance that followed its replacement's publication.
    tag: u64,
    garbage: Box<dyn Send>,
    bytes: usize,
    pending: Arc<AtomicUsize>,
}

static LIMBO: Mutex<Vec<Retired>> = Mutex::new(Vec::new());
/// Items in [`LIMBO`], read without its lock to skip an empty collection.
static LIMBO_LEN: AtomicUsize = AtomicUsize::new(0);
/// Bytes of the items in [`LIMBO`].
static LIMBO_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The bytes waiting in the limbo at which a retirement collects at once. Below
/// them the garbage waits for the next [`collect`] (the maintenance pass's, or a
/// later retirement's): a collection runs a process-wide barrier (`membarrier`, a
/// system call that interrupts every core running the process), and a retirement
/// runs inside a claim that grew its shard's tables, so collecting at every one put
/// a barrier in hundreds of claims of a filling namespace (W3: about 430 a run).
const COLLECT_AT_BYTES: usize = 1 << 20;

/// The bytes waiting at which a retirement collects at once even when a background
/// collector was asked (see [`register_collector`]): one that has not got round to
/// it lets the garbage grow no further than this.
const COLLECT_HERE_AT_BYTES: usize = 16 << 20;

/// What asks a background thread to run [`collect_if_asked`].
type AskCollector = Arc<dyn Fn() + Send + Sync>;

/// Background threads (the engines' maintenance threads) that collect when asked,
/// each with its registration's number.
static COLLECTORS: Mutex<Vec<(u64, AskCollector)>> = Mutex::new(Vec::new());
/// Entries in [`COLLECTORS`], read without its lock.
static COLLECTORS_LEN: AtomicUsize = AtomicUsize::new(0);
static NEXT_COLLECTOR: AtomicU64 = AtomicU64::new(0);
/// A collector was asked to collect and has not yet begun.
static COLLECT_ASKED: AtomicBool = AtomicBool::new(false);

/// A background collector's place in [`COLLECTORS`], given up when dropped.
pub(crate) struct CollectorRegistration(u64);

impl Drop for CollectorRegistration {
    fn drop(&mut self) {
        let mut list = COLLECTORS.lock();
        list.retain(|(id, _)| *id != self.0);
        COLLECTORS_LEN.store(list.len(), Ordering::Relaxed);
    }
}

/// Registers a background thread that collects: a retirement that brings the
/// garbage waiting past [`COLLECT_AT_BYTES`] calls `ask` (which must return at once)
/// instead of collecting itself, and the thread runs [`collect_if_asked`]. The
/// collection's barrier and frees (a millisecond's tenth at a megabyte of index
/// arrays) then run on that thread, not inside the claim that grew a table.
pub(crate) fn register_collector(ask: impl Fn() + Send + Sync + 'static) -> CollectorRegistration {
    let id = NEXT_COLLECTOR.fetch_add(1, Ordering::Relaxed);
    let mut list = COLLECTORS.lock();
    list.push((id, Arc::new(ask)));
    COLLECTORS_LEN.store(list.len(), Ordering::Relaxed);
    CollectorRegistration(id)
}

/// Runs the collection a retirement asked of the background collectors, if one is
/// waiting (see [`register_collector`]).
pub(crate) fn collect_if_asked() {
    if COLLECT_ASKED.swap(false, Ordering::AcqRel) {
        collect();
    }
}

/// Whether a background collector was asked (or already had been) to collect the
/// garbage waiting: false if there is none, and the caller collects.
fn ask_a_collector() -> bool {
    #[cfg(test)]
    if !ASK_COLLECTORS.with(|a| a.get()) {
        return false;
    }
    if COLLECTORS_LEN.load(Ordering::Relaxed) == 0 {
        return false;
    }
    if COLLECT_ASKED.swap(true, Ordering::AcqRel) {
        // Asked already: the collection to come takes this garbage too.
        return true;
    }
    let ask = COLLECTORS.lock().first().map(|(_, ask)| Arc::clone(ask));
    match ask {
        Some(ask) => {
            ask();
            true
        }
        None => {
            COLLECT_ASKED.store(false, Ordering::Release);
            false
        }
    }
}

#[cfg(test)]
std::thread_local! {
    /// Whether retirements on this thread may hand their collection to a registered
    /// collector (tests that count collections made at once leave it off: another
    /// test's engine may have registered one meanwhile).
    static ASK_COLLECTORS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Retirements on this thread that collected at once.
    static COLLECTED_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Run (once) by a retirement on this thread once it has let the limbo go.
    static AFTER_PUSH: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// Frees `garbage` (an outgrown table, `bytes` long, whose replacement the caller has
/// already published) once no reader pinned before now can still read it, counting
/// it in `pending` until then.
pub(crate) fn retire<T: Send + 'static>(garbage: T, bytes: usize, pending: &Arc<AtomicUsize>) {
    pending.fetch_add(bytes, Ordering::Relaxed);
    let tag = steps::advance(&GLOBAL.epoch);
    let waiting = {
        let mut limbo = LIMBO.lock();
        limbo.push(Retired {
            tag,
            garbage: Box::new(garbage),
            bytes,
            pending: Arc::clone(pending),
        });
        LIMBO_LEN.store(limbo.len(), Ordering::Relaxed);
        // Counted under the limbo's lock, where a collection also takes its items'
        // bytes off, so that the count never runs below what the limbo holds.
        let waiting = LIMBO_BYTES.load(Ordering::Relaxed).saturating_add(bytes);
        LIMBO_BYTES.store(waiting, Ordering::Relaxed);
        waiting
    };
    #[cfg(test)]
    if let Some(f) = AFTER_PUSH.with(|h| h.borrow_mut().take()) {
        f();
    }
    if waiting >= COLLECT_AT_BYTES {
        if waiting < COLLECT_HERE_AT_BYTES && ask_a_collector() {
            return;
        }
        #[cfg(test)]
        COLLECTED_HERE.with(|c| c.set(c.get() + 1));
        collect();
    }
}

/// For tests: lets retirements on this thread ask a registered collector.
#[cfg(test)]
pub(crate) fn ask_collectors_from_this_thread(on: bool) {
    ASK_COLLECTORS.with(|a| a.set(on));
}

/// For tests: asks the collector `registration` names, as a retirement would.
/// False if it is not registered.
#[cfg(test)]
pub(crate) fn ask_collector(registration: &CollectorRegistration) -> bool {
    let ask = COLLECTORS
        .lock()
        .iter()
        .find(|(id, _)| *id == registration.0)
        .map(|(_, ask)| Arc::clone(ask));
    let Some(ask) = ask else {
        return false;
    };
    COLLECT_ASKED.store(true, Ordering::Release);
    ask();
    true
}

/// For tests: held by the tests whose retirements bring the limbo to a threshold, or
/// that count or ask for collections: one test's garbage or request would change what
/// another's retirement does.
#[cfg(test)]
pub(crate) static LIMBO_SIZED: Mutex<()> = Mutex::new(());

/// For tests: marks a collection as asked of a collector, as a retirement does,
/// without asking any.
#[cfg(test)]
pub(crate) fn mark_collection_asked() {
    COLLECT_ASKED.store(true, Ordering::Release);
}

/// For tests: whether a collection asked of a collector has not begun.
#[cfg(test)]
pub(crate) fn collection_asked() -> bool {
    COLLECT_ASKED.load(Ordering::Acquire)
}

/// For tests: whether a collector is registered under `id`.
#[cfg(test)]
pub(crate) fn collector_registered(id: u64) -> bool {
    COLLECTORS.lock().iter().any(|(i, _)| *i == id)
}

impl CollectorRegistration {
    /// For tests: its number.
    #[cfg(test)]
    pub(crate) fn id(&self) -> u64 {
        self.0
    }
}

/// For tests: retirements on this thread that collected at once.
#[cfg(test)]
pub(crate) fn collected_here() -> u64 {
    COLLECTED_HERE.with(|c| c.get())
}

/// Frees whatever retired garbage no pinned reader can still be reading.
pub(crate) fn collect() {
    collect_pausing(|| {}, false);
}

/// [`collect`], running `between` after the scan of the readers and before the free
/// (tests use it to retire and pin there, even with nothing retired yet).
fn collect_pausing(between: impl FnOnce(), even_if_empty: bool) {
    // This collection takes whatever a collector was asked to: a retirement from
    // here on asks again. (A swap, so that the limbo's length read below is read
    // after it: a retirement whose request this clears is seen by this scan.)
    COLLECT_ASKED.swap(false, Ordering::AcqRel);
    if LIMBO_LEN.load(Ordering::Relaxed) == 0 && !even_if_empty {
        return;
    }
    let bound = steps::bound(&GLOBAL.epoch);
    let oldest = {
        // The barrier is chosen and run under the registry's lock, so the choice is
        // the one every registered reader pins under: a reader registering later
        // pins after this scan, and sees every publication before it.
        let r = REGISTRY.lock();
        if !heavy_fence() {
            warn_barrier_failed();
            return;
        }
        steps::oldest(bound, r.slots.iter().map(|s| &s.active))
    };
    between();
    let freed: Vec<Retired> = {
        let mut limbo = LIMBO.lock();
        let (freed, kept) = std::mem::take(&mut *limbo)
            .into_iter()
            .partition(|r| steps::freeable(r.tag, oldest));
        *limbo = kept;
        LIMBO_LEN.store(limbo.len(), Ordering::Relaxed);
        let freed_bytes: usize = freed.iter().map(|r| r.bytes).sum();
        let waiting = LIMBO_BYTES.load(Ordering::Relaxed);
        LIMBO_BYTES.store(waiting.saturating_sub(freed_bytes), Ordering::Relaxed);
        freed
    };
    // Dropped outside the limbo's lock (a retirement's collection still runs under
    // its shard's lock): freeing a large table takes a while.
    for r in freed {
        drop(r.garbage);
        r.pending.fetch_sub(r.bytes, Ordering::Relaxed);
    }
}

/// Says once that retired tables are being kept: the barrier failed after it was
/// registered (a filter installed later, say), so no reader's slot can be trusted.
#[cold]
fn warn_barrier_failed() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "membarrier failed: outgrown hot-tier tables are kept, not freed (Stats::retired_bytes)"
        );
    }
}

/// Stripes given to threads of their own.
pub(crate) const OWNED: usize = 16;

/// A counter added to outside every lock without a read-modify-write: the threads
/// whose [`Pin::thread_index`] is below [`OWNED`] each write a stripe of their own with
/// a plain load and store (no other live thread has that index); the rest share one
/// last stripe, added to atomically. Summed when read.
#[derive(Debug, Default)]
pub(crate) struct OwnedCounter([CachePadded<AtomicU64>; OWNED + 1]);

impl OwnedCounter {
    /// Adds `n` for the thread `pin` stands for.
    #[inline]
    pub(crate) fn add(&self, pin: &Pin, n: u64) {
        if n == 0 {
            return;
        }
        let i = pin.thread_index();
        if i < OWNED {
            let own = &self.0[i];
            own.store(own.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        } else {
            self.0[OWNED].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The total so far.
    pub(crate) fn sum(&self) -> u64 {
        self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending() -> Arc<AtomicUsize> {
        Arc::new(AtomicUsize::new(0))
    }

    /// Collects until `p` drops to zero, or panics; other tests' readers may be pinned
    /// meanwhile, briefly.
    fn freed_eventually(p: &AtomicUsize) {
        for _ in 0..1_000_000 {
            collect();
            if p.load(Ordering::Relaxed) == 0 {
                return;
            }
            std::thread::yield_now();
        }
        panic!("never freed");
    }

    /// Marks when it is dropped.
    struct Canary(Arc<AtomicBool>);
    impl Drop for Canary {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_small_retirement_leaves_the_collection_to_a_later_call() {
        let _sized = LIMBO_SIZED.lock();
        let collected = || COLLECTED_HERE.with(|c| c.get());
        let p = pending();
        let before = collected();
        retire(vec![0u8; 64], 64, &p);
        // Not collected at once, unless other tests' garbage had already brought the
        // limbo to the threshold.
        if LIMBO_BYTES.load(Ordering::Relaxed) < COLLECT_AT_BYTES {
            assert_eq!(collected(), before, "a small retirement collected at once");
        }
        // Enough bytes for the threshold on their own: collected at once.
        let before = collected();
        retire(vec![0u8; 8], COLLECT_AT_BYTES, &p);
        assert_eq!(collected(), before + 1);
        freed_eventually(&p);
    }

    #[test]
    fn a_retirement_past_the_threshold_asks_a_collector_and_past_the_bound_collects() {
        let _sized = LIMBO_SIZED.lock();
        let p = pending();
        let registration = register_collector(|| {});
        ask_collectors_from_this_thread(true);
        let before = collected_here();
        // Past the threshold (unless other tests' garbage had brought the limbo
        // past the bound): a collector is asked, and nothing is collected here.
        if LIMBO_BYTES.load(Ordering::Relaxed) < COLLECT_HERE_AT_BYTES - COLLECT_AT_BYTES {
            retire(vec![0u8; 8], COLLECT_AT_BYTES, &p);
            assert_eq!(collected_here(), before, "handed to a collector");
        }
        // Past the bound: collected here whatever was asked.
        retire(vec![0u8; 8], COLLECT_HERE_AT_BYTES, &p);
        assert!(collected_here() > before);
        ask_collectors_from_this_thread(false);
        let id = registration.0;
        assert!(COLLECTORS.lock().iter().any(|(i, _)| *i == id));
        drop(registration);
        assert!(
            !COLLECTORS.lock().iter().any(|(i, _)| *i == id),
            "given up when dropped"
        );
        freed_eventually(&p);
    }

    #[test]
    fn a_collection_asked_of_a_collector_runs_once_and_is_asked_again_after_it() {
        let _sized = LIMBO_SIZED.lock();
        COLLECT_ASKED.store(true, Ordering::SeqCst);
        collect_if_asked();
        assert!(!COLLECT_ASKED.load(Ordering::SeqCst));
        COLLECT_ASKED.store(true, Ordering::SeqCst);
        collect();
        assert!(
            !COLLECT_ASKED.load(Ordering::SeqCst),
            "any collection takes what was asked"
        );
    }

    /// A retirement's bytes are counted before its garbage can be seen by a
    /// collection (both under the limbo's lock): a collection that freed an item
    /// before its retirement counted it would take the count below zero, an
    /// overflow that debug builds stop at, inside a shard's publication.
    #[test]
    fn a_retirement_is_counted_before_the_limbo_is_let_go() {
        let _sized = LIMBO_SIZED.lock();
        let p = pending();
        let seen = std::rc::Rc::new(std::cell::Cell::new(0usize));
        let s = std::rc::Rc::clone(&seen);
        AFTER_PUSH.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                s.set(LIMBO_BYTES.load(Ordering::Relaxed));
            }))
        });
        let bytes = COLLECT_AT_BYTES / 2;
        retire(0u8, bytes, &p);
        assert!(seen.get() >= bytes, "counted after the limbo was let go");
        freed_eventually(&p);
    }

    /// The limbo's byte count is what its items hold, after a collection that freed
    /// some of them as before: a count that kept freed bytes would stay past the
    /// threshold for good, and every retirement after it, however small, would
    /// collect (a process-wide barrier) or ask a collector.
    #[test]
    fn the_limbo_counts_the_bytes_it_holds_after_a_collection() {
        let _sized = LIMBO_SIZED.lock();
        let p = pending();
        retire(vec![0u8; 8], COLLECT_AT_BYTES, &p);
        freed_eventually(&p);
        let limbo = LIMBO.lock();
        let held: usize = limbo.iter().map(|r| r.bytes).sum();
        assert_eq!(LIMBO_BYTES.load(Ordering::Relaxed), held);
    }

    #[test]
    fn garbage_waits_for_a_reader_pinned_before_it_was_retired() {
        let p = pending();
        let dropped = Arc::new(AtomicBool::new(false));
        let reader = pin().unwrap();
        retire(Canary(Arc::clone(&dropped)), 100, &p);
        for _ in 0..10 {
            collect();
        }
        assert!(!dropped.load(Ordering::SeqCst), "freed under a reader");
        assert_eq!(p.load(Ordering::Relaxed), 100);
        drop(reader);
        freed_eventually(&p);
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn a_nested_pin_keeps_the_outer_epoch() {
        let p = pending();
        let outer = pin().unwrap();
        retire(vec![0u8; 64], 64, &p);
        // A pin taken and dropped inside does not let the garbage go.
        drop(pin().unwrap());
        collect();
        assert_eq!(p.load(Ordering::Relaxed), 64);
        drop(outer);
        freed_eventually(&p);
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "an outer pin was dropped while 1 pin(s) nested in it lived")]
    fn an_outer_pin_dropped_before_its_nested_one_is_caught() {
        let outer = pin().unwrap();
        let inner = pin().unwrap();
        assert!(inner.nested && !outer.nested);
        drop(outer);
        drop(inner);
    }

    #[cfg(debug_assertions)]
    #[test]
    fn pins_dropped_in_order_pass_the_check() {
        let outer = pin().unwrap();
        let inner = pin().unwrap();
        drop(inner);
        drop(outer);
        assert_eq!(count_pin(0), Some(0));
        let again = pin().unwrap();
        assert!(!again.nested, "the slot was cleared by the outer pin");
    }

    #[test]
    fn a_reader_pinned_after_the_retirement_does_not_hold_it() {
        let p = pending();
        retire(vec![0u8; 32], 32, &p);
        let later = pin().unwrap();
        freed_eventually(&p);
        drop(later);
    }

    #[test]
    fn a_reader_on_another_thread_holds_garbage_until_it_unpins() {
        let p = pending();
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let pin = pin().unwrap();
            pinned_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(pin);
        });
        pinned_rx.recv().unwrap();
        retire(vec![0u8; 16], 16, &p);
        collect();
        assert_eq!(
            p.load(Ordering::Relaxed),
            16,
            "freed under the other thread"
        );
        go_tx.send(()).unwrap();
        t.join().unwrap();
        freed_eventually(&p);
    }

    #[test]
    fn live_threads_have_distinct_indices_and_ended_ones_are_reused() {
        let barrier = std::sync::Barrier::new(8);
        let indices: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        let i = pin().unwrap().thread_index();
                        // All alive at once.
                        barrier.wait();
                        i
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut sorted = indices.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 8, "{indices:?}");
        // The registry does not grow past the threads alive at once: threads that
        // follow one another reuse one slot. Other tests' threads register meanwhile
        // (up to twenty alive at once in one test, two tests at a time), so the bound
        // leaves room for them, and still fails if each of these threads took a new
        // slot.
        let (threads, bound) = (crate::under_miri(200, 10), crate::under_miri(100, 9));
        let before = REGISTRY.lock().slots.len();
        for _ in 0..threads {
            std::thread::spawn(|| drop(pin())).join().unwrap();
        }
        let grown = REGISTRY.lock().slots.len() - before;
        assert!(
            grown <= bound,
            "{grown} new slots for {threads} threads in turn"
        );
    }

    #[test]
    fn owned_and_shared_stripes_count_exactly() {
        const ADDS: usize = crate::under_miri(10_000, 50);
        let c = OwnedCounter::default();
        // More threads alive at once than there are owned stripes.
        let barrier = std::sync::Barrier::new(OWNED + 4);
        std::thread::scope(|s| {
            for _ in 0..OWNED + 4 {
                s.spawn(|| {
                    let pin = pin().unwrap();
                    barrier.wait();
                    for _ in 0..ADDS {
                        c.add(&pin, 1);
                    }
                });
            }
        });
        assert_eq!(c.sum(), (OWNED as u64 + 4) * ADDS as u64);
    }

    /// The threads past the first [`OWNED`] alive at once share the last stripe:
    /// theirs, added to at the same time, loses no addition.
    #[test]
    fn threads_sharing_the_last_stripe_lose_no_addition() {
        const PAST_OWNED: usize = 4;
        const ADDS: u64 = crate::under_miri(1_000_000, 50) as u64;
        let c = OwnedCounter::default();
        let barrier = std::sync::Barrier::new(OWNED + PAST_OWNED);
        // The threads on the shared stripe, and those of them ready to add.
        let (sharing, ready) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..OWNED + PAST_OWNED {
                s.spawn(|| {
                    let pin = pin().unwrap();
                    let shares = pin.thread_index() >= OWNED;
                    if shares {
                        sharing.fetch_add(1, Ordering::SeqCst);
                    }
                    // All registered at once: indices are distinct among live threads,
                    // so at least `PAST_OWNED` of them are past `OWNED`.
                    barrier.wait();
                    if !shares {
                        return;
                    }
                    // The sharing threads begin together.
                    ready.fetch_add(1, Ordering::SeqCst);
                    while ready.load(Ordering::SeqCst) < sharing.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    for _ in 0..ADDS {
                        c.add(&pin, 1);
                    }
                });
            }
        });
        let sharing = sharing.into_inner() as u64;
        assert!(
            sharing >= PAST_OWNED as u64,
            "{sharing} threads on the shared stripe"
        );
        assert_eq!(c.0[OWNED].load(Ordering::Relaxed), sharing * ADDS);
        assert_eq!(c.sum(), sharing * ADDS, "only the shared stripe added to");
    }

    #[cfg(target_os = "linux")]
    #[test]
    #[cfg_attr(miri, ignore = "Miri has no membarrier system call")]
    fn readers_pin_without_a_fence_where_the_kernel_has_the_barrier() {
        // MEMBARRIER_CMD_QUERY: the commands this kernel (and any filter) allows.
        #[allow(unsafe_code)]
        // SAFETY: as in `membarrier`.
        let cmds =
            unsafe { libc::syscall(libc::SYS_membarrier, 0 as libc::c_int, 0 as libc::c_uint) };
        let available = cmds > 0 && cmds & i64::from(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0;
        assert_eq!(
            fence_free(),
            available && !fenced_for_test(),
            "commands {cmds:#x}, fenced for the test: {}",
            fenced_for_test()
        );
    }

    /// The tests of the readers' protection, run again in a process of their own whose
    /// readers pin with a fence and whose collections fence instead of calling
    /// `membarrier` (the mode of a kernel or sandbox without it). The mode is chosen
    /// once per process, so this one cannot switch it for itself.
    #[cfg(target_os = "linux")]
    #[test]
    #[cfg_attr(miri, ignore = "Miri starts no process")]
    fn fenced_readers_pass_the_reclamation_tests() {
        if fenced_for_test() {
            return; // the child: the tests it runs are the others
        }
        let filters = [
            "hot::reclaim::tests::",
            "engine::tests::the_lock_free_read_",
            "engine::tests::outgrown_tables_are_reported_until_maintenance_frees_them",
            "engine::tests::batches_read_without_the_lock_while_another_thread_grows_the_shard",
            "engine::tests::single_claims_read_without_the_lock",
        ];
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(filters)
            .args(["--skip", "fenced_readers_pass_the_reclamation_tests"])
            .args(["--test-threads", "2"])
            .env(FENCED_FOR_TEST, "1")
            .output()
            .expect("the test binary runs again");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "fenced run failed:\n{text}");
        for name in [
            "hot::reclaim::tests::readers_pin_without_a_fence_where_the_kernel_has_the_barrier",
            "hot::reclaim::tests::garbage_retired_after_a_scan_waits_for_the_next",
            "hot::reclaim::tests::a_reader_on_another_thread_holds_garbage_until_it_unpins",
            "engine::tests::the_lock_free_read_finds_every_done_key_after_the_tables_grow",
            "engine::tests::single_claims_read_without_the_lock_while_another_thread_grows_the_shard",
            "engine::tests::batches_read_without_the_lock_while_another_thread_grows_the_shard",
        ] {
            assert!(
                text.contains(&format!("test {name} ... ok")),
                "{name} did not pass in the fenced run:\n{text}"
            );
        }
    }

    #[test]
    fn garbage_retired_after_a_scan_waits_for_the_next() {
        // A collection that scanned the readers before a reader pinned and a table
        // was retired under it must not free that table.
        let p = pending();
        let dropped = Arc::new(AtomicBool::new(false));
        let mut reader = None;
        collect_pausing(
            || {
                reader = pin();
                retire(Canary(Arc::clone(&dropped)), 50, &p);
            },
            true,
        );
        assert!(reader.is_some());
        assert!(!dropped.load(Ordering::SeqCst), "freed under a reader");
        assert_eq!(p.load(Ordering::Relaxed), 50);
        drop(reader);
        freed_eventually(&p);
        assert!(dropped.load(Ordering::SeqCst));
    }
}
