//! Attention over paged KV: each query row attends to its own sequence's cached positions (causal,
//! optionally within a sliding window). A tuned host path for the CPU and a tensor path for GPUs.

use std::ops::Range;

use candle_core::{DType, Device, Tensor};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
use tgi_formats::quant::{quantize_row_searched, Iq4Search};
use tgi_formats::GgmlType;

use super::decode::BLOCK;
use super::simd::RowOps;
use super::{BlockTable, HostBuf, KvError, KvRotation};

/// One sequence's part of a step: its rows in the packed batch and the position of the first.
#[derive(Clone, Debug)]
pub struct SeqSpan {
    /// Rows of the packed batch that belong to this sequence.
    pub rows: Range<usize>,
    /// Position of the first of those rows.
    pub start: usize,
    /// The sequence's blocks; they must cover `start + rows.len()` positions.
    pub table: BlockTable,
}

/// Everything attention needs to know about a step, computed once and shared by all layers.
#[derive(Clone, Debug)]
pub struct AttentionPlan {
    seqs: Vec<SeqSpan>,
    slots: Vec<usize>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scale: f32,
    softcap: Option<f32>,
    window: Option<usize>,
}

impl AttentionPlan {
    /// A plan for `seqs`, whose rows must tile `0..total` in order.
    pub fn new(seqs: Vec<SeqSpan>, heads: usize, kv_heads: usize, head_dim: usize, window: Option<usize>) -> Self {
        let mut slots = Vec::new();
        for s in &seqs {
            debug_assert_eq!(s.rows.start, slots.len());
            slots.extend((0..s.rows.len()).map(|j| s.table.slot(s.start + j)));
        }
        let scale = 1.0 / (head_dim as f32).sqrt();
        AttentionPlan { seqs, slots, heads, kv_heads, head_dim, scale, softcap: None, window }
    }

    /// The plan with scores scaled by `scale` instead of `1 / sqrt(head_dim)`.
    pub fn with_scale(mut self, scale: f32) -> Self {
        self.scale = scale;
        self
    }

    /// The plan with scores soft-capped by `tanh(s / cap) * cap` after scaling (Gemma 2).
    pub fn with_softcap(mut self, cap: Option<f32>) -> Self {
        self.softcap = cap;
        self
    }

    /// The plan with another sliding window (per-layer windows share the rest).
    pub fn with_window(mut self, window: Option<usize>) -> Self {
        self.window = window;
        self
    }

    /// A scaled score, soft-capped when the plan says so.
    fn score(&self, dot: f32) -> f32 {
        let s = dot * self.scale;
        self.softcap.map_or(s, |c| (s / c).tanh() * c)
    }

    /// Rows in the step.
    pub fn rows(&self) -> usize {
        self.slots.len()
    }

    /// The first position row `row`'s query may see (the sliding window's left edge).
    fn first_visible(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }
}

/// Contiguous f32 copy of a host tensor.
fn host_f32(t: &Tensor) -> Result<Vec<f32>, KvError> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Read access to cached rows as f32, whatever the storage type.
trait Rows: Sync {
    /// Element `at..at + out.len()` as f32 into `out`.
    fn read(&self, at: usize, out: &mut [f32]);
    /// Rounds a value the way products with this cache see it (f16 for an f16 cache, as ggml).
    fn round(x: f32) -> f32;
    /// [`Rows::round`] of every value of `x`, in place.
    fn round_all(x: &mut [f32]) {
        x.iter_mut().for_each(|x| *x = Self::round(*x));
    }
}

impl Rows for Vec<f32> {
    fn read(&self, at: usize, out: &mut [f32]) {
        out.copy_from_slice(&self[at..at + out.len()]);
    }
    fn round(x: f32) -> f32 {
        x
    }
}

impl Rows for Vec<f16> {
    fn read(&self, at: usize, out: &mut [f32]) {
        self[at..at + out.len()].convert_to_f32_slice(out);
    }
    fn round(x: f32) -> f32 {
        f16::from_f32(x).to_f32()
    }
    fn round_all(x: &mut [f32]) {
        // Through the slice conversions, which take F16C's eight lanes at a time where the CPU has it.
        let mut h = [f16::ZERO; 64];
        for x in x.chunks_mut(64) {
            let h = &mut h[..x.len()];
            h.convert_from_f32_slice(x);
            h.convert_to_f32_slice(x);
        }
    }
}

impl Rows for Vec<bf16> {
    fn read(&self, at: usize, out: &mut [f32]) {
        self[at..at + out.len()].convert_to_f32_slice(out);
    }
    fn round(x: f32) -> f32 {
        x
    }
}

/// A buffer of ggml blocks, addressed by element like the others (`at` and lengths are whole blocks), decoded
/// on `ops`.
struct Blocks<'a> {
    ty: GgmlType,
    bytes: &'a [u8],
    ops: RowOps,
}

impl Rows for Blocks<'_> {
    fn read(&self, at: usize, out: &mut [f32]) {
        let size = self.ty.type_size();
        self.ops.decode(self.ty, &self.bytes[at / BLOCK * size..][..out.len() / BLOCK * size], out);
    }
    fn round(x: f32) -> f32 {
        x
    }
}

/// Writes rows into a host buffer at their slots.
fn store(buf: &mut HostBuf, rows: &[f32], slots: &[usize], width: usize) {
    for (row, &slot) in slots.iter().enumerate() {
        let src = &rows[row * width..][..width];
        match buf {
            HostBuf::F32(b) => b[slot * width..][..width].copy_from_slice(src),
            HostBuf::F16(b) => b[slot * width..][..width].convert_from_f32_slice(src),
            HostBuf::BF16(b) => b[slot * width..][..width].convert_from_f32_slice(src),
            HostBuf::Blocks(ty, b) => {
                let bytes = width / BLOCK * ty.type_size();
                // As ggml's set_rows writes a cache: the type's `from_float`.
                quantize_row_searched(*ty, src, &mut b[slot * bytes..][..bytes], Iq4Search::FromFloat)
                    .expect("whole blocks");
            }
        }
    }
}

/// The CPU path: rotates queries, keys and values as `rot` says, writes the new rows into the host cache, then
/// one task per (row, head), and rotates the output back.
pub(super) fn host(
    kc: &mut HostBuf,
    vc: &mut HostBuf,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    plan: &AttentionPlan,
    rot: KvRotation,
) -> Result<Tensor, KvError> {
    let width = plan.kv_heads * plan.head_dim;
    let (mut qd, mut kd, mut vd) = (host_f32(q)?, host_f32(k)?, host_f32(v)?);
    rot.keys(&mut qd);
    rot.keys(&mut kd);
    rot.values(&mut vd);
    store(kc, &kd, &plan.slots, width);
    store(vc, &vd, &plan.slots, width);
    let mut out = run_host(kc, vc, &qd, plan, RowOps::detect());
    rot.values(&mut out);
    Ok(Tensor::from_vec(out, (plan.rows(), plan.heads * plan.head_dim), &Device::Cpu)?)
}

/// [`host_attend`] over the cache's own element type, on `ops`.
fn run_host(kc: &HostBuf, vc: &HostBuf, qd: &[f32], plan: &AttentionPlan, ops: RowOps) -> Vec<f32> {
    let per_task = task_rows(plan.rows(), plan.kv_heads);
    match (kc, vc) {
        (HostBuf::F32(k), HostBuf::F32(v)) => host_attend(k, v, qd, plan, per_task, ops),
        (HostBuf::F16(k), HostBuf::F16(v)) => host_attend(k, v, qd, plan, per_task, ops),
        (HostBuf::BF16(k), HostBuf::BF16(v)) => host_attend(k, v, qd, plan, per_task, ops),
        (HostBuf::Blocks(ty, k), HostBuf::Blocks(_, v)) => {
            let (k, v) = (Blocks { ty: *ty, bytes: k, ops }, Blocks { ty: *ty, bytes: v, ops });
            host_attend(&k, &v, qd, plan, per_task, ops)
        }
        _ => unreachable!("keys and values share a dtype"),
    }
}

/// Query rows of one sequence that one attention task takes together: each cached key and value row it reads
/// (and widens or dequantizes) serves all of them, as in a verification step or a prefill chunk.
const MAX_TASK_ROWS: usize = 8;

/// Rows per attention task: up to [`MAX_TASK_ROWS`], fewer when that would leave under about four tasks per
/// thread.
fn task_rows(rows: usize, kv_heads: usize) -> usize {
    (rows * kv_heads).div_ceil(rayon::current_num_threads().max(1) * 4).clamp(1, MAX_TASK_ROWS)
}

/// Per-thread buffers of the attention tasks.
#[derive(Default)]
struct Scratch {
    /// Per task row: first and last visible position, offset of its scores.
    spans: Vec<(usize, usize, usize)>,
    /// Scores, then softmax weights: per row, per query head, one per visible position.
    scores: Vec<f32>,
    /// The task's queries, rounded like the cache.
    queries: Vec<f32>,
    /// One cached key or value row as f32.
    row: Vec<f32>,
    /// 1 / softmax sum per row and query head.
    inv: Vec<f32>,
    /// The query heads' normalized weights over one run of cached rows, rounded like the cache.
    weights: Vec<f32>,
}

/// Attention in parallel tasks of one KV head over up to `per_task` consecutive rows of one sequence: each cached
/// key and value row is read (and widened from f16/bf16 or dequantized from q8_0) once for all the rows and the
/// query heads that share it. Every query row's arithmetic is the same whatever the grouping. The dot products and
/// weighted sums run on `ops`.
fn host_attend<R: Rows>(kc: &R, vc: &R, qd: &[f32], plan: &AttentionPlan, per_task: usize, ops: RowOps) -> Vec<f32> {
    let (hd, heads, rows) = (plan.head_dim, plan.heads, plan.rows());
    let gw = heads / plan.kv_heads * hd;
    // KV-head-major results: each task owns the contiguous piece of its head and rows.
    let mut by_head = vec![0f32; rows * heads * hd];
    let mut tasks = Vec::new();
    let mut rest = by_head.as_mut_slice();
    for g in 0..plan.kv_heads {
        for seq in &plan.seqs {
            for r0 in seq.rows.clone().step_by(per_task) {
                let r1 = (r0 + per_task).min(seq.rows.end);
                let (mine, tail) = std::mem::take(&mut rest).split_at_mut((r1 - r0) * gw);
                rest = tail;
                tasks.push((g, seq, r0..r1, mine));
            }
        }
    }
    tasks.into_par_iter().for_each_init(Scratch::default, |s, (g, seq, rows, o)| {
        attend_rows(kc, vc, qd, plan, Task { g, seq, rows, ops }, o, s)
    });
    let mut out = vec![0f32; rows * heads * hd];
    for (row, o) in out.chunks_exact_mut(heads * hd).enumerate() {
        for (g, o) in o.chunks_exact_mut(gw).enumerate() {
            o.copy_from_slice(&by_head[(g * rows + row) * gw..][..gw]);
        }
    }
    out
}

/// The largest value of `x` (-inf when empty) in eight lanes: the sequential fold's value without its chain
/// of dependent comparisons.
fn max_of(x: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 8];
    let (chunks, rest) = x.as_chunks::<8>();
    for c in chunks {
        for l in 0..8 {
            m[l] = m[l].max(c[l]);
        }
    }
    rest.iter().chain(&m).copied().fold(f32::NEG_INFINITY, f32::max)
}

/// One task of [`host_attend`]: KV head `g` for the packed batch's rows `rows`, all of sequence `seq`.
struct Task<'p> {
    g: usize,
    seq: &'p SeqSpan,
    rows: Range<usize>,
    ops: RowOps,
}

/// Runs `t` into `o` (zeroed; per row, the query heads of KV head `t.g`).
fn attend_rows<R: Rows>(kc: &R, vc: &R, qd: &[f32], plan: &AttentionPlan, t: Task<'_>, o: &mut [f32], s: &mut Scratch) {
    let (hd, heads) = (plan.head_dim, plan.heads);
    let width = plan.kv_heads * hd;
    let gw = heads / plan.kv_heads * hd;
    let group = gw / hd;
    let base = t.seq.start + t.rows.start - t.seq.rows.start;
    s.spans.clear();
    s.queries.clear();
    let mut len = 0;
    for (j, row) in t.rows.clone().enumerate() {
        let pos = base + j;
        let lo = plan.first_visible(pos);
        s.spans.push((lo, pos, len));
        len += group * (pos + 1 - lo);
        s.queries.extend(qd[row * heads * hd + t.g * gw..][..gw].iter().map(|&x| R::round(x)));
    }
    let Scratch { spans, scores, queries, row: buf, inv, weights } = s;
    scores.clear();
    scores.resize(len, 0.0);
    let (first, last) = (spans[0].0, base + t.rows.len() - 1);
    // Cached rows a block's run at a time; row j takes the positions of the run it sees, in order.
    let visible = |(lo, pos, _): (usize, usize, usize), p0: usize, n: usize| (p0.max(lo), (p0 + n).min(pos + 1));
    for (p0, slot, n) in t.seq.table.runs(first..last + 1) {
        buf.resize(n * hd, 0.0);
        for (k, r) in buf.chunks_exact_mut(hd).enumerate() {
            kc.read((slot + k) * width + t.g * hd, r);
        }
        for (j, &span) in spans.iter().enumerate() {
            let ((a, b), (lo, pos, at)) = (visible(span, p0, n), span);
            if a >= b {
                continue;
            }
            let (n, keys) = (pos + 1 - lo, &buf[(a - p0) * hd..(b - p0) * hd]);
            let x = &mut scores[at + a - lo..at + (group - 1) * n + b - lo];
            t.ops.dots(&queries[j * gw..][..gw], hd, keys, x, n);
            for i in 0..group {
                x[i * n..i * n + b - a].iter_mut().for_each(|x| *x = plan.score(*x));
            }
        }
    }
    inv.clear();
    for &(lo, pos, at) in spans.iter() {
        let n = pos + 1 - lo;
        for x in scores[at..at + group * n].chunks_exact_mut(n) {
            let max = max_of(x);
            // Four partial sums, so that the additions do not wait on each other.
            let mut sums = [0f64; 4];
            for (k, x) in x.iter_mut().enumerate() {
                *x = (*x - max).exp();
                sums[k % 4] += *x as f64;
            }
            inv.push((1.0 / sums.iter().sum::<f64>()) as f32);
        }
    }
    for (p0, slot, n) in t.seq.table.runs(first..last + 1) {
        buf.resize(n * hd, 0.0);
        for (k, r) in buf.chunks_exact_mut(hd).enumerate() {
            vc.read((slot + k) * width + t.g * hd, r);
        }
        for (j, &span) in spans.iter().enumerate() {
            let ((a, b), (lo, pos, at)) = (visible(span, p0, n), span);
            if a >= b {
                continue;
            }
            let (n, vals) = (pos + 1 - lo, &buf[(a - p0) * hd..(b - p0) * hd]);
            weights.clear();
            for i in 0..group {
                let norm = inv[j * group + i];
                weights.extend(scores[at + i * n + a - lo..at + i * n + b - lo].iter().map(|&w| w * norm));
            }
            R::round_all(weights);
            t.ops.accumulate(&mut o[j * gw..][..gw], hd, weights, vals);
        }
    }
}

/// The tensor path (any device): scatter the new rows into the cache tensors, gather each sequence's
/// positions, masked softmax attention in f32.
pub(super) fn device(
    kc: &Tensor,
    vc: &Tensor,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    plan: &AttentionPlan,
) -> Result<Tensor, KvError> {
    let (hd, heads, kvh) = (plan.head_dim, plan.heads, plan.kv_heads);
    let dev = q.device();
    let (k, v) = (k.to_dtype(kc.dtype())?, v.to_dtype(vc.dtype())?);
    let mut row = 0;
    while row < plan.rows() {
        let mut end = row + 1;
        while end < plan.rows() && plan.slots[end] == plan.slots[end - 1] + 1 {
            end += 1;
        }
        kc.slice_set(&k.narrow(0, row, end - row)?, 0, plan.slots[row])?;
        vc.slice_set(&v.narrow(0, row, end - row)?, 0, plan.slots[row])?;
        row = end;
    }
    let mut outs = Vec::with_capacity(plan.seqs.len());
    for seq in &plan.seqs {
        let len = seq.rows.len();
        let ctx = seq.start + len;
        let idx: Vec<u32> = (0..ctx).map(|p| seq.table.slot(p) as u32).collect();
        let idx = Tensor::from_vec(idx, ctx, dev)?;
        let gather = |cache: &Tensor| -> Result<Tensor, KvError> {
            let t = cache.index_select(&idx, 0)?.to_dtype(DType::F32)?.reshape((ctx, kvh, 1, hd))?;
            let t = t.broadcast_as((ctx, kvh, heads / kvh, hd))?.reshape((ctx, heads, hd))?;
            Ok(t.transpose(0, 1)?.contiguous()?)
        };
        let (keys, vals) = (gather(kc)?, gather(vc)?);
        let qs = q.narrow(0, seq.rows.start, len)?.to_dtype(DType::F32)?.reshape((len, heads, hd))?;
        let qs = qs.transpose(0, 1)?.contiguous()?;
        let mask: Vec<f32> = (0..len)
            .flat_map(|i| {
                let pos = seq.start + i;
                let lo = plan.first_visible(pos);
                (0..ctx).map(move |p| if p < lo || p > pos { f32::NEG_INFINITY } else { 0.0 })
            })
            .collect();
        let mask = Tensor::from_vec(mask, (len, ctx), dev)?;
        let mut att = (qs.matmul(&keys.t()?)? * plan.scale as f64)?;
        if let Some(c) = plan.softcap {
            att = ((att / c as f64)?.tanh()? * c as f64)?;
        }
        let att = att.broadcast_add(&mask)?;
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let o = att.matmul(&vals)?.transpose(0, 1)?.reshape((len, heads * hd))?;
        outs.push(o.to_dtype(q.dtype())?);
    }
    Ok(Tensor::cat(&outs, 0)?)
}

#[cfg(test)]
mod quant_tests;
#[cfg(test)]
mod tests;
