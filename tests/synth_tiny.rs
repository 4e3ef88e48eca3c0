//! `synth hallucination` end to end on a tiny random model and three hand-written articles: every example
//! points at its original entity, carries features of the model's hidden size, matches a fresh-session
//! recomputation (the KV-cache reuse between truncation points changes nothing), and a re-run after a kill
//! redoes exactly the unfinished articles. Several articles at once (`--batch`) write the same rows.

mod common;

use std::collections::HashMap;

use ragtime::corpus::wikiextractor::Article;
use ragtime::device::DeviceKind;
use ragtime::entities::{CombinedExtractor, Resources};
use ragtime::labels::{read_all, HalluExample, HalluStore};
use ragtime::model::{random_weights, Arch, EngineKind, Lm, MemoryWeights, ModelConfig, Tokenizer};
use ragtime::synth::hallucination::{run, SynthConfig, Synthesizer, Template};

fn articles() -> Vec<Article> {
    let a = |id: &str, title: &str, body: &str| Article {
        id: id.into(),
        url: String::new(),
        title: title.into(),
        text: format!("{title}\n\n{body}"),
    };
    vec![
        a("1", "Ada Lovelace", "Ada Lovelace was an English mathematician born in 1815 in London. She worked with Charles Babbage on the Analytical Engine."),
        a("2", "Mount Everest", "Mount Everest is the highest mountain on Earth, at 8,849 metres. It lies in the Himalayas between Nepal and China."),
        a("3", "Berlin", "Berlin is the capital of Germany. About 3.7 million people lived there in 2020."),
    ]
}

fn tiny_lm() -> Option<Lm> {
    let cfg = ModelConfig::tiny(Arch::Llama, 49152);
    let tok = Tokenizer::from_file(&ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json")?).unwrap();
    let w = MemoryWeights(random_weights(&cfg, 11).into_iter().collect::<HashMap<_, _>>());
    Some(Lm::from_source(&w, cfg, tok, "tiny".into(), DeviceKind::Cpu).unwrap())
}

#[test]
fn synthesis_rows_resume_and_cache_reuse() {
    let Some(lm) = tiny_lm() else { return };
    let arts = articles();
    let x = CombinedExtractor::from_articles(&arts, None);
    let res = Resources::none();
    let cfg =
        SynthConfig { templates: vec![Template::Mind, Template::Radio], extra_tokens: 4, ..SynthConfig::default() };
    let synth = Synthesizer { lm: &lm, extractor: &x, resources: &res, cfg };
    let dir = tempfile::tempdir().unwrap();

    // a run killed after two articles: the first shard (one article) is committed, the second is only buffered
    {
        let mut store = HalluStore::open(dir.path(), &lm.name, lm.config.hidden_size).unwrap().with_flush_every(1);
        let mut s = lm.session();
        let ex = synth.article(&mut s, &arts[0]).unwrap();
        store.add_article("1", ex).unwrap();
        let mut store2 = store.with_flush_every(5);
        let ex = synth.article(&mut s, &arts[1]).unwrap();
        store2.add_article("2", ex).unwrap();
        drop(store2); // killed: article 2's buffer is lost
    }
    let mut store = HalluStore::open(dir.path(), &lm.name, lm.config.hidden_size).unwrap();
    assert!(store.is_done("1") && !store.is_done("2"));
    let mut lines = Vec::new();
    let m = run(&synth, &arts, &mut store, 1, &mut |l| lines.push(l.to_string())).unwrap();
    assert!(lines[0].starts_with("resuming: 1 of 3"), "{lines:?}");
    assert_eq!(m.articles, 3);

    let rows = read_all(dir.path()).unwrap();
    assert_eq!(rows.len(), m.examples);
    assert!(!rows.is_empty());
    for id in ["1", "2", "3"] {
        let n = rows.iter().filter(|r| r.article_id == id).count();
        assert!(n > 0 && n % 2 == 0, "article {id}: {n} rows (two templates each)");
    }
    // no truncation point stored twice
    let mut keys: Vec<(String, String, u32)> =
        rows.iter().map(|r| (r.article_id.clone(), r.template.clone(), r.trunc_offset)).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), rows.len());

    let d = lm.config.hidden_size;
    for r in &rows {
        let art = arts.iter().find(|a| a.id == r.article_id).unwrap();
        let at: String =
            art.text.chars().skip(r.trunc_offset as usize).take(r.original_entity.chars().count()).collect();
        assert_eq!(at, r.original_entity, "trunc_offset points at the entity");
        assert!(r.label <= 1);
        assert_eq!(
            r.label == 1,
            ragtime::entities::compare_entities(&r.original_entity, &r.generated_entity, &res).hallucinated
        );
        for v in [&r.hidden_final_last, &r.hidden_mean_last, &r.hidden_final_entity, &r.hidden_mean_entity] {
            assert_eq!(v.len(), d);
            assert!(v.iter().all(|x| x.is_finite()));
        }
        assert!(r.entropy_last.is_finite() && r.entropy_last >= 0.0);
    }

    // features do not depend on the cache reuse: one example recomputed in a fresh session
    let r = rows.iter().find(|r| r.article_id == "3" && r.template == "radio").unwrap();
    let fresh: Vec<_> = Synthesizer {
        lm: &lm,
        extractor: &x,
        resources: &res,
        cfg: SynthConfig { templates: vec![Template::Radio], extra_tokens: 4, ..SynthConfig::default() },
    }
    .article(&mut lm.session(), &arts[2])
    .unwrap();
    let f = fresh.iter().find(|f| f.trunc_offset == r.trunc_offset).unwrap();
    assert_eq!(f.continuation, r.continuation);
    let diff = f.hidden_mean_last.iter().zip(&r.hidden_mean_last).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(diff < 1e-4, "hidden_mean_last differs by {diff}");
    assert!((f.entropy_last - r.entropy_last).abs() < 1e-4);
}

/// Every column of every row, floats as bits.
fn same_rows(got: &[HalluExample], want: &[HalluExample], what: &str) {
    close_rows(got, want, 0.0, what)
}

/// Every text column of every row equal, every number within `tol` (0: bit for bit).
fn close_rows(got: &[HalluExample], want: &[HalluExample], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    let text = |r: &HalluExample| {
        [
            &r.article_id,
            &r.title,
            &r.template,
            &r.entity_label,
            &r.original_entity,
            &r.generated_entity,
            &r.continuation,
            &r.rule,
        ]
        .map(|s| s.clone())
    };
    let numbers = |r: &HalluExample| {
        let mut v = vec![r.trunc_offset, r.label as u32, r.entropy_last.to_bits(), r.entropy_entity_mean.to_bits()];
        for h in [&r.hidden_final_last, &r.hidden_mean_last, &r.hidden_final_entity, &r.hidden_mean_entity] {
            v.push(u32::MAX); // separator
            v.extend(h.iter().map(|x| x.to_bits()));
        }
        v
    };
    let floats = |r: &HalluExample| {
        let mut v = vec![r.entropy_last, r.entropy_entity_mean];
        for h in [&r.hidden_final_last, &r.hidden_mean_last, &r.hidden_final_entity, &r.hidden_mean_entity] {
            v.push(f32::MAX); // separator
            v.extend(h);
        }
        v
    };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(text(g), text(w), "{what}: row {i}");
        let row = format!("{what}: row {i} ({} {} {})", w.article_id, w.template, w.trunc_offset);
        if tol == 0.0 {
            assert_eq!(numbers(g), numbers(w), "{row}");
            continue;
        }
        assert_eq!((g.trunc_offset, g.label), (w.trunc_offset, w.label), "{row}");
        let (a, b) = (floats(g), floats(w));
        assert_eq!(a.len(), b.len(), "{row}: feature widths");
        let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(worst <= tol, "{row}: a number differs by {worst} (> {tol})");
    }
}

/// Articles of very different sizes, the largest first: with two lanes, the second lane finishes the three
/// small ones while the first is still on the large one, so they finish out of input order.
fn uneven_articles() -> Vec<Article> {
    let a = |id: &str, title: &str, body: &str| Article {
        id: id.into(),
        url: String::new(),
        title: title.into(),
        text: format!("{title}\n\n{body}"),
    };
    vec![
        a("1", "Ada Lovelace", "Ada Lovelace was an English mathematician born in 1815 in London. She worked with Charles Babbage on the Analytical Engine in 1843. She married William King in 1835 and had 3 children. She died in 1852 in Marylebone."),
        a("2", "Berlin", "Berlin is the capital of Germany."),
        a("3", "Mount Everest", "Mount Everest lies in Nepal."),
        a("4", "Paris", "Paris is a city in France."),
    ]
}

/// `synth hallucination --batch B` writes the rows of `--batch 1`: in the same order, every column bit for bit
/// (hidden-state features included), equal to the articles synthesized one after another in one session. With
/// 2 lanes over 4 articles (lanes take new articles mid-run and finish out of order), 8 lanes (more than
/// articles), and a run resumed with 2 lanes after one stored article. On the tiny f32 model and on a Q4_1 copy
/// whose decoding rows of several lanes share the integer weight products.
#[test]
fn batched_synthesis_writes_the_rows_of_one_session() {
    let Some(f32_lm) = tiny_lm() else { return };
    let Some(q4_lm) = common::tiny_q4(11) else { return };
    let arts = uneven_articles();
    let x = CombinedExtractor::from_articles(&arts, None);
    let res = Resources::none();
    for lm in [&f32_lm, &q4_lm] {
        let cfg =
            SynthConfig { templates: vec![Template::Mind, Template::Radio], extra_tokens: 4, ..SynthConfig::default() };
        let synth = Synthesizer { lm, extractor: &x, resources: &res, cfg };
        let mut s = lm.session();
        let want: Vec<HalluExample> = arts.iter().flat_map(|a| synth.article(&mut s, a).unwrap()).collect();
        let per_article = |id: &str| want.iter().filter(|r| r.article_id == id).count();
        assert!(arts.iter().all(|a| per_article(&a.id) > 0), "every article has examples");
        assert!(per_article("1") > per_article("2") + per_article("3") + per_article("4"), "article 1 is the largest");

        for lanes in [1, 2, 8] {
            let dir = tempfile::tempdir().unwrap();
            let mut store = HalluStore::open(dir.path(), &lm.name, lm.config.hidden_size).unwrap().with_flush_every(2);
            let mut lines = Vec::new();
            let m = run(&synth, &arts, &mut store, lanes, &mut |l| lines.push(l.to_string())).unwrap();
            assert_eq!((m.articles, m.examples), (4, want.len()));
            assert_eq!(lines.iter().filter(|l| l.starts_with('[')).count(), 4, "{lines:?}");
            same_rows(&read_all(dir.path()).unwrap(), &want, &format!("{}, {lanes} lanes", lm.name));
        }

        // resumed with 2 lanes: article 1 stored by an earlier run, articles 2-4 over the lanes
        let dir = tempfile::tempdir().unwrap();
        let mut store = HalluStore::open(dir.path(), &lm.name, lm.config.hidden_size).unwrap().with_flush_every(1);
        store.add_article("1", synth.article(&mut lm.session(), &arts[0]).unwrap()).unwrap();
        drop(store);
        let mut store = HalluStore::open(dir.path(), &lm.name, lm.config.hidden_size).unwrap();
        let mut lines = Vec::new();
        run(&synth, &arts, &mut store, 2, &mut |l| lines.push(l.to_string())).unwrap();
        assert!(lines[0].starts_with("resuming: 1 of 4"), "{lines:?}");
        same_rows(&read_all(dir.path()).unwrap(), &want, &format!("{}, resumed over 2 lanes", lm.name));
    }
}

/// `synth hallucination --batch B` on the batched engine (the GPU's engine, here on burn's CPU backend): 2 and 8
/// lanes write the rows of 1 lane (one article at a time), in the same order, with the same text, labels and
/// truncation points, and every number within 1e-4 (the lanes' passes run other shapes, so f32 sums round
/// differently).
#[test]
fn batched_engine_synthesis_over_lanes_writes_the_rows_of_one_lane() {
    batched_engine_synthesis(DeviceKind::Cpu, 1e-4);
}

/// The same on a GPU (`cargo test --release --test synth_tiny -- --ignored`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn batched_engine_on_cuda_synthesis_over_lanes_writes_the_rows_of_one_lane() {
    batched_engine_synthesis(DeviceKind::Cuda(0), 1e-3);
}

fn batched_engine_synthesis(device: DeviceKind, tol: f32) {
    let Some(tokenizer) = ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json") else { return };
    let cfg = ModelConfig::tiny(Arch::Llama, 49152);
    let w = MemoryWeights(random_weights(&cfg, 11).into_iter().collect::<HashMap<_, _>>());
    let tok = Tokenizer::from_file(&tokenizer).unwrap();
    let lm = Lm::from_source_on(&w, cfg, tok, "tiny".into(), device, EngineKind::Batched).unwrap();
    assert!(lm.engine().starts_with("batched"), "{}", lm.engine());
    let arts = uneven_articles();
    let x = CombinedExtractor::from_articles(&arts, None);
    let res = Resources::none();
    let cfg =
        SynthConfig { templates: vec![Template::Mind, Template::Radio], extra_tokens: 4, ..SynthConfig::default() };
    let synth = Synthesizer { lm: &lm, extractor: &x, resources: &res, cfg };
    let rows = |lanes: usize| {
        let dir = tempfile::tempdir().unwrap();
        let mut store = HalluStore::open(dir.path(), &lm.name, lm.config.hidden_size).unwrap().with_flush_every(2);
        let m = run(&synth, &arts, &mut store, lanes, &mut |_| {}).unwrap();
        assert_eq!(m.articles, 4);
        read_all(dir.path()).unwrap()
    };
    let one = rows(1);
    assert!(one.len() > 8, "the articles give examples: {}", one.len());
    for lanes in [2, 8] {
        close_rows(&rows(lanes), &one, tol, &format!("batched engine, {lanes} lanes"));
    }
}
