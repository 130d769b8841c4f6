//! The `--kl-divergence-base` file of `tgi perplexity`: a base model's log-probabilities at every scored
//! position, for comparing another model with it.
//!
//! Layout (little-endian): magic `TGIKLD\0\0`, version `u32` (1), vocabulary size `u32`, ctx `u32`, chunks
//! `u32`, token count `u64` (= chunks × ctx) and the tokens themselves (`u32` each, as tokenized, before
//! BOS is placed at each chunk's start); then one row per scored position (chunk by chunk, positions
//! ctx/2 .. ctx-2 of each chunk), each encoded by `tgi_engines::kld::encode_row` (8 + 2 × vocab bytes).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tgi_engines::kld::{decode_row, encode_row, encoded_row_len};

use crate::error::InputError;
use crate::output::{finish_writer, AtomicFile};

const MAGIC: &[u8; 8] = b"TGIKLD\0\0";
const VERSION: u32 = 1;

/// What a base file was made from; a comparison needs the same.
#[derive(Clone, Debug, PartialEq)]
pub struct BaseHeader {
    /// Vocabulary size.
    pub vocab: usize,
    /// Tokens per chunk.
    pub ctx: usize,
    /// Chunks scored.
    pub chunks: usize,
    /// The text's first chunks × ctx tokens.
    pub tokens: Vec<u32>,
}

impl BaseHeader {
    /// Scored positions per chunk.
    fn rows(&self) -> u64 {
        (self.chunks * (self.ctx - 1 - self.ctx / 2)) as u64
    }
}

/// Writes a base file atomically.
pub struct BaseWriter {
    file: AtomicFile,
    out: BufWriter<File>,
    vocab: usize,
    buf: Vec<u8>,
}

impl BaseWriter {
    /// Starts the file (refusing an existing one unless `force`) with its header.
    pub fn create(path: &Path, force: bool, inputs: &[PathBuf], h: &BaseHeader) -> Result<BaseWriter> {
        let file = AtomicFile::create(path, force, inputs)?;
        let mut out = file.writer()?;
        out.write_all(MAGIC)?;
        for v in [VERSION, h.vocab as u32, h.ctx as u32, h.chunks as u32] {
            out.write_all(&v.to_le_bytes())?;
        }
        out.write_all(&(h.tokens.len() as u64).to_le_bytes())?;
        for t in &h.tokens {
            out.write_all(&t.to_le_bytes())?;
        }
        Ok(BaseWriter { file, out, vocab: h.vocab, buf: Vec::new() })
    }

    /// Appends the log-probabilities of one scored position.
    pub fn push(&mut self, logits: &[f32]) -> Result<()> {
        anyhow::ensure!(logits.len() == self.vocab, "logits of {} entries, vocabulary {}", logits.len(), self.vocab);
        self.buf.clear();
        encode_row(logits, &mut self.buf);
        self.out.write_all(&self.buf).context("cannot write the --kl-divergence-base file")
    }

    /// Flushes and moves the file into place.
    pub fn commit(self) -> Result<()> {
        finish_writer(self.out)?;
        self.file.commit()
    }
}

/// Reads a base file's rows in order.
pub struct BaseReader {
    input: BufReader<File>,
    row: Vec<u8>,
    path: PathBuf,
}

fn bad(path: &Path, what: impl std::fmt::Display) -> anyhow::Error {
    InputError(format!("{}: {what}", path.display())).into()
}

impl BaseReader {
    /// Opens `path` and checks it against what this run scores (`expected`, field by field).
    pub fn open(path: &Path, expected: &BaseHeader) -> Result<BaseReader> {
        let file = File::open(path)
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(|e| InputError(format!("{e:#}")))?;
        let len = file.metadata()?.len();
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut head = [0u8; 32];
        input.read_exact(&mut head).map_err(|_| bad(path, "not a tgi --kl-divergence-base file (too short)"))?;
        if &head[..8] != MAGIC {
            return Err(bad(path, "not a tgi --kl-divergence-base file (bad magic)"));
        }
        let word = |i: usize| u32::from_le_bytes(head[8 + 4 * i..12 + 4 * i].try_into().expect("4 bytes")) as usize;
        if word(0) != VERSION as usize {
            return Err(bad(path, format!("format version {} (this tgi reads version {VERSION})", word(0))));
        }
        let n = u64::from_le_bytes(head[24..32].try_into().expect("8 bytes"));
        let h = BaseHeader { vocab: word(1), ctx: word(2), chunks: word(3), tokens: Vec::new() };
        let checks = [("vocabulary size", h.vocab, expected.vocab), ("--ctx", h.ctx, expected.ctx)];
        for (what, got, want) in checks.into_iter().chain([("chunks", h.chunks, expected.chunks)]) {
            if got != want {
                return Err(bad(path, format!("made with {what} {got}, this run has {want}")));
            }
        }
        if n != expected.tokens.len() as u64 || h.ctx < 2 {
            return Err(bad(path, format!("holds {n} tokens, this run scores {}", expected.tokens.len())));
        }
        let rows = expected.rows();
        if len != 32 + 4 * n + rows * encoded_row_len(h.vocab) as u64 {
            return Err(bad(path, "truncated or corrupt (its size does not match its header)"));
        }
        let mut tokens = vec![0u8; 4 * n as usize];
        input.read_exact(&mut tokens)?;
        let first_diff = tokens
            .chunks_exact(4)
            .zip(&expected.tokens)
            .position(|(b, &t)| u32::from_le_bytes(b.try_into().expect("4 bytes")) != t);
        if let Some(i) = first_diff {
            return Err(bad(path, format!("made from another text or tokenizer (tokens differ at position {i})")));
        }
        Ok(BaseReader { input, row: vec![0; encoded_row_len(h.vocab)], path: path.to_path_buf() })
    }

    /// The next row's normalized log-probabilities.
    pub fn next_row(&mut self) -> Result<Vec<f64>> {
        self.input.read_exact(&mut self.row).with_context(|| format!("cannot read {}", self.path.display()))?;
        Ok(decode_row(&self.row))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_mismatches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.kld");
        let h = BaseHeader { vocab: 3, ctx: 4, chunks: 2, tokens: (0..8).collect() };
        let mut w = BaseWriter::create(&path, false, &[], &h).unwrap();
        for i in 0..h.rows() {
            w.push(&[i as f32, 0.0, -1.0]).unwrap();
        }
        w.commit().unwrap();
        let mut r = BaseReader::open(&path, &h).unwrap();
        for i in 0..h.rows() {
            let want = tgi_engines::kld::log_softmax(&[i as f32, 0.0, -1.0]);
            let got = r.next_row().unwrap();
            assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-3), "{got:?} {want:?}");
        }
        let err = |h: &BaseHeader| format!("{:#}", BaseReader::open(&path, h).err().unwrap());
        assert!(err(&BaseHeader { vocab: 4, ..h.clone() }).contains("vocabulary size 3, this run has 4"));
        assert!(err(&BaseHeader { ctx: 8, chunks: 1, ..h.clone() }).contains("--ctx 4"));
        let mut other = h.clone();
        other.tokens[5] = 9;
        assert!(err(&other).contains("tokens differ at position 5"));
        std::fs::write(dir.path().join("x"), b"hello").unwrap();
        assert!(format!("{:#}", BaseReader::open(&dir.path().join("x"), &h).err().unwrap()).contains("too short"));
    }
}
