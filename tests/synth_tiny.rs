//! `synth hallucination` end to end on a tiny random model and three hand-written articles: every example
//! points at its original entity, carries features of the model's hidden size, matches a fresh-session
//! recomputation (the KV-cache reuse between truncation points changes nothing), and a re-run after a kill
//! redoes exactly the unfinished articles.

use std::collections::HashMap;

use ragtime::corpus::wikiextractor::Article;
use ragtime::device::DeviceKind;
use ragtime::entities::{CombinedExtractor, Resources};
use ragtime::model::{random_weights, Arch, Lm, MemoryWeights, ModelConfig, Tokenizer};
use ragtime::synth::hallucination::{run, SynthConfig, Synthesizer, Template};
use ragtime::synth::store::{read_all, HalluStore};

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
    let m = run(&synth, &arts, &mut store, &mut |l| lines.push(l.to_string())).unwrap();
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
