//! Writing a safetensors file one tensor at a time: names, dtypes and shapes are declared up front
//! (the header holds every offset), then the bytes follow in the declared order, so a converter
//! holds only the tensor in hand, not the whole file.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};

use serde_json::{json, Map, Value};

use crate::source::DType;

/// Errors streaming a safetensors file.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The output could not be written.
    #[error("writing the safetensors file failed: {0}")]
    Io(#[from] io::Error),
    /// A dtype safetensors cannot hold.
    #[error("tensor '{name}': {dtype} cannot be written to safetensors")]
    Dtype {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: DType,
    },
    /// Bytes that are not the next declared tensor's.
    #[error("expected {expected} next, got tensor '{name}' with {bytes} bytes")]
    OutOfOrder {
        /// What the header declared next (name and byte count).
        expected: String,
        /// The tensor given.
        name: String,
        /// Its byte count.
        bytes: usize,
    },
    /// `finish` before every declared tensor was written.
    #[error("{0} declared tensors were not written")]
    Missing(usize),
}

/// A plain dtype's safetensors name and width in bytes.
fn dtype_info(d: DType) -> Option<(&'static str, usize)> {
    Some(match d {
        DType::F32 => ("F32", 4),
        DType::F16 => ("F16", 2),
        DType::BF16 => ("BF16", 2),
        DType::F64 => ("F64", 8),
        DType::I8 => ("I8", 1),
        DType::U8 => ("U8", 1),
        DType::I16 => ("I16", 2),
        DType::I32 => ("I32", 4),
        DType::I64 => ("I64", 8),
        DType::U16 => ("U16", 2),
        DType::U32 => ("U32", 4),
        DType::U64 => ("U64", 8),
        DType::Bool => ("BOOL", 1),
        DType::Ggml(_) | DType::Other(_) => return None,
    })
}

/// A safetensors file being written tensor by tensor.
pub struct StreamWriter<W: Write> {
    out: W,
    pending: VecDeque<(String, usize)>,
}

impl<W: Write> StreamWriter<W> {
    /// Writes the header declaring `tensors` (name, dtype, shape), in this order, with `metadata`.
    pub fn new(
        mut out: W,
        tensors: &[(String, DType, Vec<usize>)],
        metadata: HashMap<String, String>,
    ) -> Result<StreamWriter<W>, StreamError> {
        let mut header = Map::new();
        if !metadata.is_empty() {
            header.insert("__metadata__".into(), json!(metadata));
        }
        let mut pending = VecDeque::with_capacity(tensors.len());
        let mut offset = 0usize;
        for (name, dtype, shape) in tensors {
            let (st, width) =
                dtype_info(*dtype).ok_or_else(|| StreamError::Dtype { name: name.clone(), dtype: *dtype })?;
            let bytes = shape.iter().product::<usize>() * width;
            header.insert(name.clone(), json!({"dtype": st, "shape": shape, "data_offsets": [offset, offset + bytes]}));
            offset += bytes;
            pending.push_back((name.clone(), bytes));
        }
        let mut text = Value::Object(header).to_string().into_bytes();
        text.resize(text.len().next_multiple_of(8), b' ');
        out.write_all(&(text.len() as u64).to_le_bytes())?;
        out.write_all(&text)?;
        Ok(StreamWriter { out, pending })
    }

    /// Writes the bytes of the next declared tensor, `name`.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), StreamError> {
        match self.pending.front() {
            Some((n, len)) if n == name && *len == bytes.len() => {
                self.out.write_all(bytes)?;
                self.pending.pop_front();
                Ok(())
            }
            next => Err(StreamError::OutOfOrder {
                expected: next.map_or("no tensor".into(), |(n, len)| format!("'{n}' ({len} bytes)")),
                name: name.to_string(),
                bytes: bytes.len(),
            }),
        }
    }

    /// Checks that every declared tensor was written, flushes and returns the output.
    pub fn finish(mut self) -> Result<W, StreamError> {
        if !self.pending.is_empty() {
            return Err(StreamError::Missing(self.pending.len()));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SafetensorsSet, TensorSource};

    #[test]
    fn streams_what_the_reader_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let decl = vec![
            ("z".to_string(), DType::F32, vec![2]),
            ("a".to_string(), DType::I32, vec![1, 1]),
            ("h".to_string(), DType::F16, vec![3]),
        ];
        let file = std::fs::File::create(&path).unwrap();
        let mut w = StreamWriter::new(file, &decl, HashMap::from([("format".into(), "pt".into())])).unwrap();
        let floats: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert!(matches!(w.write("a", &[0; 4]), Err(StreamError::OutOfOrder { .. })));
        w.write("z", &floats).unwrap();
        w.write("a", &(-7i32).to_le_bytes()).unwrap();
        assert!(matches!(w.write("h", &[0; 4]), Err(StreamError::OutOfOrder { .. })));
        w.write("h", &[0, 0x3c, 0, 0xc0, 0, 0]).unwrap();
        w.finish().unwrap();
        let set = SafetensorsSet::open_files(&[path]).unwrap();
        assert_eq!(set.read_f32("z").unwrap(), vec![1.5, -2.0]);
        assert_eq!(set.raw_bytes("a").unwrap(), (-7i32).to_le_bytes());
        assert_eq!(set.read_f32("h").unwrap(), vec![1.0, -2.0, 0.0]);
        let names: Vec<String> = set.tensors().into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["z", "a", "h"], "data in declared order");

        let w = StreamWriter::new(Vec::new(), &decl, HashMap::new()).unwrap();
        assert!(matches!(w.finish(), Err(StreamError::Missing(3))));
        let bad = [("q".to_string(), DType::Other("F8_E4M3"), vec![1])];
        assert!(matches!(StreamWriter::new(Vec::new(), &bad, HashMap::new()), Err(StreamError::Dtype { .. })));
    }
}
