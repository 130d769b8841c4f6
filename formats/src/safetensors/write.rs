//! Writing a safetensors file from named tensors whose bytes are owned or borrowed (e.g. straight
//! from another checkpoint's mmap), through the `safetensors` crate's streaming serializer.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use ::safetensors::tensor::View;
use ::safetensors::Dtype;

use super::SafetensorsError;
use crate::source::DType;

/// One tensor to write: dtype, shape (outermost first) and little-endian bytes.
#[derive(Clone, Debug)]
pub struct TensorOut<'a> {
    /// Element type (a plain dtype; GGUF block types cannot be written).
    pub dtype: DType,
    /// Shape, outermost dimension first.
    pub shape: Vec<usize>,
    /// The bytes, `shape.product() * width` long.
    pub data: Cow<'a, [u8]>,
}

/// The safetensors dtype of a plain dtype.
fn st_dtype(d: DType) -> Option<Dtype> {
    Some(match d {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F64 => Dtype::F64,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        DType::I16 => Dtype::I16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
        DType::Bool => Dtype::BOOL,
        DType::Ggml(_) | DType::Other(_) => return None,
    })
}

/// A tensor with its safetensors dtype resolved.
struct Out<'t, 'a>(&'t TensorOut<'a>, Dtype);

impl View for Out<'_, '_> {
    fn dtype(&self) -> Dtype {
        self.1
    }
    fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.0.data)
    }
    fn data_len(&self) -> usize {
        self.0.data.len()
    }
}

/// Writes `tensors` to `path` (sorted as the `safetensors` crate and Python library sort them:
/// by dtype alignment, then name) with header metadata `metadata`.
pub fn write_file(
    path: &Path,
    tensors: &[(String, TensorOut<'_>)],
    metadata: HashMap<String, String>,
) -> Result<(), SafetensorsError> {
    let invalid = |source| SafetensorsError::Invalid { path: path.to_path_buf(), source };
    let mut views = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let dtype = st_dtype(t.dtype).ok_or_else(|| SafetensorsError::UnwritableDtype {
            path: path.to_path_buf(),
            name: name.clone(),
            dtype: t.dtype,
        })?;
        views.push((name.as_str(), Out(t, dtype)));
    }
    ::safetensors::tensor::serialize_to_file(views, Some(metadata), path).map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SafetensorsSet, TensorSource};

    #[test]
    fn writes_what_the_reader_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let floats: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let tensors = vec![
            ("b".to_string(), TensorOut { dtype: DType::U8, shape: vec![3, 1], data: Cow::Owned(vec![1, 2, 3]) }),
            ("a".to_string(), TensorOut { dtype: DType::F32, shape: vec![2], data: Cow::Borrowed(&floats) }),
        ];
        write_file(&path, &tensors, HashMap::from([("format".into(), "pt".into())])).unwrap();
        let set = SafetensorsSet::open_files(&[path]).unwrap();
        assert_eq!(set.read_f32("a").unwrap(), vec![1.5, -2.0]);
        assert_eq!(set.raw_bytes("b").unwrap(), &[1, 2, 3]);
        let bad = vec![(
            "q".to_string(),
            TensorOut { dtype: DType::Other("F8_E4M3"), shape: vec![1], data: Cow::Owned(vec![0]) },
        )];
        assert!(write_file(&dir.path().join("x.safetensors"), &bad, HashMap::new()).is_err());
    }
}
