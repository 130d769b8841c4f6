//! Streaming GGUF v3 writer: the header is planned up front, tensor bytes are written one tensor at a
//! time, so memory use does not depend on the model size.

use std::collections::HashSet;
use std::io::{Read, Write};

use super::value::{encode_str, Value};
use super::{
    align_up, tensor_size, GgufError, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS, MAX_NAME_LEN, VERSION,
};
use crate::GgmlType;

/// A tensor to be written: name, dims in ggml order (`dims[0]` innermost) and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// Tensor name (below 64 bytes, unique).
    pub name: String,
    /// Dimensions in ggml order (1 to 4).
    pub dims: Vec<u64>,
    /// Element encoding.
    pub ty: GgmlType,
}

impl TensorSpec {
    /// A spec from a PyTorch-order (row-major) shape, reversing it to ggml order.
    pub fn from_torch_shape(name: impl Into<String>, shape: &[usize], ty: GgmlType) -> TensorSpec {
        TensorSpec { name: name.into(), dims: shape.iter().rev().map(|&d| d as u64).collect(), ty }
    }
}

/// Plans a GGUF v3 file: metadata in order, tensor infos with gap-free offsets, each tensor padded to the alignment (32 default).
pub struct GgufWriter<W: Write> {
    out: W,
    /// Planned tensors in order, with their byte sizes.
    plan: Vec<(String, u64)>,
    /// Index of the next tensor to write.
    next: usize,
    alignment: u64,
}

impl<W: Write> GgufWriter<W> {
    /// Validates the plan and writes header, metadata, tensor infos and the padding before the data.
    /// `out` should be buffered and positioned at the start of the file.
    pub fn new(mut out: W, metadata: Vec<(String, Value)>, tensors: Vec<TensorSpec>) -> Result<Self, GgufError> {
        let alignment = check_metadata(&metadata)?;
        let sizes = check_tensors(&tensors)?;

        let mut head = Vec::new();
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (key, value) in &metadata {
            encode_str(key, &mut head);
            head.extend_from_slice(&value.value_type().id().to_le_bytes());
            value.encode(&mut head);
        }
        let mut offset = 0u64;
        for (t, &size) in tensors.iter().zip(&sizes) {
            encode_str(&t.name, &mut head);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.ty.id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offset = align_up(size, alignment).and_then(|padded| offset.checked_add(padded)).ok_or_else(|| {
                GgufError::BadTensorSpec { name: t.name.clone(), reason: "total data size overflows u64".into() }
            })?;
        }
        head.resize(padded_len(head.len() as u64, alignment) as usize, 0);
        out.write_all(&head).map_err(GgufError::Write)?;
        let plan = tensors.into_iter().zip(sizes).map(|(t, size)| (t.name, size)).collect();
        Ok(GgufWriter { out, plan, next: 0, alignment })
    }

    /// Writes the next planned tensor's bytes and its padding; `bytes` must be exactly its size.
    pub fn write_tensor(&mut self, name: &str, bytes: &[u8]) -> Result<(), GgufError> {
        let Some((expected, size)) = self.plan.get(self.next) else {
            return Err(GgufError::UnexpectedTensor { expected: None, got: name.to_owned() });
        };
        if expected != name {
            return Err(GgufError::UnexpectedTensor { expected: Some(expected.clone()), got: name.to_owned() });
        }
        if bytes.len() as u64 != *size {
            return Err(GgufError::WrongTensorSize { name: name.to_owned(), expected: *size, got: bytes.len() as u64 });
        }
        let pad = padded_len(*size, self.alignment) - size;
        self.out.write_all(bytes).map_err(GgufError::Write)?;
        std::io::copy(&mut std::io::repeat(0).take(pad), &mut self.out).map_err(GgufError::Write)?;
        self.next += 1;
        Ok(())
    }

    /// Name of the next tensor `write_tensor` expects, if any remain.
    pub fn next_tensor(&self) -> Option<&str> {
        self.plan.get(self.next).map(|(name, _)| name.as_str())
    }

    /// Checks every planned tensor was written, flushes and returns the output.
    pub fn finish(mut self) -> Result<W, GgufError> {
        if let Some((first, _)) = self.plan.get(self.next) {
            return Err(GgufError::MissingTensors { count: self.plan.len() - self.next, first: first.clone() });
        }
        self.out.flush().map_err(GgufError::Write)?;
        Ok(self.out)
    }
}

/// `len` rounded up to the alignment; callers have already checked it cannot overflow.
fn padded_len(len: u64, alignment: u64) -> u64 {
    align_up(len, alignment).unwrap_or(len)
}

/// Checks keys are unique and `general.alignment`, if present, is a u32 power of two; returns the alignment.
fn check_metadata(metadata: &[(String, Value)]) -> Result<u64, GgufError> {
    let mut seen = HashSet::new();
    let mut alignment = DEFAULT_ALIGNMENT;
    for (key, value) in metadata {
        let bad = |reason: &str| GgufError::BadMetadata { key: key.clone(), reason: reason.into() };
        if !seen.insert(key.as_str()) {
            return Err(bad("duplicate key"));
        }
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => alignment = u64::from(*a),
                _ => return Err(bad("must be a u32 power of two")),
            }
        }
    }
    Ok(alignment)
}

/// Checks names, dims and block geometry; returns each tensor's byte size.
fn check_tensors(tensors: &[TensorSpec]) -> Result<Vec<u64>, GgufError> {
    let mut seen = HashSet::new();
    tensors
        .iter()
        .map(|t| {
            let bad = |reason: String| GgufError::BadTensorSpec { name: t.name.clone(), reason };
            if t.name.len() > MAX_NAME_LEN {
                return Err(bad(format!("name is {} bytes (max {MAX_NAME_LEN})", t.name.len())));
            }
            if !seen.insert(t.name.as_str()) {
                return Err(bad("duplicate tensor name".into()));
            }
            if t.dims.is_empty() || t.dims.len() > MAX_DIMS {
                return Err(bad(format!("{} dims (must be 1..={MAX_DIMS})", t.dims.len())));
            }
            tensor_size(&t.dims, t.ty).map_err(|misaligned| {
                bad(if misaligned {
                    format!("ne[0] = {} is not a multiple of the {} block size {}", t.dims[0], t.ty, t.ty.block_size())
                } else {
                    format!("dims {:?} overflow", t.dims)
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::reader::parse;
    use crate::gguf::{Array, GgufFile};
    use std::path::Path;

    fn spec(name: &str, dims: &[u64], ty: GgmlType) -> TensorSpec {
        TensorSpec { name: name.into(), dims: dims.to_vec(), ty }
    }

    fn sample_metadata() -> Vec<(String, Value)> {
        vec![
            ("general.architecture".into(), "llama".into()),
            ("llama.block_count".into(), 2u32.into()),
            ("llama.rope.freq_base".into(), 10000f32.into()),
            ("tokenizer.ggml.tokens".into(), Value::strings(["<s>", "</s>", "é"])),
            ("tokenizer.ggml.scores".into(), Value::f32s(vec![0.0, -1.5, 2.25])),
            ("tokenizer.ggml.token_type".into(), Value::i32s([3, 3, 1])),
            ("nested".into(), Value::Array(Array::Array(vec![Array::U8(vec![1, 2]), Array::Bool(vec![true])]))),
            ("misc.u64".into(), u64::MAX.into()),
            ("misc.i64".into(), (-5i64).into()),
            ("misc.f64".into(), 0.125f64.into()),
            ("misc.i8".into(), (-3i8).into()),
            ("misc.u16".into(), 7u16.into()),
            ("misc.i16".into(), (-7i16).into()),
            ("misc.flag".into(), false.into()),
        ]
    }

    fn write_sample(metadata: Vec<(String, Value)>) -> (Vec<u8>, Vec<(TensorSpec, Vec<u8>)>) {
        let tensors = vec![
            (spec("a.weight", &[3, 2], GgmlType::F32), (0..24).collect::<Vec<u8>>()),
            (spec("b.weight", &[32, 2], GgmlType::Q8_0), vec![7u8; 68]),
            (spec("c.weight", &[5], GgmlType::F16), vec![1u8; 10]),
            (spec("d.empty", &[0, 4], GgmlType::BF16), vec![]),
        ];
        let specs = tensors.iter().map(|(s, _)| s.clone()).collect();
        let mut w = GgufWriter::new(Vec::new(), metadata, specs).unwrap();
        for (s, bytes) in &tensors {
            assert_eq!(w.next_tensor(), Some(s.name.as_str()));
            w.write_tensor(&s.name, bytes).unwrap();
        }
        (w.finish().unwrap(), tensors)
    }

    #[test]
    fn round_trips_through_reader() {
        let (bytes, tensors) = write_sample(sample_metadata());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        std::fs::write(&path, &bytes).unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), 32);
        assert_eq!(f.metadata(), &sample_metadata()[..]);
        assert_eq!(f.data_start() % 32, 0);
        let offsets: Vec<u64> = f.tensors().iter().map(|t| t.offset).collect();
        assert_eq!(offsets, [0, 32, 128, 160]);
        for (t, (s, data)) in f.tensors().iter().zip(&tensors) {
            assert_eq!((&t.name, &t.dims, t.ty), (&s.name, &s.dims, s.ty));
            assert_eq!(f.tensor_data(t), &data[..]);
        }
        assert_eq!(f.get("llama.block_count").and_then(Value::as_u32), Some(2));
        assert_eq!(f.tensor("c.weight").map(|t| t.size), Some(10));
        assert_eq!(bytes.len() as u64, f.data_start() + 160);
    }

    #[test]
    fn honours_general_alignment() {
        let mut md = sample_metadata();
        md.push((ALIGNMENT_KEY.into(), 64u32.into()));
        let (bytes, _) = write_sample(md);
        let h = parse(&bytes, Path::new("t.gguf")).unwrap();
        let offsets: Vec<u64> = h.tensors.iter().map(|t| t.offset).collect();
        assert_eq!(offsets, [0, 64, 192, 256]);
        assert_eq!(h.data_start % 64, 0);
    }

    #[test]
    fn rejects_bad_plans() {
        let new = |md: Vec<(String, Value)>, ts: Vec<TensorSpec>| GgufWriter::new(Vec::new(), md, ts).err().unwrap();
        let e = new(vec![(ALIGNMENT_KEY.into(), 48u32.into())], vec![]);
        assert!(matches!(e, GgufError::BadMetadata { .. }), "{e}");
        let e = new(vec![(ALIGNMENT_KEY.into(), 64u64.into())], vec![]);
        assert!(matches!(e, GgufError::BadMetadata { .. }), "{e}");
        let e = new(vec![("k".into(), 1u32.into()), ("k".into(), 2u32.into())], vec![]);
        assert!(matches!(e, GgufError::BadMetadata { .. }), "{e}");
        let long = "x".repeat(64);
        for ts in [
            vec![spec(&long, &[1], GgmlType::F32)],
            vec![spec("a", &[1], GgmlType::F32), spec("a", &[1], GgmlType::F32)],
            vec![spec("a", &[], GgmlType::F32)],
            vec![spec("a", &[1, 1, 1, 1, 1], GgmlType::F32)],
            vec![spec("a", &[100], GgmlType::Q4_K)],
            vec![spec("a", &[u64::MAX, 2], GgmlType::F32)],
        ] {
            let e = new(vec![], ts);
            assert!(matches!(e, GgufError::BadTensorSpec { .. }), "{e}");
        }
        assert!(GgufWriter::new(Vec::new(), vec![], vec![spec(&"x".repeat(63), &[1], GgmlType::F32)]).is_ok());
    }

    #[test]
    fn enforces_order_size_and_completeness() {
        let specs = vec![spec("a", &[2], GgmlType::F32), spec("b", &[2], GgmlType::F32)];
        let mut w = GgufWriter::new(Vec::new(), vec![], specs).unwrap();
        assert!(matches!(w.write_tensor("b", &[0; 8]), Err(GgufError::UnexpectedTensor { .. })));
        assert!(matches!(w.write_tensor("a", &[0; 7]), Err(GgufError::WrongTensorSize { expected: 8, got: 7, .. })));
        w.write_tensor("a", &[0; 8]).unwrap();
        let e = w.finish().err().unwrap();
        assert!(matches!(e, GgufError::MissingTensors { count: 1, .. }), "{e}");
        assert_eq!(e.to_string(), "writing GGUF: 1 planned tensor(s) not written, first 'b'");

        let mut w = GgufWriter::new(Vec::new(), vec![], vec![spec("a", &[1], GgmlType::F32)]).unwrap();
        w.write_tensor("a", &[0; 4]).unwrap();
        let e = w.write_tensor("z", &[]).err().unwrap();
        assert_eq!(e.to_string(), "writing GGUF: got tensor 'z' but expected no more tensors");
    }

    #[test]
    fn torch_shape_spec_reverses() {
        assert_eq!(TensorSpec::from_torch_shape("w", &[4, 8], GgmlType::F16).dims, vec![8, 4]);
    }
}
