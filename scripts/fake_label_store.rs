//! Helper of scripts/bench-detector-memory.sh: writes a synthetic hallucination-label store of ROWS rows of
//! hidden size HIDDEN through ragtime's own store writer (the layout `ragtime synth hallucination` writes), for
//! measuring `train detector` at sizes no synthesis here can reach. `hidden_mean_last` holds two Gaussian classes
//! (means -0.1 and +0.1 per feature, unit variance, one third labelled hallucinated), so training has something to
//! learn; the other vector columns are zeros. 25 rows per article, 64 articles per shard, seeded.
//!
//!     cargo run --release --example fake_label_store -- OUT ROWS HIDDEN

use ragtime::labels::{HalluExample, HalluStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, out, rows, hidden] = args.as_slice() else {
        anyhow::bail!("usage: fake_label_store OUT ROWS HIDDEN");
    };
    let (rows, hidden): (usize, usize) = (rows.parse()?, hidden.parse()?);
    let per_article = 25;
    let mut rng = StdRng::seed_from_u64(11);
    let mut store = HalluStore::open(out, "synthetic", hidden)?;
    let mut written = 0;
    let mut a = 0;
    while written < rows {
        let id = format!("synthetic article {a}");
        let n = per_article.min(rows - written);
        let examples = (0..n)
            .map(|k| {
                let label = ((a + k) % 3 == 0) as u8;
                let mu = if label == 1 { 0.1 } else { -0.1 };
                let v = (0..hidden)
                    .map(|_| {
                        let (u1, u2): (f32, f32) = (rng.random::<f32>().max(1e-7), rng.random());
                        mu + (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
                    })
                    .collect();
                HalluExample {
                    article_id: id.clone(),
                    label,
                    hidden_mean_last: v,
                    hidden_final_last: vec![0.0; hidden],
                    hidden_final_entity: vec![0.0; hidden],
                    hidden_mean_entity: vec![0.0; hidden],
                    ..Default::default()
                }
            })
            .collect();
        store.add_article(&id, examples)?;
        written += n;
        a += 1;
    }
    let m = store.finish()?;
    println!("{out}: {} rows from {} articles in {} shards, hidden {hidden}", m.examples, m.articles, m.shards.len());
    Ok(())
}
