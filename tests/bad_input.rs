//! Bad input gets a typed error and changes nothing.

#![cfg(not(idem_loom))]

mod util;

use idem::{Engine, Error, KeyError, NamespaceConfig};
use std::time::Duration;
use util::*;

#[test]
fn empty_key_is_refused_everywhere() {
    let (e, ns, _c) = engine_with(small());
    let empty = Error::InvalidKey(KeyError::Empty);
    assert_eq!(ns.claim(b"").unwrap_err(), empty);
    assert_eq!(ns.claim_with_payload(b"", b"p").unwrap_err(), empty);
    assert_eq!(ns.check(b"").unwrap_err(), empty);
    assert_eq!(ns.check_with_payload(b"", b"p").unwrap_err(), empty);
    assert_eq!(ns.forget(b"").unwrap_err(), empty);
    assert_eq!(e.stats().resident_keys, 0);
    assert_eq!(e.stats().acquired, 0);
}

#[test]
fn oversized_key_is_refused_and_the_limit_is_inclusive() {
    let (e, ns, _c) = engine_with(small().max_key_len(16));
    let long = [b'x'; 17];
    assert_eq!(
        ns.claim(&long).unwrap_err(),
        Error::InvalidKey(KeyError::TooLong { len: 17, max: 16 })
    );
    assert_eq!(
        ns.check_with_payload(&long, b"p").unwrap_err(),
        Error::InvalidKey(KeyError::TooLong { len: 17, max: 16 })
    );
    assert_eq!(e.stats().resident_keys, 0);
    assert!(ns.claim(&long[..16]).unwrap().is_acquired());
}

#[test]
fn default_key_limit_is_4096() {
    let (_e, ns, _c) = engine_with(small());
    assert!(ns.claim(&[7u8; 4096]).unwrap().is_acquired());
    assert!(matches!(
        ns.claim(&[7u8; 4097]),
        Err(Error::InvalidKey(KeyError::TooLong {
            len: 4097,
            max: 4096
        }))
    ));
}

#[test]
fn unknown_namespace() {
    let (e, _ns, _c) = engine_with(small());
    assert_eq!(
        e.namespace("nope").unwrap_err(),
        Error::UnknownNamespace("nope".into())
    );
}

#[test]
fn oversized_result_is_refused_and_the_claim_stays_held() {
    let (e, ns, clock) = engine_with(small().max_result_len(8));
    let g = acquire(&ns, b"k");
    assert_eq!(
        g.complete_with_result(&[0u8; 9]).unwrap_err(),
        Error::ResultTooLarge { len: 9, max: 8 }
    );
    assert!(ns.claim(b"k").unwrap().is_in_progress());
    assert_eq!(e.stats().completions, 0);
    clock.advance(secs(5));
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn a_key_limit_past_what_a_dead_letter_stores_is_refused() {
    let build = |max: usize| {
        Engine::builder()
            .namespace("n", small().max_key_len(max))
            .build()
            .map(|_| ())
    };
    // A dead letter stores its key's length in 32 bits.
    for max in [u32::MAX as usize + 1, usize::MAX] {
        match build(max) {
            Err(Error::InvalidConfig { reason, .. }) => {
                assert!(reason.contains("max_key_len"), "{reason}")
            }
            other => panic!("{max}: {other:?}"),
        }
    }
    build(u32::MAX as usize).unwrap();
}

#[test]
fn invalid_configurations_are_refused() {
    let bad = [
        NamespaceConfig::new().ttl(ms(0)),
        NamespaceConfig::new().lease(ms(0)),
        NamespaceConfig::new().max_keys(0),
        NamespaceConfig::new().max_key_len(0),
        NamespaceConfig::new().shards(0),
        NamespaceConfig::new().shards(4097),
        NamespaceConfig::new().max_result_len((1 << 20) + 1),
        NamespaceConfig::new().ttl(secs(20 * 24 * 3600)),
        NamespaceConfig::new().journal_slots(0),
        NamespaceConfig::new().journal_slots(idem::MAX_JOURNAL_SLOTS + 1),
        // Past 2^50 ms a record's expiry was cut to its low 64 bits (2^62 s of them
        // are 0 ms): every record expired as it was written.
        NamespaceConfig::new().retention(Duration::from_secs(1 << 62)),
        NamespaceConfig::new().retention(Duration::MAX),
        NamespaceConfig::new().retention(idem::MAX_RETENTION + ms(1)),
        // A sync thread that never pauses.
        NamespaceConfig::new().sync(idem::SyncPolicy::Periodic(Duration::from_nanos(1))),
    ];
    for cfg in bad {
        let r = Engine::builder().namespace("n", cfg.clone()).build();
        assert!(
            matches!(r, Err(Error::InvalidConfig { .. })),
            "{cfg:?} must be refused"
        );
    }
    assert!(Engine::builder()
        .namespace(
            "n",
            NamespaceConfig::new().journal_slots(idem::MAX_JOURNAL_SLOTS)
        )
        .build()
        .is_ok());
    // A coarser tick admits the long TTL.
    assert!(Engine::builder()
        .namespace("n", NamespaceConfig::new().ttl(secs(20 * 24 * 3600)))
        .tick(ms(10))
        .build()
        .is_ok());
    assert!(matches!(
        Engine::builder()
            .namespace("n", NamespaceConfig::new())
            .namespace("n", NamespaceConfig::new())
            .build(),
        Err(Error::DuplicateNamespace(n)) if n == "n"
    ));
    assert!(matches!(
        Engine::builder()
            .namespace("", NamespaceConfig::new())
            .build(),
        Err(Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        Engine::builder().tick(ms(0)).build(),
        Err(Error::InvalidConfig { .. })
    ));
    // Ticks are whole milliseconds: a fraction was dropped without a word.
    assert!(matches!(
        Engine::builder().tick(std::time::Duration::from_micros(1_999)).build(),
        Err(Error::InvalidConfig { reason, .. }) if reason.contains("whole number")
    ));
    assert!(Engine::builder().tick(ms(2)).build().is_ok());
    // A name whose saved prefilter's file name (the name in hexadecimal) would not
    // fit a file name is refused (tests/prefilter.rs opens the longest accepted).
    assert!(matches!(
        Engine::builder()
            .namespace(
                &"n".repeat(idem::MAX_NAMESPACE_LEN + 1),
                NamespaceConfig::new()
            )
            .build(),
        Err(Error::InvalidConfig { .. })
    ));
    // RocksDB takes column family names as C strings: a NUL byte is refused here,
    // before any directory is opened.
    assert!(matches!(
        Engine::builder()
            .namespace("orders\0", NamespaceConfig::new())
            .build(),
        Err(Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        Engine::builder().state_family("a\0b").build(),
        Err(Error::InvalidConfig { .. })
    ));
    // A state family declared twice, as a namespace named twice.
    assert!(matches!(
        Engine::builder()
            .state_family("ledger")
            .state_family("audit")
            .state_family("ledger")
            .build(),
        Err(Error::InvalidConfig { reason, .. }) if reason.contains("declared twice")
    ));
    // A maintenance thread that never pauses.
    assert!(matches!(
        Engine::builder()
            .maintenance_interval(Some(Duration::ZERO))
            .build(),
        Err(Error::InvalidConfig { .. })
    ));
    assert!(Engine::builder()
        .maintenance_interval(Some(ms(1)))
        .namespace(
            "n",
            NamespaceConfig::new()
                .retention(idem::MAX_RETENTION)
                .sync(idem::SyncPolicy::Periodic(ms(1)))
        )
        .build()
        .is_ok());
}

#[test]
fn the_longest_ttl_reports_its_default_retention_without_overflowing() {
    let cfg = NamespaceConfig::new().ttl(Duration::MAX);
    assert_eq!(cfg.get_retention(), Duration::MAX);
    // ...which the builder then refuses, as it does the TTL itself.
    assert!(matches!(
        Engine::builder().namespace("n", cfg).tick(secs(60)).build(),
        Err(Error::InvalidConfig { .. })
    ));
}

#[test]
fn errors_display_without_debug_formatting() {
    let e = Error::CapacityExceeded {
        namespace: "orders".into(),
        max_keys: 10,
    };
    assert_eq!(
        e.to_string(),
        "namespace \"orders\" is full: it holds its limit of 10 unexpired keys"
    );
    let k = Error::InvalidKey(KeyError::TooLong { len: 5, max: 4 });
    assert_eq!(
        k.to_string(),
        "invalid key: the key is 5 bytes long, over the limit of 4"
    );
    assert!(std::error::Error::source(&k).is_some());
}

#[test]
fn the_prefilter_default_of_an_unchecked_config_saturates_instead_of_overflowing() {
    let cfg = idem::NamespaceConfig::new()
        .max_keys(usize::MAX)
        .ttl(std::time::Duration::from_millis(1))
        .retention(std::time::Duration::MAX);
    assert_eq!(cfg.get_expected_keys(), usize::MAX);
}

#[test]
fn the_finest_tick_keeps_the_ttl_and_lease_within_2_pow_30_ticks() {
    use std::time::Duration;
    let day = Duration::from_secs(86_400);
    let ms = Duration::from_millis;
    assert_eq!(idem::NamespaceConfig::new().finest_tick(), ms(1));
    // 2^30 ms is 12.4 days: 30 days take 3 ms ticks, and build at them.
    let month = idem::NamespaceConfig::new().ttl(day * 30);
    assert_eq!(month.finest_tick(), ms(3));
    for (tick, ok) in [(ms(2), false), (ms(3), true)] {
        let built = idem::Engine::builder()
            .tick(tick)
            .namespace("ns", month.clone())
            .build();
        assert_eq!(built.is_ok(), ok, "{tick:?}");
    }
    assert_eq!(
        idem::NamespaceConfig::new().lease(day * 13).finest_tick(),
        ms(2)
    );
}

#[test]
fn an_empty_durable_path_or_one_with_a_nul_byte_is_a_configuration_error() {
    // Before, both reached the store, whose refusal read as a failure of the disk
    // (`Error::Store`, "While mkdir if missing", "open journal").
    for (path, says) in [("", "empty"), ("idem-db\0x", "NUL")] {
        let r = Engine::builder()
            .durable(path)
            .namespace("n", NamespaceConfig::new())
            .build();
        assert!(
            matches!(&r, Err(Error::InvalidConfig { reason, .. }) if reason.contains(says)),
            "{path:?}: {r:?}"
        );
    }
    // Nothing was made where a relative path would have put it.
    assert!(!std::path::Path::new("idem-db").exists());
}

/// A durable path that is a file, or lies under one, is an `Error::Store` saying the
/// path is not a directory, and the file is left as it was. Before, the error blamed
/// the journal ("open journal ... Not a directory").
#[cfg(feature = "durable")]
#[test]
fn a_durable_path_that_is_a_file_or_under_one_is_refused_as_such() {
    let tmp = util::TempDir::new();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"not a database").unwrap();
    for path in [file.clone(), file.join("db")] {
        let r = Engine::builder()
            .durable(&path)
            .namespace("n", NamespaceConfig::new())
            .build();
        assert!(
            matches!(&r, Err(Error::Store(e)) if e.operation() == "open"
                && e.to_string().contains("database path")),
            "{path:?}: {r:?}"
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"not a database");
}
