//! Reads the SentencePiece vocabulary (`tokenizer.ggml.*` keys) from a GGUF file's metadata.

use anyhow::{bail, ensure, Context, Result};

/// The vocabulary of a GGUF file with `tokenizer.ggml.model = "llama"` (SentencePiece).
#[derive(Debug, Clone)]
pub struct SpmVocab {
    /// Token pieces by id.
    pub tokens: Vec<String>,
    /// SentencePiece scores by id.
    pub scores: Vec<f32>,
    /// Token types by id: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    pub types: Vec<i32>,
    /// Begin-of-sequence id.
    pub bos: u32,
    /// End-of-sequence id.
    pub eos: u32,
    /// Unknown-token id.
    pub unk: u32,
}

/// A GGUF metadata value (only what a vocabulary needs is kept precisely).
#[derive(Debug, Clone)]
enum Value {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool,
    Str(String),
    Array(Vec<Value>),
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.context("GGUF metadata runs past the end of the file")?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into()?))
    }
    fn string(&mut self) -> Result<String> {
        let n = usize::try_from(self.u64()?)?;
        Ok(String::from_utf8(self.take(n)?.to_vec())?)
    }
    fn value(&mut self, ty: u32) -> Result<Value> {
        let b8 = |c: &mut Self, n: usize| -> Result<[u8; 8]> {
            let mut a = [0u8; 8];
            a[..n].copy_from_slice(c.take(n)?);
            Ok(a)
        };
        Ok(match ty {
            0 => Value::Uint(self.take(1)?[0].into()),
            1 => Value::Int((self.take(1)?[0] as i8).into()),
            2 => Value::Uint(u16::from_le_bytes(self.take(2)?.try_into()?).into()),
            3 => Value::Int(i16::from_le_bytes(self.take(2)?.try_into()?).into()),
            4 => Value::Uint(self.u32()?.into()),
            5 => Value::Int(i32::from_le_bytes(self.take(4)?.try_into()?).into()),
            6 => Value::Float(f32::from_le_bytes(self.take(4)?.try_into()?).into()),
            7 => {
                self.take(1)?;
                Value::Bool
            }
            8 => Value::Str(self.string()?),
            9 => {
                let item_ty = self.u32()?;
                let n = usize::try_from(self.u64()?)?;
                ensure!(n <= self.buf.len(), "GGUF array length {n} is implausible");
                (0..n).map(|_| self.value(item_ty)).collect::<Result<_>>().map(Value::Array)?
            }
            10 => Value::Uint(u64::from_le_bytes(b8(self, 8)?)),
            11 => Value::Int(i64::from_le_bytes(b8(self, 8)?)),
            12 => Value::Float(f64::from_le_bytes(b8(self, 8)?)),
            other => bail!("unknown GGUF value type {other}"),
        })
    }
}

/// Parses the metadata of GGUF `bytes` (v2/v3) and returns its SentencePiece vocabulary.
pub fn read_spm_vocab(bytes: &[u8]) -> Result<SpmVocab> {
    let mut c = Cursor { buf: bytes, pos: 0 };
    ensure!(c.take(4)? == b"GGUF", "not a GGUF file");
    let version = c.u32()?;
    ensure!(version == 2 || version == 3, "unsupported GGUF version {version}");
    let _n_tensors = c.u64()?;
    let n_kv = c.u64()?;
    let mut kv = std::collections::HashMap::new();
    for _ in 0..n_kv {
        let key = c.string()?;
        let ty = c.u32()?;
        kv.insert(key, c.value(ty)?);
    }
    let model = match kv.get("tokenizer.ggml.model") {
        Some(Value::Str(s)) => s.clone(),
        _ => bail!("no tokenizer.ggml.model"),
    };
    ensure!(model == "llama", "tokenizer.ggml.model is {model:?}, need a SentencePiece (\"llama\") vocabulary");
    let array = |key: &str| match kv.get(key) {
        Some(Value::Array(items)) => Ok(items.as_slice()),
        _ => bail!("no array {key}"),
    };
    let tokens = array("tokenizer.ggml.tokens")?
        .iter()
        .map(|v| match v {
            Value::Str(s) => Ok(s.clone()),
            _ => bail!("tokenizer.ggml.tokens holds a non-string"),
        })
        .collect::<Result<Vec<_>>>()?;
    let scores = array("tokenizer.ggml.scores")?
        .iter()
        .map(|v| match v {
            Value::Float(x) => Ok(*x as f32),
            _ => bail!("tokenizer.ggml.scores holds a non-float"),
        })
        .collect::<Result<Vec<_>>>()?;
    let types = array("tokenizer.ggml.token_type")?
        .iter()
        .map(|v| match v {
            Value::Int(x) => Ok(i32::try_from(*x)?),
            Value::Uint(x) => Ok(i32::try_from(*x)?),
            _ => bail!("tokenizer.ggml.token_type holds a non-integer"),
        })
        .collect::<Result<Vec<_>>>()?;
    ensure!(
        scores.len() == tokens.len() && types.len() == tokens.len(),
        "tokens, scores and token types differ in length"
    );
    let id = |key: &str, default: u32| -> Result<u32> {
        match kv.get(key) {
            Some(Value::Uint(x)) => Ok(u32::try_from(*x)?),
            Some(Value::Int(x)) => Ok(u32::try_from(*x)?),
            None => Ok(default),
            Some(_) => bail!("{key} is not an integer"),
        }
    };
    let (bos, eos, unk) = (
        id("tokenizer.ggml.bos_token_id", 1)?,
        id("tokenizer.ggml.eos_token_id", 2)?,
        id("tokenizer.ggml.unknown_token_id", 0)?,
    );
    for (name, x) in [("bos", bos), ("eos", eos), ("unk", unk)] {
        ensure!((x as usize) < tokens.len(), "{name} id {x} is outside the vocabulary");
    }
    Ok(SpmVocab { tokens, scores, types, bos, eos, unk })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_embedded_llama_vocab() {
        let v = read_spm_vocab(crate::LLAMA_SPM_VOCAB).unwrap();
        assert_eq!(v.tokens.len(), 32000);
        assert_eq!((v.unk, v.bos, v.eos), (0, 1, 2));
        assert_eq!(&v.tokens[..3], ["<unk>", "<s>", "</s>"]);
        assert_eq!(v.tokens[3], "<0x00>");
        assert_eq!((v.tokens[260].as_str(), v.scores[260], v.types[260]), ("▁t", -1.0, 1));
        assert_eq!(&v.types[..4], [2, 3, 3, 6]);
    }

    #[test]
    fn rejects_garbage() {
        assert!(read_spm_vocab(b"GGUF\x03\0\0\0").is_err());
        assert!(read_spm_vocab(b"not a gguf").is_err());
    }
}
