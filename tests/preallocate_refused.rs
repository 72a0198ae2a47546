//! A preallocated index the allocator refuses is refused before the durable tier is
//! opened. A test binary of its own: it lowers the process's address-space limit, so
//! that the allocator really refuses (under overcommit a large request is granted).

#![cfg(all(feature = "durable", not(idem_loom), target_os = "linux"))]

mod util;

use idem::{Engine, Error, ManualClock, NamespaceConfig, MAX_KEYS_LIMIT};
use util::*;

#[test]
fn a_refused_preallocation_leaves_the_database_as_it_was() {
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
    // 2^31 keys in one shard: an index of 2^28 buckets, 16 GiB, over the limit.
    let limit = libc::rlimit {
        rlim_cur: 4 << 30,
        rlim_max: libc::RLIM_INFINITY,
    };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
    let big = small()
        .max_keys(MAX_KEYS_LIMIT)
        .shards(1)
        .preallocate(true)
        .expected_keys(1_000);
    let refused = open(&[("n", small()), ("big", big)]).unwrap_err();
    assert!(
        matches!(refused, Error::OutOfMemory { ref namespace, .. } if namespace == "big"),
        "{refused:?}"
    );
    // Before, the open had made "big"'s column families first: every later open
    // found a namespace that never ran.
    let engine = open(&[("n", small())]).expect("the next open");
    assert!(
        engine.unconfigured_namespaces().is_empty(),
        "{:?}",
        engine.unconfigured_namespaces()
    );
    assert_eq!(idem::namespaces(dir.path()).unwrap(), vec!["n".to_owned()]);
}
