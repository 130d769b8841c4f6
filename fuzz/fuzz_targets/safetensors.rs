//! The safetensors reader on arbitrary bytes as `model.safetensors`, then every tensor of an accepted
//! file read back as the loaders read it (raw bytes and converted to f32).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tgi_formats::safetensors::SafetensorsSet;
use tgi_formats::TensorSource;

#[path = "scratch.rs"]
mod scratch;

fuzz_target!(|data: &[u8]| {
    scratch::write("model.safetensors", data);
    let Ok(set) = SafetensorsSet::open_dir(scratch::dir()) else {
        return;
    };
    for meta in set.tensors() {
        let raw = set.raw_bytes(&meta.name).expect("a listed tensor has bytes");
        assert!(raw.len() <= data.len());
        if let Ok(values) = set.read_f32(&meta.name) {
            assert_eq!(values.len() as u64, meta.shape.iter().map(|&d| d as u64).product::<u64>());
        }
    }
});
