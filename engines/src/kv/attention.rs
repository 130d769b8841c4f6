//! Attention over paged KV: each query row attends to its own sequence's cached positions (causal,
//! optionally within a sliding window). A tuned host path for the CPU and a tensor path for GPUs.

use std::ops::Range;

use candle_core::{DType, Device, Tensor};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
use tgi_formats::quant::quantize_row;
use tgi_formats::GgmlType;

use super::simd::RowOps;
use super::{BlockTable, HostBuf, KvError, Q8_BLOCK};
use crate::kernels::act::Q8_0_BYTES;

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

/// A block_q8_0 buffer, addressed by element like the others (`at` and lengths are whole blocks).
struct Q8<'a>(&'a [u8]);

impl Rows for Q8<'_> {
    fn read(&self, at: usize, out: &mut [f32]) {
        let blocks = &self.0[at / Q8_BLOCK * Q8_0_BYTES..][..out.len() / Q8_BLOCK * Q8_0_BYTES];
        for (b, o) in blocks.chunks_exact(Q8_0_BYTES).zip(out.chunks_exact_mut(Q8_BLOCK)) {
            let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
            for (o, &q) in o.iter_mut().zip(&b[2..]) {
                *o = q as i8 as f32 * d;
            }
        }
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
            HostBuf::Q8_0(b) => {
                let bytes = width / Q8_BLOCK * Q8_0_BYTES;
                quantize_row(GgmlType::Q8_0, src, &mut b[slot * bytes..][..bytes]).expect("whole q8_0 blocks");
            }
        }
    }
}

/// The CPU path: writes the new rows into the host cache, then one task per (row, head).
pub(super) fn host(
    kc: &mut HostBuf,
    vc: &mut HostBuf,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    plan: &AttentionPlan,
) -> Result<Tensor, KvError> {
    let width = plan.kv_heads * plan.head_dim;
    store(kc, &host_f32(k)?, &plan.slots, width);
    store(vc, &host_f32(v)?, &plan.slots, width);
    let qd = host_f32(q)?;
    let (per_task, ops) = (task_rows(plan.rows(), plan.kv_heads), RowOps::detect());
    let out = match (&*kc, &*vc) {
        (HostBuf::F32(k), HostBuf::F32(v)) => host_attend(k, v, &qd, plan, per_task, ops),
        (HostBuf::F16(k), HostBuf::F16(v)) => host_attend(k, v, &qd, plan, per_task, ops),
        (HostBuf::BF16(k), HostBuf::BF16(v)) => host_attend(k, v, &qd, plan, per_task, ops),
        (HostBuf::Q8_0(k), HostBuf::Q8_0(v)) => host_attend(&Q8(k), &Q8(v), &qd, plan, per_task, ops),
        _ => unreachable!("keys and values share a dtype"),
    };
    Ok(Tensor::from_vec(out, (plan.rows(), plan.heads * plan.head_dim), &Device::Cpu)?)
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
    /// One query head's normalized weights over one run of cached rows, rounded like the cache.
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
            for (i, q) in queries[j * gw..][..gw].chunks_exact(hd).enumerate() {
                let x = &mut scores[at + i * n + a - lo..at + i * n + b - lo];
                t.ops.dots(q, keys, x);
                x.iter_mut().for_each(|x| *x = plan.score(*x));
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
            for (i, o) in o[j * gw..][..gw].chunks_exact_mut(hd).enumerate() {
                let norm = inv[j * group + i];
                weights.clear();
                weights.extend(scores[at + i * n + a - lo..at + i * n + b - lo].iter().map(|&w| w * norm));
                R::round_all(weights);
                t.ops.accumulate(o, weights, vals);
            }
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
mod tests {
    use super::*;
    use crate::kv::simd::tests::values as rand;
    use crate::kv::{BlockAllocator, KvDType};

    /// The host path and the tensor path agree, for a batch mixing a prefill chunk and a decode row,
    /// with grouped-query heads, a sliding window, and Gemma 2's scale and soft-cap.
    #[test]
    fn host_and_tensor_paths_agree() {
        let (heads, kvh, hd, bs) = (4, 2, 8, 4);
        let mut pool = BlockAllocator::new(16, bs);
        let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
        pool.grow(&mut b, 3).unwrap(); // interleave blocks so slots are not contiguous
        pool.grow(&mut a, 6).unwrap();
        pool.grow(&mut b, 7).unwrap();
        for (window, softcap) in [(None, None), (Some(3), None), (Some(3), Some(0.5))] {
            let width = kvh * hd;
            let slots = 16 * bs * width;
            let (mut hk, mut hv) = (HostBuf::F32(vec![0f32; slots]), HostBuf::F32(vec![0f32; slots]));
            let dk = Tensor::zeros((16 * bs, width), DType::F32, &Device::Cpu).unwrap();
            let dv = dk.zeros_like().unwrap();
            // Step 1: a prefills 6 tokens, b prefills 6; step 2: b decodes one token.
            let steps = [vec![(0..6, 0, a.clone()), (6..12, 0, b.clone())], vec![(0..1, 6, b.clone())]];
            for (n, step) in steps.into_iter().enumerate() {
                let seqs: Vec<SeqSpan> =
                    step.into_iter().map(|(rows, start, table)| SeqSpan { rows, start, table }).collect();
                let mut plan = AttentionPlan::new(seqs, heads, kvh, hd, window).with_softcap(softcap);
                if softcap.is_some() {
                    plan = plan.with_scale(0.7);
                }
                let t = plan.rows();
                let mk = |w: usize, s: u32| Tensor::from_vec(rand(t * w, s + n as u32), (t, w), &Device::Cpu).unwrap();
                let (q, k, v) = (mk(heads * hd, 1), mk(width, 2), mk(width, 3));
                let x = host(&mut hk, &mut hv, &q, &k, &v, &plan).unwrap().to_vec2::<f32>().unwrap();
                let y = device(&dk, &dv, &q, &k, &v, &plan).unwrap().to_vec2::<f32>().unwrap();
                for (rx, ry) in x.iter().zip(&y) {
                    for (a, b) in rx.iter().zip(ry) {
                        assert!((a - b).abs() < 1e-5, "{a} vs {b} (window {window:?}, step {n})");
                    }
                }
            }
        }
    }

    /// Tasks of several rows give every row exactly the result it gets alone: a verification-like batch (two
    /// sequences of 5 and 7 rows after cached positions, interleaved blocks) over f32 and f16 caches, with and
    /// without a sliding window, grouped into tasks of 1, 3 and 8 rows.
    #[test]
    fn row_grouping_does_not_change_results() {
        let (heads, kvh, hd, bs) = (4, 2, 8, 4);
        let mut pool = BlockAllocator::new(16, bs);
        let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
        pool.grow(&mut b, 3).unwrap();
        pool.grow(&mut a, 15).unwrap();
        pool.grow(&mut b, 19).unwrap();
        let width = kvh * hd;
        for dtype in [KvDType::F32, KvDType::F16] {
            for window in [None, Some(6)] {
                let mut kc = HostBuf::zeros(16 * bs * width, dtype);
                let mut vc = HostBuf::zeros(16 * bs * width, dtype);
                let slots: Vec<usize> = (0..15).map(|p| a.slot(p)).chain((0..19).map(|p| b.slot(p))).collect();
                store(&mut kc, &varied(34 * width, 4), &slots, width);
                store(&mut vc, &varied(34 * width, 5), &slots, width);
                let seqs = vec![
                    SeqSpan { rows: 0..5, start: 10, table: a.clone() },
                    SeqSpan { rows: 5..12, start: 12, table: b.clone() },
                ];
                let plan = AttentionPlan::new(seqs, heads, kvh, hd, window);
                let q = varied(12 * heads * hd, 6);
                let run = |per_task| match (&kc, &vc) {
                    (HostBuf::F32(k), HostBuf::F32(v)) => host_attend(k, v, &q, &plan, per_task, RowOps::detect()),
                    (HostBuf::F16(k), HostBuf::F16(v)) => host_attend(k, v, &q, &plan, per_task, RowOps::detect()),
                    _ => unreachable!(),
                };
                let alone = run(1);
                for per_task in [3, 8] {
                    assert_eq!(run(per_task), alone, "{dtype:?}, window {window:?}, {per_task} rows per task");
                }
            }
        }
    }

    /// The SIMD dot products and weighted sums give the portable loops' results within 1e-5 of the largest output
    /// (2^-10 for an f16 cache, whose rounding of the attention weights to f16 can fall either side of a step):
    /// grouped-query ratios 1, 4 and 8, head widths with and without a tail of 8, a prefill after a prefix of cached
    /// positions, lengths not a multiple of the block, and every cache type.
    #[test]
    fn simd_and_portable_row_ops_agree() {
        for (heads, kvh, hd) in [(2, 2, 32), (8, 2, 40), (8, 1, 64), (4, 1, 13)] {
            for dtype in [KvDType::F32, KvDType::F16, KvDType::BF16, KvDType::Q8_0] {
                if dtype == KvDType::Q8_0 && hd % Q8_BLOCK != 0 {
                    continue;
                }
                let bs = 16;
                let mut pool = BlockAllocator::new(8, bs);
                let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
                pool.grow(&mut b, 9).unwrap();
                pool.grow(&mut a, 45).unwrap();
                pool.grow(&mut b, 50).unwrap();
                let width = kvh * hd;
                let mut kc = HostBuf::zeros(8 * bs * width, dtype);
                let mut vc = HostBuf::zeros(8 * bs * width, dtype);
                let slots: Vec<usize> = (0..45).map(|p| a.slot(p)).chain((0..50).map(|p| b.slot(p))).collect();
                store(&mut kc, &varied(95 * width, 7), &slots, width);
                store(&mut vc, &varied(95 * width, 8), &slots, width);
                // a: 37 new rows after 8 cached positions; b: 21 after 29, then one decode row of b.
                let seqs = vec![
                    SeqSpan { rows: 0..37, start: 8, table: a.clone() },
                    SeqSpan { rows: 37..58, start: 29, table: b.clone() },
                    SeqSpan { rows: 58..59, start: 49, table: b.clone() },
                ];
                let plan = AttentionPlan::new(seqs, heads, kvh, hd, None);
                let q = varied(59 * heads * hd, 9);
                let per_task = task_rows(plan.rows(), kvh);
                let run = |ops| match (&kc, &vc) {
                    (HostBuf::F32(k), HostBuf::F32(v)) => host_attend(k, v, &q, &plan, per_task, ops),
                    (HostBuf::F16(k), HostBuf::F16(v)) => host_attend(k, v, &q, &plan, per_task, ops),
                    (HostBuf::BF16(k), HostBuf::BF16(v)) => host_attend(k, v, &q, &plan, per_task, ops),
                    (HostBuf::Q8_0(k), HostBuf::Q8_0(v)) => host_attend(&Q8(k), &Q8(v), &q, &plan, per_task, ops),
                    _ => unreachable!(),
                };
                let (fast, portable) = (run(RowOps::detect()), run(RowOps::scalar()));
                let tol = if dtype == KvDType::F16 { 1.0 / 1024.0 } else { 1e-5 };
                let scale = portable.iter().fold(0f32, |m, v| m.max(v.abs()));
                for (i, (x, y)) in fast.iter().zip(&portable).enumerate() {
                    assert!((x - y).abs() <= tol * scale, "{heads}/{kvh}x{hd} {dtype:?} element {i}: {x} vs {y}");
                }
            }
        }
    }

    /// The eight-lane maximum and the f16 slice rounding give exactly the sequential values.
    #[test]
    fn lane_max_and_slice_rounding_are_exact() {
        for n in 0..40 {
            let mut x = varied(n, n as u32);
            let fold = |x: &[f32]| x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max_of(&x), fold(&x), "{n} values");
            if n > 3 {
                x[3] = f32::NAN;
                assert_eq!(max_of(&x), fold(&x), "{n} values with a NaN");
            }
        }
        let x: Vec<f32> = varied(150, 11).iter().map(|v| v * 1e-3).collect();
        let mut y = x.clone();
        <Vec<f16> as Rows>::round_all(&mut y);
        let z: Vec<f32> = x.iter().map(|&v| <Vec<f16> as Rows>::round(v)).collect();
        assert_eq!(y, z);
    }

    /// A single query over one position returns that position's value.
    #[test]
    fn one_position_returns_its_value() {
        let mut pool = BlockAllocator::new(2, 4);
        let mut t = BlockTable::new();
        pool.grow(&mut t, 1).unwrap();
        let plan = AttentionPlan::new(vec![SeqSpan { rows: 0..1, start: 0, table: t }], 2, 1, 4, None);
        let (mut hk, mut hv) = (HostBuf::F32(vec![0f32; 32]), HostBuf::F32(vec![0f32; 32]));
        let q = Tensor::ones((1, 8), DType::F32, &Device::Cpu).unwrap();
        let k = Tensor::ones((1, 4), DType::F32, &Device::Cpu).unwrap();
        let v = Tensor::new(&[[1f32, 2., 3., 4.]], &Device::Cpu).unwrap();
        let o = host(&mut hk, &mut hv, &q, &k, &v, &plan).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(o[0], vec![1., 2., 3., 4., 1., 2., 3., 4.]);
    }

    /// `x` stored in a one-row host buffer of `dtype` and read back as f32.
    fn round_trip(x: &[f32], dtype: KvDType) -> Vec<f32> {
        let mut buf = HostBuf::zeros(x.len(), dtype);
        store(&mut buf, x, &[0], x.len());
        let mut out = vec![0f32; x.len()];
        match &buf {
            HostBuf::F32(b) => b.read(0, &mut out),
            HostBuf::F16(b) => b.read(0, &mut out),
            HostBuf::BF16(b) => b.read(0, &mut out),
            HostBuf::Q8_0(b) => Q8(b).read(0, &mut out),
        }
        out
    }

    /// Random values in ±1..±4, the magnitude changing every 32 values so q8_0's block scales differ.
    fn varied(n: usize, seed: u32) -> Vec<f32> {
        rand(n, seed).iter().enumerate().map(|(i, x)| x * (1 + i / 32 % 4) as f32).collect()
    }

    /// The outputs of two steps (two sequences prefilling 6 tokens each in interleaved blocks, then one
    /// decoding) of grouped-query attention with 64-wide heads over a cache of `dtype`, host or tensor path,
    /// the keys and values first rounded through `through`; and the largest Σ|q| of a query head, |k| and
    /// |v| of the inputs.
    fn two_steps(dtype: KvDType, tensor: bool, through: KvDType) -> (Vec<Vec<f32>>, [f32; 3]) {
        let (heads, kvh, hd, bs) = (4, 2, 64, 4);
        let mut pool = BlockAllocator::new(16, bs);
        let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
        pool.grow(&mut b, 3).unwrap();
        pool.grow(&mut a, 6).unwrap();
        pool.grow(&mut b, 7).unwrap();
        let width = kvh * hd;
        let (mut hk, mut hv) = (HostBuf::zeros(16 * bs * width, dtype), HostBuf::zeros(16 * bs * width, dtype));
        let dk = Tensor::zeros((16 * bs, width), dtype.tensor_dtype().unwrap_or(DType::F32), &Device::Cpu).unwrap();
        let dv = dk.zeros_like().unwrap();
        let (mut outs, mut maxes) = (Vec::new(), [0f32; 3]);
        let steps = [vec![(0..6, 0, a.clone()), (6..12, 0, b.clone())], vec![(0..1, 6, b.clone())]];
        for (n, step) in steps.into_iter().enumerate() {
            let seqs: Vec<SeqSpan> =
                step.into_iter().map(|(rows, start, table)| SeqSpan { rows, start, table }).collect();
            let plan = AttentionPlan::new(seqs, heads, kvh, hd, None);
            let t = plan.rows();
            let n = n as u32;
            let (qd, kd, vd) = (varied(t * heads * hd, 1 + n), varied(t * width, 2 + n), varied(t * width, 3 + n));
            let amax = |x: &[f32]| x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let qsum = qd.chunks(hd).map(|h| h.iter().map(|x| x.abs()).sum::<f32>()).fold(0f32, f32::max);
            maxes = [maxes[0].max(qsum), maxes[1].max(amax(&kd)), maxes[2].max(amax(&vd))];
            let mk = |x: Vec<f32>, w: usize| Tensor::from_vec(x, (t, w), &Device::Cpu).unwrap();
            let (q, k, v) =
                (mk(qd, heads * hd), mk(round_trip(&kd, through), width), mk(round_trip(&vd, through), width));
            let o = if tensor {
                device(&dk, &dv, &q, &k, &v, &plan).unwrap()
            } else {
                host(&mut hk, &mut hv, &q, &k, &v, &plan).unwrap()
            };
            outs.push(o.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        }
        (outs, maxes)
    }

    /// Worst |difference| between two runs' outputs.
    fn worst(x: &[Vec<f32>], y: &[Vec<f32>]) -> f32 {
        x.iter().flatten().zip(y.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max)
    }

    /// Per-element rounding of the formats: bf16 keeps 8 significant bits (|error| ≤ 2^-8·|x|); q8_0 rounds
    /// to the nearest step of d = amax/127 of its block of 32 (≤ amax/254), d stored as f16 (another
    /// 127·d·2^-11 = amax·2^-11).
    #[test]
    fn rounding_is_within_format_precision() {
        let x = varied(4096, 7);
        for (a, b) in x.iter().zip(round_trip(&x, KvDType::BF16)) {
            assert!((a - b).abs() <= a.abs() * 2f32.powi(-8), "bf16: {a} vs {b}");
        }
        let q8 = round_trip(&x, KvDType::Q8_0);
        for (x, y) in x.chunks(32).zip(q8.chunks(32)) {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (a, b) in x.iter().zip(y) {
                assert!((a - b).abs() <= amax * (1.0 / 254.0 + 2f32.powi(-11)), "q8_0: {a} vs {b} (amax {amax})");
            }
        }
    }

    /// Attention over a bf16 or q8_0 cache is f32 attention over the keys and values rounded through the
    /// format, bit for bit: queries and softmax weights stay f32 and only the storage rounds.
    #[test]
    fn bf16_and_q8_0_only_round_the_storage() {
        for dtype in [KvDType::BF16, KvDType::Q8_0] {
            let (got, _) = two_steps(dtype, false, KvDType::F32);
            let (want, _) = two_steps(KvDType::F32, false, dtype);
            assert_eq!(got, want, "{dtype:?}");
        }
    }

    /// bf16 and q8_0 caches stay within the worst-case error their rounding allows of the f32 cache. If each
    /// cached key element is off by at most `ek` and each value by `ev` (see above), every score `scale·q·k`
    /// moves by at most Δ = scale·Σ|q|·ek, each softmax weight by a factor within e^±2Δ, and the output by at
    /// most (e^2Δ − 1)(max|v| + ev) + ev. (Typical errors are far smaller: the roundings do not line up.)
    #[test]
    fn bf16_and_q8_0_are_within_their_precision_of_f32() {
        let (exact, [qsum, kmax, vmax]) = two_steps(KvDType::F32, false, KvDType::F32);
        let scale = 1.0 / 64f32.sqrt();
        for (dtype, rel) in [(KvDType::BF16, 2f32.powi(-8)), (KvDType::Q8_0, 1.0 / 254.0 + 2f32.powi(-11))] {
            let (ek, ev) = (rel * kmax, rel * vmax);
            let delta = scale * qsum * ek;
            let bound = (2.0 * delta).exp_m1() * (vmax + ev) + ev + 1e-5;
            let (got, _) = two_steps(dtype, false, KvDType::F32);
            let err = worst(&got, &exact);
            assert!(err <= bound, "{dtype:?}: max |diff| {err} > bound {bound}");
        }
    }

    /// The tensor path over a bf16 cache matches the host path over one: same stored values, f32 products.
    #[test]
    fn bf16_host_and_tensor_paths_agree() {
        let (host, _) = two_steps(KvDType::BF16, false, KvDType::F32);
        let (tensor, _) = two_steps(KvDType::BF16, true, KvDType::F32);
        let err = worst(&host, &tensor);
        assert!(err < 1e-5, "max |diff| {err}");
    }

    /// q8_0 rows hold ggml's block_q8_0 (f16 d = amax/127, then round(x/d) as i8) and read back as q·d.
    #[test]
    fn q8_0_rows_are_ggml_blocks() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) / 8.0).collect();
        let mut buf = HostBuf::zeros(2 * 64, KvDType::Q8_0);
        store(&mut buf, &x, &[1], 64);
        let HostBuf::Q8_0(bytes) = &buf else { unreachable!() };
        assert!(bytes[..2 * 34].iter().all(|&b| b == 0), "slot 0 untouched");
        let block = &bytes[2 * 34..3 * 34];
        let d = 20.0 / 8.0 / 127.0;
        assert_eq!(f16::from_le_bytes([block[0], block[1]]), f16::from_f32(d));
        assert_eq!(block[2] as i8, -127);
        assert_eq!(block[2 + 20] as i8, 0);
        assert_eq!(block[2 + 21] as i8, (0.125f32 / d).round() as i8);
        let mut back = vec![0f32; 64];
        Q8(bytes).read(64, &mut back);
        for (i, (a, b)) in x.iter().zip(&back).enumerate() {
            let amax = if i < 32 { 2.5f32 } else { 43.0 / 8.0 };
            assert!((a - b).abs() <= amax * (1.0 / 254.0 + 2f32.powi(-11)), "{i}: {a} vs {b}");
        }
    }
}
