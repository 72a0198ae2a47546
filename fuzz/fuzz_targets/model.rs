//! Fuzzer input as an operation sequence for the model check of `tests/model.rs`:
//! the engine must answer exactly as the reference model does, or this panics.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/model_core/mod.rs"]
mod model_core;

fuzz_target!(|data: &[u8]| model_core::run_bytes(data));
