//! `cargo bench -p tgi-engines --bench ceilings [-- --json]`: this machine's read bandwidth and its int8
//! dot-product and f32 FMA peaks over the pool (RAYON_NUM_THREADS sizes it), the ceilings that
//! `bench/engine_vs_llamacpp.sh` sets prefill and decode against. `--json` prints one object.

#[path = "shared/ceilings.rs"]
mod ceilings;

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let threads = rayon::current_num_threads();
    let (read, int8, fma) = (ceilings::read_bandwidth(), ceilings::int8_peak(), ceilings::fma_peak());
    if json {
        let value = serde_json::json!({
            "threads": threads,
            "read_gb_per_s": read,
            "int8_gops": int8.giga_ops,
            "int8_instruction": int8.instruction,
            "fma_gflops": fma.giga_ops,
            "fma_instruction": fma.instruction,
        });
        println!("{value}");
    } else {
        println!("{threads} threads");
        println!("read bandwidth (256 MiB, u64 sum): {read:.1} GB/s");
        println!("int8 dot products ({}): {:.0} GOPS", int8.instruction, int8.giga_ops);
        println!("f32 FMA ({}): {:.0} GFLOPS", fma.instruction, fma.giga_ops);
    }
}
