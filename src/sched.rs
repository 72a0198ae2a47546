//! How background threads are scheduled: under Linux's `SCHED_BATCH`, so that a
//! background thread that wakes never preempts a running thread (a claiming one) to
//! run at once. It keeps its share of the processor: it runs on an idle core, or when
//! the running thread's time slice ends. See [`EngineBuilder::batch_background_threads`]
//! (crate::EngineBuilder::batch_background_threads).
//!
//! Elsewhere than Linux these change nothing.

/// Puts the calling thread under `SCHED_BATCH`. Best effort: false if the system
/// refused it (or is not Linux). (The loom build starts no background thread.)
#[cfg_attr(idem_loom, allow(dead_code))]
pub(crate) fn batch_this_thread() -> bool {
    batch(0)
}

/// Puts every thread of this process whose name begins with `prefix` under
/// `SCHED_BATCH`; returns how many it did.
#[cfg_attr(not(feature = "durable"), allow(dead_code))]
pub(crate) fn batch_threads_named(prefix: &str) -> usize {
    threads_named(prefix)
        .into_iter()
        .filter(|&tid| batch(tid))
        .count()
}

/// The ids of this process's threads whose name begins with `prefix` (none where
/// `/proc` cannot tell). The kernel keeps a thread's first 15 bytes of name.
#[cfg_attr(not(feature = "durable"), allow(dead_code))]
pub(crate) fn threads_named(prefix: &str) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|name| name.starts_with(prefix))
        })
        .filter_map(|t| t.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&tid| tid > 0)
        .collect()
}

/// Puts thread `tid` (0: the calling one) under `SCHED_BATCH`.
fn batch(tid: i32) -> bool {
    // (Miri has no scheduler to ask: as elsewhere, the thread runs as it is.)
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let param = libc::sched_param { sched_priority: 0 };
        #[allow(unsafe_code)]
        // SAFETY: `param` is a valid `sched_param` that outlives the call; the call
        // reads it and changes only the scheduling of thread `tid` (an unknown or
        // foreign thread id is refused with an error, not undefined behaviour).
        let rc = unsafe { libc::sched_setscheduler(tid, libc::SCHED_BATCH, &param) };
        rc == 0
    }
    #[cfg(any(not(target_os = "linux"), miri))]
    {
        let _ = tid;
        false
    }
}

/// Whether thread `tid` (0: the calling one) runs under `SCHED_BATCH` (tests).
#[cfg(test)]
pub(crate) fn is_batch(tid: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        #[allow(unsafe_code)]
        // SAFETY: reads the scheduling policy of `tid`; no memory is passed.
        let policy = unsafe { libc::sched_getscheduler(tid) };
        policy == libc::SCHED_BATCH
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = tid;
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_put_under_batch_scheduling_runs_under_it() {
        let t = std::thread::Builder::new()
            .name("idem-sched-test".into())
            .spawn(|| {
                let before = is_batch(0);
                let done = batch_this_thread();
                (before, done, is_batch(0))
            })
            .unwrap();
        assert_eq!(t.join().unwrap(), (false, true, true));
    }

    #[test]
    fn threads_are_found_by_name() {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("idem-sched-nm".into())
            .spawn(move || {
                ready_tx.send(()).unwrap();
                done_rx.recv().unwrap();
                is_batch(0)
            })
            .unwrap();
        ready_rx.recv().unwrap();
        let found = threads_named("idem-sched-nm");
        assert_eq!(found.len(), 1);
        assert!(!is_batch(found[0]));
        assert_eq!(batch_threads_named("idem-sched-nm"), 1);
        assert!(is_batch(found[0]));
        done_tx.send(()).unwrap();
        assert!(t.join().unwrap(), "the thread sees its own policy changed");
    }
}
