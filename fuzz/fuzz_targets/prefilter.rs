//! Random completions, clock advances, generation drops, restarts (the filter rebuilt
//! from what the store holds) and forgets against a model of the durable tier: a key
//! stored within retention is never declared new.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idem::__fuzz::prefilter_model(data);
});
