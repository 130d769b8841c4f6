//! `cargo bench -p tgi-engines --bench kernels`: the ceilings, then µs per `matmul` call, GB/s of weight bytes
//! and batching speed-up for TinyLlama-1.1B shapes. Set RAYON_NUM_THREADS to size the pool;
//! `KERNELS_TYPES=q4_k,q8_0` and `KERNELS_N=1,16` narrow the table (`awq`: AWQ, group 128, zero point);
//! `KERNELS_SHAPES=2304x9216` sets the rows×cols shapes; `KERNELS_BACKENDS=avx2,avx512-vnni` picks the
//! instruction-set levels compared (default: every one this CPU has but the scalar one). A level with an
//! interleaved layout for the type (`Interleaved::pack`) gets a second row, `LEVEL+il`, with the repacked weights
//! (F16/BF16 on a CPU with AVX512_BF16: bf16 products from 32 rows where they pay, with `LEVEL+il-f32` keeping the
//! f32 FMAs; else `LEVEL+il-bf16` gives the bf16 ones).

#[path = "shared/ceilings.rs"]
mod ceilings;

use std::time::{Duration, Instant};

use tgi_engines::kernels::awq::{self, AwqMatrix};
use tgi_engines::kernels::interleaved::Interleaved;
use tgi_engines::kernels::{backend, matmul_with, Backend, WeightView};
use tgi_formats::awq::AwqTensor;
use tgi_formats::quant::quantize_row;
use tgi_formats::GgmlType;

/// Deterministic pseudo-random, roughly normal values.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            let mut v = 0.0;
            for _ in 0..4 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                v += (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            }
            v
        })
        .collect()
}

/// A rows×cols weight matrix: 64 distinct quantized rows repeated (encoding the whole matrix
/// with the reference quantizers would take minutes; the bytes streamed are the same).
fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let distinct = 64.min(rows);
    let src = values(distinct * cols, 42);
    let rb = ty.bytes_for(cols as u64).unwrap() as usize;
    let mut enc = vec![0u8; distinct * rb];
    for (s, d) in src.chunks(cols).zip(enc.chunks_mut(rb)) {
        quantize_row(ty, s, d).unwrap();
    }
    let mut data = Vec::with_capacity(rows * rb);
    while data.len() < rows * rb {
        let take = (rows * rb - data.len()).min(enc.len());
        data.extend_from_slice(&enc[..take]);
    }
    data
}

fn main() {
    let list = |var: &str, default: &str| -> Vec<String> {
        std::env::var(var).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_string()).collect()
    };
    let types = list("KERNELS_TYPES", "q4_k,q6_k,q8_0,f16,f32,awq");
    let ns: Vec<usize> = list("KERNELS_N", "1,4,16,128").iter().map(|s| s.parse().expect("n")).collect();
    let shapes: Vec<(usize, usize)> = list("KERNELS_SHAPES", "2048x2048,5632x2048,2048x5632,32000x2048")
        .iter()
        .map(|s| {
            s.split_once('x').map(|(r, c)| (r.parse().expect("rows"), c.parse().expect("cols"))).expect("ROWSxCOLS")
        })
        .collect();
    let fast: Vec<String> =
        Backend::available().into_iter().filter(|b| b.has_avx2()).map(|b| b.name().into()).collect();
    let backends: Vec<Backend> = list("KERNELS_BACKENDS", &fast.join(","))
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| *Backend::ALL.iter().find(|b| b.name() == s).unwrap_or_else(|| panic!("unknown backend {s}")))
        .collect();
    let backends = if backends.is_empty() { vec![backend()] } else { backends };
    println!("default backend {}, {} threads", backend().name(), rayon::current_num_threads());
    let (int8, fma) = (ceilings::int8_peak(), ceilings::fma_peak());
    println!(
        "ceilings over the pool: read {:.1} GB/s (256 MiB, u64 sum), int8 {:.0} GOPS ({}), f32 FMA {:.0} GFLOPS ({})",
        ceilings::read_bandwidth(),
        int8.giga_ops,
        int8.instruction,
        fma.giga_ops,
        fma.instruction
    );
    println!(
        "{:<12} {:<6} {:>12} {:>5} {:>11} {:>8} {:>9}",
        "backend", "type", "rows×cols", "n", "µs/call", "GB/s", "vs n×n=1"
    );
    for &b in &backends {
        for name in &types {
            for &(rows, cols) in &shapes {
                if name == "awq" {
                    let t = AwqTensor::quantize(&values(rows * cols, 42), rows, cols, 128, true).expect("awq");
                    let le = |v: &[i32]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
                    let scales: Vec<u8> = t.scales.iter().flat_map(|s| s.to_le_bytes()).collect();
                    let (qw, qz) = (le(&t.qweight), le(&t.qzeros));
                    let start = Instant::now();
                    let m = AwqMatrix::from_gemm(rows, cols, 128, &qw, &qz, &scales).expect("awq");
                    println!(
                        "{:<12} awq    {:>12} repacked at load in {:.1} ms",
                        b.name(),
                        format!("{rows}×{cols}"),
                        start.elapsed().as_secs_f64() * 1e3
                    );
                    let bytes = m.buffers().iter().map(|b| b.len()).sum();
                    row(b.name(), name, rows, cols, bytes, &ns, |x, n, y| awq::matmul_with(b, &m, x, n, y));
                } else {
                    let ty = GgmlType::parse(name).expect("type");
                    if !cols.is_multiple_of(ty.block_size()) {
                        println!(
                            "{:<12} {:<6} {:>12} skipped: {cols} columns are not whole blocks",
                            b.name(),
                            ty.ggml_name(),
                            format!("{rows}×{cols}")
                        );
                        continue;
                    }
                    let data = weights(ty, rows, cols);
                    let w = WeightView::new(ty, rows, cols, &data).unwrap();
                    row(b.name(), ty.ggml_name(), rows, cols, data.len(), &ns, |x, n, y| matmul_with(b, w, x, n, y));
                    if let Some(p) = Interleaved::pack(b, w, |_| {}) {
                        let level = format!("{}+il", b.name());
                        println!(
                            "{level:<12} {:<6} {:>12} repacked in {:.1} ms",
                            ty.ggml_name(),
                            format!("{rows}×{cols}"),
                            p.took().as_secs_f64() * 1e3
                        );
                        row(&level, ty.ggml_name(), rows, cols, p.bytes().len(), &ns, |x, n, y| p.matmul(x, n, y));
                        // The other choice of products for F16/BF16 panels where the CPU has bf16 ones.
                        let bf16 = ns.iter().any(|&n| p.in_bf16(n));
                        let (suffix, other) =
                            if bf16 { ("f32", p.with_f32_products()) } else { ("bf16", p.with_bf16_products()) };
                        if ns.iter().any(|&n| other.in_bf16(n)) != bf16 {
                            let (level, bytes) = (format!("{}+il-{suffix}", b.name()), other.bytes().len());
                            row(&level, ty.ggml_name(), rows, cols, bytes, &ns, |x, n, y| other.matmul(x, n, y));
                        }
                    }
                }
            }
        }
    }
}

/// Times `f(x, n, y)` for each activation row count `n` and prints a table row for each.
fn row(
    level: &str,
    name: &str,
    rows: usize,
    cols: usize,
    bytes: usize,
    ns: &[usize],
    f: impl Fn(&[f32], usize, &mut [f32]),
) {
    let mut t1 = None;
    for &n in ns {
        let x = values(n * cols, 7 + n as u64);
        let mut y = vec![0f32; n * rows];
        let t = ceilings::best_of(Duration::from_millis(400), || f(&x, n, &mut y)).as_secs_f64();
        if n == 1 {
            t1 = Some(t);
        }
        let speedup = match t1 {
            Some(t1) if n > 1 => format!("{:.2}×", n as f64 * t1 / t),
            _ => String::new(),
        };
        println!(
            "{:<12} {:<6} {:>12} {:>5} {:>11.1} {:>8.1} {:>9}",
            level,
            name,
            format!("{rows}×{cols}"),
            n,
            t * 1e6,
            bytes as f64 / t / 1e9,
            speedup
        );
    }
}
