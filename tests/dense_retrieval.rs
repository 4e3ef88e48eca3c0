//! Dense and hybrid retrieval: the sentence encoder against sentence-transformers (real all-MiniLM-L6-v2, from
//! `scripts/setup.sh --minilm`), clear errors for broken model folders, and a tiny random BERT carried through
//! encoding, a dense index (flat and HNSW, resumed), and the dense and hybrid retrievers.

use std::path::{Path, PathBuf};

use ragtime::corpus::passages::{CorpusOptions, OnBadLine};
use ragtime::device::DeviceKind;
use ragtime::encoder::bert::{random_bert_weights, BertConfig};
use ragtime::encoder::{Prefixes, SentenceEncoder, TextKind};
use ragtime::model::safetensors::write_safetensors;
use ragtime::retrieval::dense::{DenseOpen, DenseRetriever};
use ragtime::retrieval::index::{build_index, IndexOptions};
use ragtime::retrieval::vectors::{build_dense, DenseKind, DenseOptions, DENSE_DIR, DENSE_MANIFEST};
use ragtime::retrieval::{open_retriever, Retriever, RetrieverKind};

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

#[test]
fn minilm_matches_sentence_transformers() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let Some(weights) = ragtime::testing::require_checkpoint("all-MiniLM-L6-v2/model.safetensors") else { return };
    let model = weights.parent().unwrap().to_path_buf();
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("tests/data/minilm_reference.json")).unwrap()).unwrap();
    let texts: Vec<String> =
        reference["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
    let want: Vec<Vec<f32>> = reference["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect();
    let pieces: Vec<usize> =
        reference["word_pieces"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();

    let enc = SentenceEncoder::load(&model, DeviceKind::Cpu, None).unwrap();
    assert_eq!(
        enc.max_seq_length,
        reference["max_seq_length"].as_u64().unwrap() as usize,
        "max_seq_length from sentence_bert_config.json"
    );
    assert!(enc.normalize, "modules.json has a Normalize module");
    for (t, &n) in texts.iter().zip(&pieces) {
        assert_eq!(
            enc.token_ids(t, TextKind::Plain).unwrap().len(),
            n,
            "word pieces of {:?}",
            t.chars().take(40).collect::<String>()
        );
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // All in one padded batch (the longest is truncated at 256, the others padded to it), then one by one.
    for batch in [texts.len(), 1] {
        let got = enc.encode(&refs, TextKind::Plain, batch).unwrap();
        for ((t, g), w) in texts.iter().zip(&got).zip(&want) {
            let c = cosine(g, w);
            let short: String = t.chars().take(40).collect();
            eprintln!("batch {batch}: cosine {c:.9} for {short:?}");
            assert!(c >= 0.9999, "batch {batch}: cosine {c} for {short:?}");
            let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "normalised: {norm}");
        }
    }
}

const VOCAB: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "chased", "birds",
    "sing", "in", "trees", "fish", "swim", "sea", "who", "what", "is", ".", "?", ",", "##s", "##ing", "query",
    "passage", ":", "bird", "tree", "river", "flows",
];

/// A tiny BERT folder laid out as sentence-transformers saves one: random weights, a WordPiece tokenizer whose
/// tokenizer.json truncates at 5 and pads to 16 (both must be ignored), max_seq_length 12.
fn tiny_folder(dir: &Path, pooling: &str, normalize: bool) -> BertConfig {
    let cfg = BertConfig {
        vocab_size: VOCAB.len(),
        hidden_size: 16,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        intermediate_size: 32,
        max_position_embeddings: 32,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        hidden_act: "gelu".into(),
        pad_token_id: 0,
        position_embedding_type: "absolute".into(),
        model_type: Some("bert".into()),
    };
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    let config = serde_json::json!({
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
        "intermediate_size": cfg.intermediate_size, "max_position_embeddings": cfg.max_position_embeddings,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "pad_token_id": 0,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    write_safetensors(&dir.join("model.safetensors"), &random_bert_weights(&cfg, 5), None).unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> =
        VOCAB.iter().enumerate().map(|(i, w)| (w.to_string(), serde_json::json!(i))).collect();
    let added: Vec<serde_json::Value> = (0..5)
        .map(|i| serde_json::json!({"id": i, "content": VOCAB[i], "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
        .collect();
    let tok = serde_json::json!({
        "version": "1.0",
        "truncation": {"direction": "Right", "max_length": 5, "strategy": "LongestFirst", "stride": 0},
        "padding": {"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": vocab},
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    let mut modules = vec![
        serde_json::json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        serde_json::json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
    ];
    if normalize {
        modules.push(serde_json::json!({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}));
    }
    std::fs::write(dir.join("modules.json"), serde_json::Value::Array(modules).to_string()).unwrap();
    std::fs::write(dir.join("sentence_bert_config.json"), r#"{"max_seq_length": 12, "do_lower_case": false}"#).unwrap();
    let pool = serde_json::json!({
        "word_embedding_dimension": cfg.hidden_size,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": pooling == "max",
        "pooling_mode_mean_sqrt_len_tokens": false,
    });
    std::fs::write(dir.join("1_Pooling/config.json"), pool.to_string()).unwrap();
    cfg
}

fn load_err(dir: &Path) -> String {
    match SentenceEncoder::load(dir, DeviceKind::Cpu, None) {
        Ok(_) => panic!("{} loaded but should not", dir.display()),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn broken_model_folders_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();

    let no_pool = tmp.path().join("no_pool");
    tiny_folder(&no_pool, "mean", true);
    std::fs::remove_file(no_pool.join("1_Pooling/config.json")).unwrap();
    let e = load_err(&no_pool);
    assert!(e.contains("1_Pooling/config.json") && e.contains("missing"), "{e}");

    // config.json and the pooling config say 24 dims, the weights have 16.
    let wrong = tmp.path().join("wrong_hidden");
    tiny_folder(&wrong, "mean", true);
    let c =
        std::fs::read_to_string(wrong.join("config.json")).unwrap().replace("\"hidden_size\":16", "\"hidden_size\":24");
    std::fs::write(wrong.join("config.json"), c).unwrap();
    let p = std::fs::read_to_string(wrong.join("1_Pooling/config.json"))
        .unwrap()
        .replace("\"word_embedding_dimension\":16", "\"word_embedding_dimension\":24");
    std::fs::write(wrong.join("1_Pooling/config.json"), p).unwrap();
    let e = load_err(&wrong);
    assert!(e.contains("model.safetensors") && e.contains("shape"), "{e}");

    // Pooling width disagreeing with the model is caught before the weights are read.
    let mismatch = tmp.path().join("pool_mismatch");
    tiny_folder(&mismatch, "mean", true);
    let p = std::fs::read_to_string(mismatch.join("1_Pooling/config.json"))
        .unwrap()
        .replace("\"word_embedding_dimension\":16", "\"word_embedding_dimension\":8");
    std::fs::write(mismatch.join("1_Pooling/config.json"), p).unwrap();
    let e = load_err(&mismatch);
    assert!(e.contains("1_Pooling/config.json") && e.contains("word_embedding_dimension 8"), "{e}");

    let no_tok = tmp.path().join("no_tokenizer");
    tiny_folder(&no_tok, "mean", true);
    std::fs::remove_file(no_tok.join("tokenizer.json")).unwrap();
    let e = load_err(&no_tok);
    assert!(e.contains("tokenizer.json") && e.contains("missing"), "{e}");

    let no_modules = tmp.path().join("no_modules");
    tiny_folder(&no_modules, "mean", true);
    std::fs::remove_file(no_modules.join("modules.json")).unwrap();
    let e = load_err(&no_modules);
    assert!(e.contains("modules.json"), "{e}");

    let e = load_err(&tmp.path().join("nowhere"));
    assert!(e.contains("nowhere") && e.contains("setup.sh --minilm"), "{e}");
}

#[test]
fn tiny_random_bert_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tiny");
    tiny_folder(&dir, "mean", true);
    let enc = SentenceEncoder::load(&dir, DeviceKind::Cpu, None).unwrap();
    assert_eq!((enc.dim(), enc.max_seq_length, enc.normalize), (16, 12, true));
    // The folder's max_seq_length (12), not tokenizer.json's truncation (5) or padding (16).
    let long = "the cat sat on the mat the dog chased the birds in the trees";
    assert_eq!(enc.token_ids(long, TextKind::Plain).unwrap().len(), 12);
    assert_eq!(enc.token_ids("the cat", TextKind::Plain).unwrap(), vec![2, 5, 6, 3]);

    let texts = ["the cat sat", "birds sing in the trees", long, "a dog", "fish swim in the sea ."];
    let one: Vec<Vec<f32>> = texts.iter().map(|t| enc.encode(&[t], TextKind::Plain, 1).unwrap().remove(0)).collect();
    let batched = enc.encode(&texts, TextKind::Plain, 3).unwrap();
    for ((a, b), t) in one.iter().zip(&batched).zip(texts) {
        assert_eq!(a.len(), 16);
        let n: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-5, "unit length: {n}");
        let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(diff < 1e-5, "padding changed the embedding of {t:?} by {diff}");
    }
    assert!(cosine(&one[0], &one[1]) < 0.9999, "different texts, different embeddings");

    // Prefixes change the query side only when set; e5's "query: " is tokenized with the text.
    let e5 = SentenceEncoder::load(&dir, DeviceKind::Cpu, Prefixes::preset("e5").unwrap()).unwrap();
    assert_eq!(e5.token_ids("the cat", TextKind::Query).unwrap(), vec![2, 28, 30, 5, 6, 3]);
    assert_eq!(e5.token_ids("the cat", TextKind::Passage).unwrap(), vec![2, 29, 30, 5, 6, 3]);
    assert_eq!(
        e5.encode(&["the cat"], TextKind::Plain, 1).unwrap(),
        enc.encode(&["the cat"], TextKind::Plain, 1).unwrap()
    );

    // CLS and max pooling, no Normalize module: CLS differs from mean, vectors are not unit length.
    let cls_dir = tmp.path().join("cls");
    tiny_folder(&cls_dir, "cls", false);
    let cls = SentenceEncoder::load(&cls_dir, DeviceKind::Cpu, None).unwrap();
    let v = cls.encode(&texts, TextKind::Plain, 2).unwrap();
    assert!(v.iter().any(|x| (x.iter().map(|a| a * a).sum::<f32>().sqrt() - 1.0).abs() > 1e-3));
    assert!(cosine(&v[0], &one[0]) < 0.9999);
    let max_dir = tmp.path().join("max");
    tiny_folder(&max_dir, "max", false);
    let mx = SentenceEncoder::load(&max_dir, DeviceKind::Cpu, None).unwrap();
    let a = mx.encode(&texts, TextKind::Plain, 5).unwrap();
    let b = mx.encode(&texts, TextKind::Plain, 1).unwrap();
    assert!(
        a.iter().flatten().zip(b.iter().flatten()).all(|(x, y)| (x - y).abs() < 1e-5),
        "max pooling ignores padding"
    );
}

const CORPUS: &str =
    "id\ttext\ttitle\n1\tthe cat sat on the mat\tCat\n2\ta dog chased the cat\tDog\n3\tbirds sing in the trees\tBird\n\
4\tfish swim in the sea\tFish\n5\tthe river flows\tRiver\n";

#[test]
fn dense_index_and_retrievers_on_a_tiny_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    tiny_folder(&model, "mean", true);
    let corpus = tmp.path().join("c.tsv");
    std::fs::write(&corpus, CORPUS).unwrap();
    let out = tmp.path().join("idx");
    build_index(&corpus, &out, &IndexOptions { threads: 1, memory_bytes: 50 << 20, ..IndexOptions::default() })
        .unwrap();
    let enc = SentenceEncoder::load(&model, DeviceKind::Cpu, None).unwrap();
    let opts = DenseOptions {
        corpus: CorpusOptions { format: None, passage_words: 100, on_bad: OnBadLine::Stop },
        kind: DenseKind::Hnsw,
        chunk_rows: 2,
        batch: 2,
        recall_sample: 20,
        ..DenseOptions::default()
    };
    let m = build_dense(&corpus, &out, &enc, &opts).unwrap();
    assert_eq!((m.passages, m.chunks, m.dim), (5, 3, 16));
    let r = m.hnsw_recall_at_10.unwrap();
    assert!(r > 0.99, "5 vectors: HNSW finds them all, recall {r}");
    let first = std::fs::read(out.join(DENSE_DIR).join("chunks/000000.bin")).unwrap();

    // Interrupted after two chunks: the re-run keeps them and writes the third.
    let dense_dir = out.join(DENSE_DIR);
    std::fs::remove_file(dense_dir.join(DENSE_MANIFEST)).unwrap();
    std::fs::remove_file(dense_dir.join("chunks/000002.bin")).unwrap();
    let t0 = std::fs::metadata(dense_dir.join("chunks/000000.bin")).unwrap().modified().unwrap();
    let m2 = build_dense(&corpus, &out, &enc, &opts).unwrap();
    assert_eq!(m2.passages, 5);
    assert_eq!(std::fs::metadata(dense_dir.join("chunks/000000.bin")).unwrap().modified().unwrap(), t0, "chunk 0 kept");
    assert_eq!(std::fs::read(dense_dir.join("chunks/000000.bin")).unwrap(), first);
    assert!(build_dense(&corpus, &out, &enc, &opts).unwrap_err().to_string().contains("already there"));
    // Every chunk complete (the last one short) but no manifest: nothing is embedded again, the graph is rebuilt.
    std::fs::remove_file(dense_dir.join(DENSE_MANIFEST)).unwrap();
    let m3 = build_dense(&corpus, &out, &enc, &opts).unwrap();
    assert_eq!((m3.passages, m3.chunks), (5, 3));
    assert_eq!(
        std::fs::metadata(dense_dir.join("chunks/000002.bin")).unwrap().len(),
        16 * 4,
        "one f32 vector in the last chunk"
    );

    for kind in [DenseKind::Flat, DenseKind::Hnsw] {
        let dense = DenseRetriever::open(&out, &DenseOpen { kind: Some(kind), ..DenseOpen::default() }).unwrap();
        // A query equal to a passage's embedded text ("title\ntext") finds it first, at cosine 1.
        let hits = dense.search("Fish\nfish swim in the sea", 3).unwrap();
        assert_eq!(hits.len(), 3);
        assert_eq!(
            (hits[0].id.as_str(), hits[0].title.as_str(), hits[0].text.as_str()),
            ("4", "Fish", "fish swim in the sea")
        );
        assert!((hits[0].score - 1.0).abs() < 1e-4, "{kind:?}: {hits:?}");
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
        let batch = dense
            .search_batch(&["Fish\nfish swim in the sea".to_string(), "Cat\nthe cat sat on the mat".to_string()], 1)
            .unwrap();
        assert_eq!((batch[0][0].id.as_str(), batch[1][0].id.as_str()), ("4", "1"));
    }

    let no = ragtime::retrieval::dense::DenseOpen::default();
    let hybrid = open_retriever(RetrieverKind::Hybrid, &out, &no, 100).unwrap();
    let bm25 = open_retriever(RetrieverKind::Bm25, &out, &no, 100).unwrap();
    let dense = open_retriever(RetrieverKind::Dense, &out, &no, 100).unwrap();
    let q = "Fish\nfish swim in the sea";
    let h = hybrid.search(q, 5).unwrap();
    // Passage 4 is first in both rankings: 2 / 61.
    assert_eq!(h[0].id, "4");
    assert!((h[0].score - 2.0 / 61.0).abs() < 1e-6, "{h:?}");
    assert_eq!(h[0].text, "fish swim in the sea");
    // Every fused score is the RRF sum over the two rankings.
    let (b, d) = (bm25.search(q, 100).unwrap(), dense.search(q, 100).unwrap());
    for p in &h {
        let rr = |list: &[ragtime::retrieval::Passage]| {
            list.iter().position(|x| x.id == p.id).map(|i| 1.0 / (61.0 + i as f32)).unwrap_or(0.0)
        };
        assert!((p.score - rr(&b) - rr(&d)).abs() < 1e-6, "{p:?}");
    }
    // An index without the dense part: a clear error naming what to run.
    let bare = tmp.path().join("bare");
    build_index(&corpus, &bare, &IndexOptions { threads: 1, memory_bytes: 50 << 20, ..IndexOptions::default() })
        .unwrap();
    let e = match open_retriever(RetrieverKind::Dense, &bare, &no, 100) {
        Ok(_) => panic!("opened a dense retriever without a dense index"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("dense.json") && e.contains("--encoder"), "{e}");
}

/// A dense index built in shards (`--shard i/n`: each shard embeds the passages whose id hashes to it) and merged
/// (chunks copied, the HNSW graph built over all) answers as the index built in one go: the same passages at the
/// same scores, by exact and by HNSW search.
#[test]
fn sharded_dense_index_merges_into_the_index_of_one_build() {
    use ragtime::retrieval::index::merge_indexes;
    use ragtime::retrieval::vectors::merge_dense;
    use ragtime::shard::Shard;
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    tiny_folder(&model, "mean", true);
    let words = ["cat", "dog", "bird", "fish", "river", "tree", "sea", "mat", "sing", "flows"];
    let mut text = String::from("id\ttext\ttitle\n");
    for i in 0..60usize {
        let (a, b, c) = (words[i % 10], words[(i / 10) % 10], words[(i * 3 + 1) % 10]);
        text.push_str(&format!("{i}\tthe {a} and the {b} by the {c}\t{c}\n"));
    }
    let corpus = tmp.path().join("c.tsv");
    std::fs::write(&corpus, text).unwrap();
    let enc = SentenceEncoder::load(&model, DeviceKind::Cpu, None).unwrap();
    let iopts = IndexOptions { threads: 1, memory_bytes: 50 << 20, ..IndexOptions::default() };
    let dopts =
        DenseOptions { kind: DenseKind::Hnsw, chunk_rows: 8, batch: 4, recall_sample: 20, ..DenseOptions::default() };
    let whole = tmp.path().join("whole");
    build_index(&corpus, &whole, &iopts).unwrap();
    build_dense(&corpus, &whole, &enc, &dopts).unwrap();
    let parts: Vec<PathBuf> = (0..3)
        .map(|i| {
            let shard = Some(Shard { index: i, count: 3 });
            let part = tmp.path().join(format!("part{i}"));
            build_index(&corpus, &part, &IndexOptions { shard, ..iopts.clone() }).unwrap();
            let d = build_dense(&corpus, &part, &enc, &DenseOptions { shard, ..dopts.clone() }).unwrap();
            assert!(d.passages > 5 && d.passages < 40, "shard {i}: {} passages", d.passages);
            part
        })
        .collect();
    let merged = tmp.path().join("merged");
    assert_eq!(merge_indexes(&parts, &merged).unwrap().passages, 60);
    let m = merge_dense(&parts, &merged, 20, false).unwrap();
    assert_eq!(m.passages, 60);
    assert!(m.hnsw_recall_at_10.unwrap() > 0.95, "{:?}", m.hnsw_recall_at_10);
    for kind in [DenseKind::Flat, DenseKind::Hnsw] {
        let open = |d: &Path| DenseRetriever::open(d, &DenseOpen { kind: Some(kind), ..DenseOpen::default() }).unwrap();
        let (a, b) = (open(&whole), open(&merged));
        for q in ["the cat and the dog", "fish in the sea", "river flows by the tree"] {
            let hits = |r: &DenseRetriever| {
                let mut h: Vec<(String, String)> =
                    r.search(q, 60).unwrap().into_iter().map(|p| (format!("{:.5}", p.score), p.id)).collect();
                h.sort();
                h
            };
            assert_eq!(hits(&a), hits(&b), "{kind:?} {q}");
        }
    }
}

/// `ragtime embed` through the binary: a partial output torn by a kill is cut after its complete lines and the
/// rerun writes the rest (the vectors of one uninterrupted run); a partial output another process is appending to
/// is refused and left as it is.
#[test]
fn embed_resumes_a_torn_partial_file_and_refuses_a_second_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    tiny_folder(&model, "mean", true);
    let input = tmp.path().join("in.jsonl");
    let texts = ["cats purr", "dogs bark at the mail carrier", "fish swim", "birds sing at dawn", "owls hunt"];
    let lines: String =
        texts.iter().enumerate().map(|(i, t)| format!("{{\"id\": {i}, \"text\": \"{t}\"}}\n")).collect();
    std::fs::write(&input, lines).unwrap();
    let embed = |out: &Path| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ragtime"))
            .args(["embed", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(), "--quiet"])
            .args(["--out", out.to_str().unwrap()])
            .output()
            .unwrap();
        (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let vectors = |p: &Path| -> Vec<(i64, Vec<f64>)> {
        let text = std::fs::read_to_string(p).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| {
                let e = v["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
                (v["id"].as_i64().unwrap(), e)
            })
            .collect()
    };
    let whole = tmp.path().join("whole.jsonl");
    let (code, err) = embed(&whole);
    assert_eq!(code, 0, "{err}");
    let want = vectors(&whole);
    assert_eq!(want.len(), 5);

    // killed after two lines and part of the third
    let out = tmp.path().join("resumed.jsonl");
    let partial = tmp.path().join("resumed.jsonl.partial");
    let text = std::fs::read_to_string(&whole).unwrap();
    let cut: usize = text.split_inclusive('\n').take(2).map(str::len).sum();
    std::fs::write(&partial, &text[..cut + 20]).unwrap();
    let (code, err) = embed(&out);
    assert_eq!(code, 0, "{err}");
    let got = vectors(&out);
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [0, 1, 2, 3, 4], "each line once, in input order");
    for ((_, g), (_, w)) in got.iter().zip(&want) {
        let diff = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(diff < 1e-5, "resumed vector differs by {diff}");
    }
    assert!(!ragtime::io::exists(&partial).unwrap());

    // another process appending to the partial file
    let out = tmp.path().join("busy.jsonl");
    let partial = tmp.path().join("busy.jsonl.partial");
    std::fs::write(&partial, &text[..cut]).unwrap();
    let held = std::fs::OpenOptions::new().append(true).open(&partial).unwrap();
    held.try_lock().unwrap();
    let (code, err) = embed(&out);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("error: --out: {}: another ragtime process is writing there", partial.display())),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&partial).unwrap(), &text[..cut], "the refused run changed the partial file");
    assert!(!ragtime::io::exists(&out).unwrap());
}
