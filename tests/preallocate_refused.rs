//! A preallocated index the allocator refuses, or preallocations past the memory the
//! process may use, are refused before the durable tier is opened. A test binary of
//! its own: it lowers the process's address-space limit, so that the allocator really
//! refuses (under overcommit a large request is granted).

#![cfg(all(feature = "durable", not(idem_loom), target_os = "linux"))]

mod util;

use idem::{Engine, Error, ManualClock, MemoryLimit, NamespaceConfig, MAX_KEYS_LIMIT};
use util::*;

fn preallocated(max_keys: usize) -> NamespaceConfig {
    small()
        .max_keys(max_keys)
        .shards(1)
        .preallocate(true)
        .expected_keys(1_000)
}

/// Lowers this process's address-space limit to 4 GiB, so that the allocator refuses
/// a larger request (under overcommit it would grant it).
fn address_space_of_4_gib() {
    let limit = libc::rlimit {
        rlim_cur: 4 << 30,
        rlim_max: libc::RLIM_INFINITY,
    };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
}

#[test]
fn a_refused_preallocation_leaves_the_database_as_it_was() {
    address_space_of_4_gib();
    // One index of 2^28 buckets (16 GiB); two of 2^25 (2 GiB each), which fit one
    // at a time but not together.
    let cases: [&[(&str, NamespaceConfig)]; 2] = [
        &[("big", preallocated(MAX_KEYS_LIMIT))],
        &[
            ("half", preallocated(1 << 28)),
            ("other", preallocated(1 << 28)),
        ],
    ];
    for extra in cases {
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let open = |namespaces: &[(&str, NamespaceConfig)]| {
            let mut b = Engine::builder()
                .clock(clock.clone())
                .maintenance_interval(None)
                .durable(dir.path());
            for (name, cfg) in namespaces {
                b = b.namespace(name, cfg.clone());
            }
            b.build()
        };
        drop(open(&[("n", small())]).expect("the first open"));
        let mut asked = vec![("n", small())];
        asked.extend(extra.iter().cloned());
        let refused = open(&asked).unwrap_err();
        assert!(
            matches!(refused, Error::OutOfMemory { what, .. } if what.contains("preallocated")),
            "{refused:?}"
        );
        // Before, the open had made the namespaces' column families first: every
        // later open found namespaces that never ran.
        let engine = open(&[("n", small())]).expect("the next open");
        assert!(
            engine.unconfigured_namespaces().is_empty(),
            "{:?}",
            engine.unconfigured_namespaces()
        );
        assert_eq!(idem::namespaces(dir.path()).unwrap(), vec!["n".to_owned()]);
    }
}

/// Preallocations that together take more than the memory this process may use are
/// refused by what they would take, before any is made (under Linux's overcommit
/// the allocator grants them, and writing them at build would end the process):
/// the error says so, where the address-space limit below would only have the
/// allocator refuse.
#[test]
fn preallocations_past_the_process_memory_are_refused_before_any_is_made() {
    address_space_of_4_gib();
    let available = MemoryLimit::of_this_process()
        .expect("Linux reports its memory")
        .available();
    // The largest namespace takes about 72 GiB: as many as it takes to pass the
    // memory available.
    let count = (available / (64 << 30) + 1) as usize;
    let dir = TempDir::new();
    let mut b = Engine::builder()
        .clock(ManualClock::new(T0))
        .maintenance_interval(None)
        .durable(dir.path());
    for i in 0..count {
        b = b.namespace(
            &format!("big{i}"),
            preallocated(MAX_KEYS_LIMIT).shards(4096),
        );
    }
    let refused = b.build().unwrap_err();
    match &refused {
        Error::OutOfMemory { what, .. } => assert!(
            what.contains("more than the memory this process may use"),
            "{refused:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        refused.to_string().contains("preallocate(false)"),
        "{refused}"
    );
    // Nothing was opened: the directory is as it was, empty.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
