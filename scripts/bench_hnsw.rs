//! Helper of scripts/bench-dense.sh: ragtime's vector search on a synthetic set. Makes `n` unit vectors and
//! `queries` more (seeded, so the faiss side reads the same ones from `--dump DIR`): uniform on the sphere, or with
//! `--clusters C` drawn around C random centres (`normalize(centre + spread * g / sqrt(dim))`, g standard normal),
//! closer to how sentence embeddings crowd. Builds the HNSW index
//! (usearch) and times it, measures query latency one query at a time, and recall@10 against exact search, at
//! `--ef-search` and then at each width of `--ef-sweep W,W,...` (the recall-latency curve); with `--f16`, again on
//! a graph over f16 copies of the vectors. Prints one JSON object.
//!
//!     cargo run --release --example bench_hnsw -- --n 100000 --dim 384 --m 32 --ef-construction 200 \
//!         --ef-search 128 --ef-sweep 16,32,64,256 --queries 1000 --dump target/bench-dense

use std::io::Write;
use std::time::Instant;

use ragtime::retrieval::flat::FlatIndex;
use ragtime::retrieval::hnsw::{HnswIndex, HnswParams};
use ragtime::retrieval::vectors::{random_unit_vectors, Matrix, VectorSearch};

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(|v| v.parse().expect(name)).unwrap_or(default)
}

/// Peak resident memory of this process, in MiB (VmHWM).
fn peak_rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// Unit vectors around `c` random centres (see the module docs).
fn clustered(n: usize, dim: usize, c: usize, spread: f32, seed: u64) -> Vec<f32> {
    use rand::{Rng, SeedableRng};
    let centres = random_unit_vectors(c, dim, seed + 1);
    let noise = random_unit_vectors(n, dim, seed + 2);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n * dim);
    for i in 0..n {
        let k = rng.random_range(0..c);
        // unit noise direction, scaled: the same norm as a standard normal vector / sqrt(dim)
        let v: Vec<f32> = (0..dim).map(|j| centres[k * dim + j] + spread * noise[i * dim + j]).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        out.extend(v.iter().map(|x| x / norm));
    }
    out
}

/// Query latency p50 and p99 in ms (one query at a time, k 10) and mean recall@10 against `exact`.
fn latency_recall(h: &HnswIndex, queries: &[Vec<f32>], exact: &[Vec<u64>]) -> anyhow::Result<(f64, f64, f64)> {
    let mut lat = Vec::with_capacity(queries.len());
    let mut recall = 0.0;
    for (q, e) in queries.iter().zip(exact) {
        let t = Instant::now();
        let hits = h.search(q, 10)?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        recall += hits.iter().filter(|x| e.contains(&x.0)).count() as f64 / e.len().max(1) as f64;
    }
    lat.sort_by(f64::total_cmp);
    let pct = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
    Ok((pct(0.5), pct(0.99), recall / queries.len().max(1) as f64))
}

/// [`latency_recall`] at each search width of `widths`, one JSON object per width.
fn recall_latency_curve(
    h: &mut HnswIndex,
    widths: &[usize],
    queries: &[Vec<f32>],
    exact: &[Vec<u64>],
) -> anyhow::Result<Vec<serde_json::Value>> {
    widths
        .iter()
        .map(|&ef| {
            h.set_ef_search(ef);
            let (p50, p99, recall) = latency_recall(h, queries, exact)?;
            Ok(serde_json::json!({"ef_search": ef, "p50_ms": p50, "p99_ms": p99, "recall_at_10": recall}))
        })
        .collect()
}

fn write_f32(path: &std::path::Path, data: &[f32]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for x in data {
        f.write_all(&x.to_le_bytes()).unwrap();
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (n, dim, nq) = (arg(&args, "--n", 1_000_000), arg(&args, "--dim", 384), arg(&args, "--queries", 1000));
    let p = HnswParams {
        m: arg(&args, "--m", 32),
        ef_construction: arg(&args, "--ef-construction", 200),
        ef_search: arg(&args, "--ef-search", 128),
    };
    let sweep: Vec<usize> = args
        .iter()
        .position(|a| a == "--ef-sweep")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter(|x| !x.is_empty()).map(|x| x.parse().expect("--ef-sweep")).collect())
        .unwrap_or_default();
    let dump = args.iter().position(|a| a == "--dump").and_then(|i| args.get(i + 1)).map(std::path::PathBuf::from);

    let clusters = arg(&args, "--clusters", 0);
    let spread = args
        .iter()
        .position(|a| a == "--spread")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse::<f32>().expect("--spread"))
        .unwrap_or(1.0);
    let data = if clusters == 0 {
        random_unit_vectors(n + nq, dim, 1234)
    } else {
        clustered(n + nq, dim, clusters, spread, 1234)
    };
    let (base, qs) = data.split_at(n * dim);
    let queries: Vec<Vec<f32>> = qs.chunks(dim).map(|c| c.to_vec()).collect();
    let m = Matrix::F32 { data: base.to_vec(), dim };
    drop(data);
    let rss_data = peak_rss_mib();

    let t = Instant::now();
    let h = HnswIndex::build(&m, p, true)?;
    let build_s = t.elapsed().as_secs_f64();
    let rss_build = peak_rss_mib();

    let flat = FlatIndex::new(m);
    let t = Instant::now();
    let exact: Vec<Vec<u64>> = queries
        .iter()
        .map(|q| flat.search(q, 10).map(|v| v.into_iter().map(|x| x.0).collect()))
        .collect::<anyhow::Result<_>>()?;
    let exact_ms = t.elapsed().as_secs_f64() * 1e3 / nq as f64;
    // Latency and recall at --ef-search, then at each width of --ef-sweep (the recall-latency curve, as
    // ann-benchmarks draws it).
    let mut h = h;
    let simd = h.acceleration();
    let index_mib = h.memory_usage() as f64 / 1048576.0;
    let widths: Vec<usize> = std::iter::once(p.ef_search).chain(sweep.iter().copied()).collect();
    let curve = recall_latency_curve(&mut h, &widths, &queries, &exact)?;
    let main = curve[0].clone();
    // --f16: the same graph built over f16 copies of the vectors (half the bytes a distance reads), measured the
    // same way, after the f32 one is dropped.
    let f16 = if args.iter().any(|a| a == "--f16") {
        drop(h);
        let half = match &flat.vectors {
            Matrix::F32 { data, dim } => {
                Matrix::F16 { data: data.iter().map(|&x| half::f16::from_f32(x)).collect(), dim: *dim }
            }
            _ => unreachable!(),
        };
        let t = Instant::now();
        let mut h16 = HnswIndex::build(&half, p, true)?;
        let build_s = t.elapsed().as_secs_f64();
        let curve = recall_latency_curve(&mut h16, &widths, &queries, &exact)?;
        Some(
            serde_json::json!({"build_s": build_s, "index_mib": h16.memory_usage() as f64 / 1048576.0, "curve": curve}),
        )
    } else {
        None
    };

    if let Some(d) = dump {
        std::fs::create_dir_all(&d)?;
        write_f32(
            &d.join("base.f32"),
            match &flat.vectors {
                Matrix::F32 { data, .. } => data,
                _ => unreachable!(),
            },
        );
        write_f32(&d.join("queries.f32"), &queries.concat());
        let gt: Vec<u8> = exact.iter().flatten().flat_map(|x| (*x as i64).to_le_bytes()).collect();
        std::fs::write(d.join("gt.i64"), gt)?;
    }
    println!(
        "{}",
        serde_json::json!({
            "system": "ragtime (usearch HNSW)", "n": n, "dim": dim, "queries": nq, "m": p.m, "ef_construction": p.ef_construction,
            "ef_search": p.ef_search, "threads": rayon::current_num_threads(), "build_s": build_s, "simd": simd, "clusters": clusters, "spread": spread,
            "peak_rss_mib": rss_build, "data_rss_mib": rss_data, "index_mib": index_mib,
            "p50_ms": main["p50_ms"], "p99_ms": main["p99_ms"], "recall_at_10": main["recall_at_10"],
            "exact_ms_per_query": exact_ms, "sweep": &curve[1..], "f16": f16,
        })
    );
    Ok(())
}
