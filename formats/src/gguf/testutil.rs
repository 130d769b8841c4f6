//! Test helper that emits raw GGUF bytes field by field, so tests can build malformed files.

use super::value::{encode_str, Value};

/// A GGUF byte stream under construction.
#[derive(Clone, Default)]
pub(crate) struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version and the two counts.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::default().bytes(b"GGUF").u32(version).u64(n_tensors).u64(n_kv)
    }

    /// Appends raw bytes.
    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }

    /// Appends a u32.
    pub fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a u64.
    pub fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a GGUF string.
    pub fn str(mut self, s: &str) -> Raw {
        encode_str(s, &mut self.0);
        self
    }

    /// Appends a well-formed metadata entry.
    pub fn kv(mut self, key: &str, v: &Value) -> Raw {
        encode_str(key, &mut self.0);
        self.0.extend_from_slice(&v.value_type().id().to_le_bytes());
        v.encode(&mut self.0);
        self
    }

    /// Appends a tensor info with a raw type id.
    pub fn tensor(self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(type_id).u64(offset)
    }

    /// Pads with zeros to a multiple of `align`.
    pub fn pad(mut self, align: usize) -> Raw {
        let len = self.0.len().next_multiple_of(align);
        self.0.resize(len, 0);
        self
    }

    /// Appends `n` zero bytes.
    pub fn zeros(mut self, n: usize) -> Raw {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}
