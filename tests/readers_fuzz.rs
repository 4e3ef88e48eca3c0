//! Property tests for every reader of on-disk input: GGUF and safetensors models, tokenizer.json, corpora (DPR
//! TSV, JSON lines, WikiExtractor dumps, bzip2-compressed or not), every QA dataset layout, method configs and
//! `--set` overrides, the hallucination label store (manifest and Parquet shards), detector checkpoints, eval run
//! directories, the Auto-RAG dialogue store, SFT tensor files, GloVe `.npy` vectors and BM25 index manifests.
//!
//! Each reader gets a small valid file (or directory) and mutated copies of it: bit flips, bytes set to
//! arbitrary or boundary values (0, 2^31, 2^32 - 1, 2^64 - 1 written over 1 to 8 bytes, as length fields are
//! stored), numbers in text replaced by huge, negative or non-numeric ones, random insertions and deletions, and
//! truncation at a random point; some readers also get arbitrary bytes. The reader must answer `Ok` (when the
//! mutation left the file valid) or `Err`: never panic, abort or hang. Binary headers (GGUF, safetensors) are
//! mutated mostly inside the header, where the lengths and offsets are. Memory must stay bounded: the whole
//! test binary runs under an address-space limit ([`limit_memory`]), so a reader that allocates from a mutated
//! length field aborts the test instead of quietly taking gigabytes.
//!
//! Inputs are small and the case counts low, so the file runs in a few seconds in release mode.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Once, OnceLock};

use proptest::prelude::*;
use proptest::sample::Index;

use ragtime::corpus::passages::{for_each_passage, CorpusFormat, CorpusOptions, OnBadLine};
use ragtime::model::safetensors::{write_safetensors, SafetensorsDir};
use ragtime::model::weights::WeightSource;
use ragtime::model::{random_weights, Arch, ModelConfig, Tokenizer};

// ---------------------------------------------------------------------------------------------------------------
// Mutations

/// Boundary values for binary length and offset fields.
const INTERESTING: &[u64] = &[
    0,
    1,
    0x7f,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 32,
    1 << 40,
    1 << 62,
    i64::MAX as u64,
    u64::MAX,
];

/// Replacements for a number in a text file.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "2",
    "4294967296",
    "18446744073709551615",
    "99999999999999999999999999",
    "1e308",
    "1e400",
    "-1e-400",
    "0.5",
    "nan",
    "\"x\"",
    "null",
    "[]",
    "{}",
    "true",
];

#[derive(Debug, Clone)]
enum Mutation {
    /// Flip one bit.
    Flip(Index, u8),
    /// Set one byte.
    Set(Index, u8),
    /// Write a boundary value, little-endian, over 1, 2, 4 or 8 bytes.
    Boundary(Index, usize, u8),
    /// Replace the first run of ASCII digits at or after the position by another token.
    Number(Index, usize),
    Insert(Index, Vec<u8>),
    Delete(Index, u8),
    Truncate(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        3 => (any::<Index>(), 0..INTERESTING.len(), prop::sample::select(vec![1u8, 2, 4, 8]))
            .prop_map(|(i, v, w)| Mutation::Boundary(i, v, w)),
        3 => (any::<Index>(), 0..NUMBERS.len()).prop_map(|(i, n)| Mutation::Number(i, n)),
        2 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), 1u8..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
}

/// One to four mutations, and whether they stay inside the leading `window` bytes (a binary header).
fn mutations() -> impl Strategy<Value = (Vec<Mutation>, bool)> {
    (prop::collection::vec(mutation(), 1..=4), prop::bool::weighted(0.75))
}

/// `seed` with `muts` applied in order; positions fall in the first `window` bytes (the whole file when 0).
fn mutate(seed: &[u8], muts: &[Mutation], window: usize) -> Vec<u8> {
    let mut b = seed.to_vec();
    for m in muts {
        let span = if window == 0 { b.len() } else { window.min(b.len()) };
        let at = |i: &Index| if span == 0 { 0 } else { i.index(span) };
        match m {
            Mutation::Flip(i, bit) if !b.is_empty() => {
                let p = at(i);
                b[p] ^= 1 << bit;
            }
            Mutation::Set(i, v) if !b.is_empty() => {
                let p = at(i);
                b[p] = *v;
            }
            Mutation::Boundary(i, v, w) if !b.is_empty() => {
                let p = at(i);
                for (k, byte) in INTERESTING[*v].to_le_bytes().iter().take(*w as usize).enumerate() {
                    if let Some(x) = b.get_mut(p + k) {
                        *x = *byte;
                    }
                }
            }
            Mutation::Number(i, n) => {
                let from = at(i);
                if let Some(s) = b[from..].iter().position(u8::is_ascii_digit).map(|s| s + from) {
                    let e = b[s..].iter().position(|c| !c.is_ascii_digit()).map_or(b.len(), |e| e + s);
                    b.splice(s..e, NUMBERS[*n].bytes());
                }
            }
            Mutation::Insert(i, bytes) => {
                let p = at(i);
                b.splice(p..p, bytes.iter().copied());
            }
            Mutation::Delete(i, n) if !b.is_empty() => {
                let p = at(i);
                let e = (p + *n as usize).min(b.len());
                b.drain(p..e);
            }
            Mutation::Truncate(i) => {
                let p = at(i);
                b.truncate(p);
            }
            _ => {}
        }
    }
    b
}

// ---------------------------------------------------------------------------------------------------------------
// Harness

/// Caps the address space of the test process at 6 GiB (the readers' inputs are a few kilobytes to a few
/// megabytes): a reader that allocates gigabytes from a mutated length fails the test with an allocation error
/// instead of passing on a machine with enough memory.
fn limit_memory() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let cap: libc::rlim_t = 6 << 30;
        let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: plain system calls on a local struct.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_AS, &mut cur) == 0
                && (cur.rlim_cur == libc::RLIM_INFINITY || cur.rlim_cur > cap)
            {
                let new = libc::rlimit { rlim_cur: cap, rlim_max: cur.rlim_max };
                libc::setrlimit(libc::RLIMIT_AS, &new);
            }
        }
    });
}

/// `cases` cases (or `PROPTEST_CASES`), no failure files written into the source tree.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// Writes `files` under `dir`, the one named `target` mutated.
fn restore(dir: &Path, files: &[(PathBuf, Vec<u8>)], target: &Path, muts: &[Mutation], window: usize) {
    for (rel, bytes) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        if rel == target {
            std::fs::write(&p, mutate(bytes, muts, window)).unwrap();
        } else {
            std::fs::write(&p, bytes).unwrap();
        }
    }
}

/// The files of `files` whose names satisfy `pick`, for choosing which one to mutate.
fn targets(files: &[(PathBuf, Vec<u8>)], pick: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let t: Vec<PathBuf> = files.iter().map(|f| f.0.clone()).filter(|p| pick(&p.to_string_lossy())).collect();
    assert!(!t.is_empty(), "no file to mutate");
    t
}

// ---------------------------------------------------------------------------------------------------------------
// GGUF

/// A tiny GGUF (vocabulary 256, with a `general.alignment` entry so that it can be mutated too) and the length
/// of its header (metadata and tensor infos).
fn gguf_seed() -> &'static (Vec<u8>, usize) {
    static SEED: OnceLock<(Vec<u8>, usize)> = OnceLock::new();
    SEED.get_or_init(|| {
        use candle_core::quantized::gguf_file::{Content, Value};
        let dir = tempfile::tempdir().unwrap();
        let path = common::write_tiny_gguf_with(Arch::Llama, 256, &[("general.alignment", Value::U32(32))], dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let header = Content::read(&mut std::io::Cursor::new(&bytes)).unwrap().tensor_data_offset as usize;
        (bytes, header)
    })
}

fn read_gguf(path: &Path) {
    let Ok(g) = ragtime::model::gguf::GgufFile::open(path) else { return };
    let _ = Tokenizer::from_gguf(&g);
    let cfg = g.config().clone();
    for name in ["model.embed_tokens.weight", "model.norm.weight", "model.layers.0.self_attn.q_proj.weight"] {
        let _ = g.tensor(name);
        let _ = g.quantized(name);
    }
    for l in 0..cfg.num_layers.min(2) {
        let _ = g.tensor(&format!("model.layers.{l}.mlp.down_proj.weight"));
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn gguf_mutated((muts, in_header) in mutations()) {
        limit_memory();
        let (seed, header) = gguf_seed();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, mutate(seed, &muts, if in_header { *header } else { 0 })).unwrap();
        read_gguf(&path);
    }

    #[test]
    fn gguf_arbitrary_after_magic(version in 1u32..4, body in prop::collection::vec(any::<u8>(), 0..256)) {
        limit_memory();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let mut bytes = b"GGUF".to_vec();
        bytes.extend(version.to_le_bytes());
        bytes.extend(body);
        std::fs::write(&path, bytes).unwrap();
        read_gguf(&path);
    }
}

/// A `general.alignment` of 0 made candle's GGUF reader divide by zero.
#[test]
fn gguf_zero_alignment_is_an_error() {
    use candle_core::quantized::gguf_file::Value;
    limit_memory();
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_tiny_gguf_with(Arch::Llama, 256, &[("general.alignment", Value::U32(0))], dir.path());
    let e = format!("{:#}", ragtime::model::gguf::GgufFile::open(&path).err().expect("alignment 0 refused"));
    assert!(e.contains("m.gguf") || e.contains(".gguf"), "{e}");
}

/// Every field of the GGUF header zeroed in turn (8 zero bytes at each offset): a Q/K tensor of no rows reached
/// the quantized reader's row permutation, which divided by its row count.
#[test]
fn gguf_header_zeroed_at_every_offset() {
    limit_memory();
    let (seed, header) = gguf_seed();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    for p in 0..*header {
        let mut b = seed.clone();
        b[p..(p + 8).min(*header)].fill(0);
        std::fs::write(&path, b).unwrap();
        read_gguf(&path);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Hugging Face model folder

fn safetensors_seed() -> &'static Vec<(PathBuf, Vec<u8>)> {
    static SEED: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    SEED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ModelConfig::tiny(Arch::Qwen2, 64);
        std::fs::write(
            dir.path().join("config.json"),
            serde_json::to_string_pretty(&cfg.to_hf_config().unwrap()).unwrap(),
        )
        .unwrap();
        write_safetensors(&dir.path().join("model.safetensors"), &random_weights(&cfg, 3), None).unwrap();
        common::snapshot(dir.path())
    })
}

/// Length of a safetensors file's header (the 8-byte length and the JSON).
fn safetensors_header(bytes: &[u8]) -> usize {
    8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn safetensors_folder_mutated(which in any::<Index>(), (muts, in_header) in mutations()) {
        limit_memory();
        let files = safetensors_seed();
        let t = targets(files, |_| true);
        let target = &t[which.index(t.len())];
        let seed = &files.iter().find(|f| &f.0 == target).unwrap().1;
        let window = if in_header && target.ends_with("model.safetensors") { safetensors_header(seed) } else { 0 };
        let dir = tempfile::tempdir().unwrap();
        restore(dir.path(), files, target, &muts, window);
        if let Ok(st) = SafetensorsDir::open(dir.path()) {
            let _ = st.config().validate("config.json", |k| k.to_string());
            for (name, _) in random_weights(&ModelConfig::tiny(Arch::Qwen2, 64), 3) {
                let _ = st.tensor(&name);
            }
        }
        let _ = ragtime::sft::export::read_tensors(&dir.path().join("model.safetensors"));
    }

    #[test]
    fn safetensors_arbitrary(body in prop::collection::vec(any::<u8>(), 0..256), len in any::<u64>()) {
        limit_memory();
        let dir = tempfile::tempdir().unwrap();
        let cfg = ModelConfig::tiny(Arch::Qwen2, 64);
        std::fs::write(dir.path().join("config.json"), cfg.to_hf_config().unwrap().to_string()).unwrap();
        let mut bytes = (len % 512).to_le_bytes().to_vec();
        bytes.extend(body);
        std::fs::write(dir.path().join("model.safetensors"), &bytes).unwrap();
        if let Ok(st) = SafetensorsDir::open(dir.path()) {
            let _ = st.tensor("model.norm.weight");
        }
        let _ = ragtime::sft::export::read_tensors(&dir.path().join("model.safetensors"));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// tokenizer.json

fn tokenizer_seed() -> Option<&'static Vec<u8>> {
    static SEED: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    SEED.get_or_init(|| {
        ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json").map(|p| std::fs::read(p).unwrap())
    })
    .as_ref()
}

proptest! {
    // A 2 MB file: few cases.
    #![proptest_config(config(24))]

    #[test]
    fn tokenizer_json_mutated((muts, _) in mutations()) {
        limit_memory();
        let Some(seed) = tokenizer_seed() else { return Ok(()) };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, mutate(seed, &muts, 0)).unwrap();
        if let Ok(t) = Tokenizer::from_file(&path) {
            if let Ok(ids) = t.encode("Hello world, 123 ünïcode", true) {
                let _ = t.decode(&ids);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Corpora

const CORPORA: &[(&str, &str)] = &[
    ("psgs.tsv", "id\ttext\ttitle\n1\tthe cat sat on the mat\tCat\n2\ta dog \"chased\" the cat\tDog\n3\tbirds\tBird\n"),
    (
        "docs.jsonl",
        "{\"id\":\"1\",\"title\":\"Ada\",\"text\":\"Ada\\n\\none two three four\"}\n\
         {\"id\":\"2\",\"url\":\"u\",\"title\":\"Bob\",\"text\":\"five six\"}\n\
         {\"id\":\"3\",\"contents\":\"Cy\\nseven eight nine\"}\n",
    ),
    (
        "wiki_00",
        "<doc id=\"1\" url=\"u\" title=\"Ada &amp; Co\">\nAda\n\none two &lt;three&gt;\n</doc>\n\
         <doc id=\"2\" url=\"u\" title=\"Bob\">\nBob\n\nfour five\n</doc>\n",
    ),
];

fn bz2(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn read_corpus(path: &Path) {
    let formats = [None, Some(CorpusFormat::Dpr), Some(CorpusFormat::Jsonl), Some(CorpusFormat::Wikidoc)];
    for format in formats {
        for on_bad in [OnBadLine::Stop, OnBadLine::Skip] {
            let mut skipped = 0;
            let mut n = 0;
            let _ = for_each_passage(path, CorpusOptions { format, passage_words: 3, on_bad }, &mut skipped, |_| {
                n += 1;
                Ok(n < 10_000)
            });
        }
    }
    let _ = ragtime::corpus::wikiextractor::read_dump(path);
}

proptest! {
    #![proptest_config(config(384))]

    #[test]
    fn corpus_mutated(which in 0..CORPORA.len(), compress in any::<bool>(), (muts, _) in mutations()) {
        limit_memory();
        let (name, text) = CORPORA[which];
        let dir = tempfile::tempdir().unwrap();
        // compressed: the bzip2 stream is mutated
        let (name, bytes) = if compress {
            (format!("{name}.bz2"), mutate(&bz2(text.as_bytes()), &muts, 0))
        } else {
            (name.to_string(), mutate(text.as_bytes(), &muts, 0))
        };
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        read_corpus(&path);
        read_corpus(dir.path());
    }

    #[test]
    fn corpus_arbitrary(bytes in prop::collection::vec(any::<u8>(), 0..512), compress in any::<bool>()) {
        limit_memory();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(if compress { "c.bz2" } else { "c.txt" });
        std::fs::write(&path, &bytes).unwrap();
        read_corpus(&path);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// QA datasets

use ragtime::qa::Layout;

/// Small files of every layout: the first records of the shared datasets (where present) and hand-made ones.
fn qa_seeds() -> &'static Vec<(String, Vec<u8>, Layout)> {
    static SEED: OnceLock<Vec<(String, Vec<u8>, Layout)>> = OnceLock::new();
    SEED.get_or_init(|| {
        use serde_json::Value;
        let mut out: Vec<(String, Vec<u8>, Layout)> = vec![
            (
                "iirc.json".into(),
                br#"[{"title":"W","text":"Scott was born in Cooksville.","links":[],"questions":[
                {"qid":"q1","question":"When?","answer":{"type":"span","answer_spans":[{"text":" 1882 ","passage":"c","type":"answer","start":10,"end":14}]},
                 "context":[{"passage":"main","text":"Scott was born","indices":[0,14]}]},
                {"qid":"q2","question":"Did he?","answer":{"type":"binary","answer_value":"yes"},"context":[]},
                {"qid":"q3","question":"How many?","answer":{"type":"value","answer_value":"847","answer_unit":"c"},"context":[]},
                {"qid":"q4","question":"None?","answer":{"type":"none"},"context":[]}]}]"#
                    .to_vec(),
                Layout::Iirc,
            ),
            (
                "strategyqa.json".into(),
                br#"[{"qid":"abc","term":"H","description":"d","question":"Do hamsters?","answer":true,"facts":["f"],"decomposition":["d"]},
                {"qid":"def","question":"q2","answer":false,"facts":[],"decomposition":[]}]"#
                    .to_vec(),
                Layout::StrategyqaOriginal,
            ),
            (
                "2wiki.json".into(),
                br#"[{"_id":"x1","question":"q?","answer":"B","type":"comparison",
                "context":[["A",["a1.","a2."]],["B",["b1."]]],"supporting_facts":[["A",0],["A",1],["B",0]]},
                {"test_id":1,"question":"q","answer":["a","b"]}]"#
                    .to_vec(),
                Layout::TwoWiki,
            ),
            (
                "popQA.tsv".into(),
                b"id\tsubj\tprop\ts_wiki_title\tquestion\tpossible_answers\n\
                  42\tG\toccupation\tG\tWhat is G's occupation?\t\"[\"\"politician\"\", \"\"leader\"\"]\"\n\
                  7\tX\tcapital\tX\tWhat is the capital of X?\t[\"Y\"]\n"
                    .to_vec(),
                Layout::Popqa,
            ),
            (
                "popqa.csv".into(),
                b"question,answers,s_wiki_title\r\n\"Who wrote \"\"X\"\", the book?\",\"[\"\"A, B\"\"]\",X\r\n".to_vec(),
                Layout::Popqa,
            ),
            (
                "popqa.jsonl".into(),
                b"{\"question\":\"q\",\"possible_answers\":\"[\\\"a\\\"]\",\"s_wiki_title\":\"T\"}\n\
                  {\"question\":\"q2\",\"answers\":[\"b\"],\"s_wiki_title\":\"T\"}\n"
                    .to_vec(),
                Layout::Popqa,
            ),
            (
                "musique_full_v1.0_dev.jsonl".into(),
                br#"{"id":"2hop__1_2","paragraphs":[{"idx":0,"title":"A","paragraph_text":"a.","is_supporting":false},{"idx":1,"title":"B","paragraph_text":"b.","is_supporting":true}],"question":"q?","question_decomposition":[],"answer":"x","answer_aliases":["X"],"answerable":true}
{"id":"2hop__1_2","paragraphs":[],"question":"q?","answer":"x","answer_aliases":[],"answerable":false}
"#
                .to_vec(),
                Layout::Musique,
            ),
            (
                "pubmedqa.json".into(),
                br#"{"2": {"QUESTION": "q", "CONTEXTS": ["c"], "final_decision": "yes"}, "1": {"QUESTION": "q", "final_decision": "maybe"}}"#
                    .to_vec(),
                Layout::Pubmedqa,
            ),
        ];
        let lines = |rel: &str, n: usize| -> Option<Vec<u8>> {
            let text = std::fs::read_to_string(ragtime::testing::require(rel)?).unwrap();
            Some(text.lines().take(n).flat_map(|l| format!("{l}\n").into_bytes()).collect())
        };
        let json = |rel: &str| -> Option<Value> {
            Some(serde_json::from_str(&std::fs::read_to_string(ragtime::testing::require(rel)?).unwrap()).unwrap())
        };
        let first = |v: Value, n: usize| -> Value {
            match v {
                Value::Array(a) => Value::Array(a.into_iter().take(n).collect()),
                Value::Object(o) => Value::Object(o.into_iter().take(n).collect()),
                other => other,
            }
        };
        for (rel, name, n, layout) in [
            ("qa/hotpotqa/ircot_dev_250.jsonl", "ircot.jsonl", 2, Layout::HotpotqaIrcot),
            ("qa/nq/NQ-open.dev.jsonl", "nq.jsonl", 3, Layout::NqOpen),
            ("qa/triviaqa/triviaqa_test_1000.jsonl", "triviaqa.jsonl", 2, Layout::Triviaqa),
        ] {
            if let Some(b) = lines(rel, n) {
                out.push((name.into(), b, layout));
            }
        }
        for (rel, name, layout) in [
            ("qa/hotpotqa/hotpot_dev_simplified.json", "hotpot.json", Layout::HotpotqaSimple),
            ("qa/2wikimultihopqa/dev_100.json", "2wiki_dev.json", Layout::TwoWiki),
            ("qa/pubmedqa/pqal_dev_500.json", "pqal.json", Layout::Pubmedqa),
        ] {
            if let Some(v) = json(rel) {
                out.push((name.into(), first(v, 3).to_string().into_bytes(), layout));
            }
        }
        if let Some(mut v) = json("qa/strategyqa/bigbench_task.json") {
            v["examples"] = first(v["examples"].take(), 3);
            out.push(("bigbench.json".into(), v.to_string().into_bytes(), Layout::StrategyqaBigbench));
        }
        if let Some(mut v) = json("qa/bioasq/Task7BGoldenEnriched/7B1_golden.json") {
            let qs: Vec<Value> = ["factoid", "yesno", "list"]
                .iter()
                .flat_map(|k| v["questions"].as_array().unwrap().iter().filter(|q| q["type"] == *k).take(2).cloned())
                .collect();
            v["questions"] = Value::Array(qs);
            out.push(("bioasq.json".into(), v.to_string().into_bytes(), Layout::Bioasq));
        }
        out
    })
}

proptest! {
    #![proptest_config(config(384))]

    #[test]
    fn qa_dataset_mutated(which in any::<Index>(), (muts, _) in mutations()) {
        limit_memory();
        let seeds = qa_seeds();
        let (name, bytes, layout) = &seeds[which.index(seeds.len())];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, mutate(bytes, &muts, 0)).unwrap();
        let _ = ragtime::qa::load(&path, Some(*layout));
        let _ = ragtime::qa::load(&path, None);
        if *layout == Layout::Bioasq {
            let _ = ragtime::qa::load(dir.path(), None);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Method configs

fn method_configs() -> &'static Vec<(String, Vec<String>)> {
    static SEED: OnceLock<Vec<(String, Vec<String>)>> = OnceLock::new();
    SEED.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let text = std::fs::read_to_string(&p).unwrap();
                let v: toml::Table = toml::from_str(&text).unwrap();
                let sections = v.keys().filter(|k| *k != "datasets").cloned().collect();
                out.push((text, sections));
            }
        }
        out.sort();
        assert!(!out.is_empty());
        out
    })
}

/// A `--set` string: mostly `section.key=value` shapes, sometimes anything.
fn set_string() -> impl Strategy<Value = String> {
    prop_oneof![
        ("[a-z_]{0,8}(\\.[a-z_]{0,6}){0,3}", "=?", "[ -~]{0,12}").prop_map(|(k, eq, v)| format!("{k}{eq}{v}")),
        (
            prop::sample::select(vec!["trigger", "query", "retrieval", "generation", "train", "lora", "datasets"]),
            "[a-z_]{1,10}",
            prop::sample::select(NUMBERS.to_vec()),
        )
            .prop_map(|(s, k, v)| format!("{s}.{k}={v}")),
        "\\PC{0,24}",
    ]
}

proptest! {
    #![proptest_config(config(384))]

    #[test]
    fn method_config_mutated(
        which in any::<Index>(),
        (muts, _) in mutations(),
        sets in prop::collection::vec(set_string(), 0..3),
        dataset in prop::sample::select(vec![None, Some("hotpotqa"), Some("2wikimultihopqa"), Some("nope")]),
    ) {
        limit_memory();
        let seeds = method_configs();
        let (text, sections) = &seeds[which.index(seeds.len())];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        std::fs::write(&path, mutate(text.as_bytes(), &muts, 0)).unwrap();
        let sections: Vec<&str> = sections.iter().map(String::as_str).collect();
        let none: Vec<String> = Vec::new();
        for overrides in [&sets, &none] {
            if let Ok(mut c) = ragtime::config::MethodConfig::load(&path, dataset, overrides, &sections) {
                let _ = c.section::<ragtime::config::RetrievalTable>("retrieval");
                let _ = c.section::<ragtime::config::GenerationTable>("generation");
                let _ = c.section::<ragtime::sft::config::SftConfig>("train");
                let _ = c.section::<toml::Table>("trigger");
                let _ = c.table_mut("query");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Hallucination label store

fn hallu_seed() -> &'static Vec<(PathBuf, Vec<u8>)> {
    static SEED: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    SEED.get_or_init(|| {
        use ragtime::labels::{HalluExample, HalluStore};
        let dir = tempfile::tempdir().unwrap();
        let mut s = HalluStore::open(dir.path(), "m", 4).unwrap().with_flush_every(2);
        for a in 0..4usize {
            let id = format!("a{a}");
            let ex = (0..a % 3)
                .map(|k| {
                    let v = |o: f32| (0..4).map(|j| o + j as f32 + k as f32).collect::<Vec<f32>>();
                    HalluExample {
                        article_id: id.clone(),
                        title: format!("Title {a}"),
                        template: "Continue: {text}".into(),
                        trunc_offset: 10 * k as u32,
                        entity_label: "PERSON".into(),
                        original_entity: "Alice".into(),
                        generated_entity: if k == 0 { "Alice".into() } else { "Bob".into() },
                        continuation: format!("continuation {k} ünï"),
                        label: (k % 2) as u8,
                        rule: "exact".into(),
                        entropy_last: 0.5,
                        entropy_entity_mean: 1.5,
                        hidden_final_last: v(0.0),
                        hidden_mean_last: v(10.0),
                        hidden_final_entity: v(20.0),
                        hidden_mean_entity: v(30.0),
                    }
                })
                .collect();
            s.add_article(&id, ex).unwrap();
        }
        s.finish().unwrap();
        common::snapshot(dir.path())
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn hallu_store_mutated(which in any::<Index>(), (muts, at_end) in mutations()) {
        limit_memory();
        let files = hallu_seed();
        let t = targets(files, |n| n.ends_with("_manifest.json") || n.ends_with(".parquet"));
        let target = &t[which.index(t.len())];
        let dir = tempfile::tempdir().unwrap();
        let seed = &files.iter().find(|f| &f.0 == target).unwrap().1;
        // Parquet keeps its metadata at the end: mutate the last bytes most of the time.
        if at_end && target.to_string_lossy().ends_with(".parquet") {
            let keep = seed.len().saturating_sub(400);
            let mut tail = mutate(&seed[keep..], &muts, 0);
            let mut bytes = seed[..keep].to_vec();
            bytes.append(&mut tail);
            for (rel, b) in files {
                std::fs::write(dir.path().join(rel), if rel == target { &bytes } else { b }).unwrap();
            }
        } else {
            restore(dir.path(), files, target, &muts, 0);
        }
        let _ = ragtime::labels::load_manifest(dir.path());
        let _ = ragtime::labels::read_all(dir.path());
        let _ = ragtime::labels::read_features(dir.path(), &["entropy_last", "hidden_mean_entity"]);
        // resuming a store reads the same files
        let _ = ragtime::labels::HalluStore::open(dir.path(), "m", 4);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Detector checkpoints

fn detector_seed() -> &'static Vec<(PathBuf, Vec<u8>)> {
    static SEED: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    SEED.get_or_init(|| {
        use ragtime::detector::mlp::{LinearWeights, MlpConfig, MlpWeights};
        use ragtime::detector::{Detector, DetectorInfo, Norm};
        let hidden = 4;
        let widths = [hidden + 1, 3, 2];
        let layers: Vec<LinearWeights> = widths
            .windows(2)
            .map(|w| LinearWeights {
                d_in: w[0],
                d_out: w[1],
                weight: (0..w[0] * w[1]).map(|i| i as f32 * 0.1).collect(),
                bias: vec![0.5; w[1]],
            })
            .collect();
        let info = DetectorInfo {
            format: ragtime::detector::FORMAT.into(),
            model_id: "m".into(),
            hidden,
            columns: vec![("hidden_mean_last".into(), hidden), ("entropy_last".into(), 1)],
            mlp: MlpConfig { input: hidden + 1, hidden_layers: vec![3], dropout: 0.0 },
            standardized: true,
            training: None,
            // two networks: the count and the second network's tensors are read too
            members: 2,
            ensemble: None,
        };
        let norm = Norm { mean: vec![0.0; hidden + 1], std: vec![1.0; hidden + 1] };
        let mut second = MlpWeights { layers: layers.clone() };
        second.layers[0].bias[0] = -0.5;
        let d = Detector::with_members(info, vec![MlpWeights { layers }, second], Some(norm)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        d.save(dir.path()).unwrap();
        common::snapshot(dir.path())
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn detector_mutated(which in any::<Index>(), (muts, in_header) in mutations()) {
        limit_memory();
        let files = detector_seed();
        let t = targets(files, |n| n.ends_with("detector.json") || n.ends_with(".safetensors"));
        let target = &t[which.index(t.len())];
        let seed = &files.iter().find(|f| &f.0 == target).unwrap().1;
        let window = if in_header && target.ends_with("model.safetensors") { safetensors_header(seed) } else { 0 };
        let dir = tempfile::tempdir().unwrap();
        restore(dir.path(), files, target, &muts, window);
        if let Ok(d) = ragtime::detector::Detector::load(dir.path()) {
            let _ = d.score(&vec![0.5; d.input_dim()]);
        }
        let _ = ragtime::detector::Detector::load_for(dir.path(), "m", 4);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Eval run directories

fn run_seed() -> &'static Vec<(PathBuf, Vec<u8>)> {
    static SEED: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    SEED.get_or_init(|| {
        use ragtime::eval::run::{PredictionRecord, RetrievalRecord, RunWriter};
        use ragtime::qa::{AnswerKind, Doc, Example};
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let cfg: BTreeMap<&str, &str> = [("method", "flare"), ("dataset", "hotpotqa"), ("label", "FLARE")].into();
        let mut w = RunWriter::create(&run, &cfg).unwrap();
        for (i, out) in ["The answer is Paris.", "no idea", "Final Answer: 1882"].iter().enumerate() {
            let ex = Example {
                id: format!("q{i}"),
                question: "Where?".into(),
                answers: vec!["Paris".into(), "1882".into()],
                kind: AnswerKind::Span,
                supporting: vec![Doc { title: "P".into(), text: "Paris is".into() }],
                contexts: vec![],
                entries: vec![],
            };
            let mut r = PredictionRecord::new(&ex, out);
            let p =
                ragtime::retrieval::Passage { id: "7".into(), title: "P".into(), text: "Paris is".into(), score: 1.5 };
            r.retrievals.push(RetrievalRecord::new(&ex, 3, "where", &[p]));
            r.generated_tokens = 12;
            r.seconds = 0.25;
            w.write(&r).unwrap();
        }
        w.finish().unwrap();
        common::snapshot(&run)
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn eval_run_mutated(which in any::<Index>(), (muts, _) in mutations()) {
        limit_memory();
        let files = run_seed();
        let t = targets(files, |n| n.ends_with("predictions.jsonl") || n.ends_with("config.toml"));
        let target = &t[which.index(t.len())];
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        restore(&run, files, target, &muts, 0);
        let _ = ragtime::eval::run::read_predictions(&run);
        let _ = ragtime::eval::run::summarise(&run);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Auto-RAG dialogue store

fn dialogue_config() -> serde_json::Value {
    serde_json::json!({"model": "m", "max_iter": 3})
}

fn dialogue_seed() -> &'static Vec<(PathBuf, Vec<u8>)> {
    static SEED: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    SEED.get_or_init(|| {
        use ragtime::autorag::dialogue::{Dialogue, Turn};
        use ragtime::autorag::filter::SubAnswer;
        use ragtime::autorag::synth::{Attempt, DialogueStore};
        let dir = tempfile::tempdir().unwrap();
        let mut s = DialogueStore::open(dir.path(), &dialogue_config()).unwrap();
        for (i, kept) in [true, false, true].into_iter().enumerate() {
            let id = format!("d{i}");
            let a = Attempt {
                id: id.clone(),
                kept,
                reason: if kept { "kept".into() } else { "wrong_answer".into() },
                iterations: 1,
                queries: vec!["q".into()],
                sub_answers: vec![Some(SubAnswer::Answer)],
                forced_answer: !kept,
                final_answer: "A".into(),
                answer_correct: kept,
                generated_tokens: 10,
                seconds: 2.0,
                forward_tokens: 120,
                sample: 0,
                samples: 1,
                rejected: vec![],
                kept_samples: vec![],
            };
            let d = Dialogue {
                id: id.clone(),
                dataset: "hotpotqa".into(),
                question: "Q?".into(),
                answers: vec!["A".into()],
                turns: vec![
                    Turn { input: "Question: Q?".into(), output: "Analysis: x\n\nInitial Query: q".into() },
                    Turn { input: "Retrieved Document_1: d".into(), output: "Final Answer: A".into() },
                ],
                iterations: 1,
                final_answer: "A".into(),
            };
            s.record(&a, if kept { std::slice::from_ref(&d) } else { &[] }).unwrap();
        }
        s.finish().unwrap();
        common::snapshot(dir.path())
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn dialogue_store_mutated(which in any::<Index>(), (muts, _) in mutations()) {
        limit_memory();
        let files = dialogue_seed();
        let t = targets(files, |n| n.ends_with(".jsonl") || n.ends_with(".json") || n.ends_with(".parquet"));
        let target = &t[which.index(t.len())];
        let dir = tempfile::tempdir().unwrap();
        restore(dir.path(), files, target, &muts, 0);
        let _ = ragtime::autorag::synth::read_dialogues(dir.path());
        let _ = ragtime::autorag::synth::read_parquet(&dir.path().join(ragtime::autorag::synth::PARQUET_FILE));
        if let Ok(s) = ragtime::autorag::synth::DialogueStore::open(dir.path(), &dialogue_config()) {
            let _ = s.stats();
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// BM25 index

fn bm25_seed() -> &'static Vec<(PathBuf, Vec<u8>)> {
    static SEED: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    SEED.get_or_init(|| {
        use ragtime::retrieval::index::{build_index, IndexOptions};
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("c.tsv");
        std::fs::write(&corpus, CORPORA[0].1).unwrap();
        let out = dir.path().join("idx");
        let o = IndexOptions { threads: 1, memory_bytes: 50 << 20, ..IndexOptions::default() };
        build_index(&corpus, &out, &o).unwrap();
        common::snapshot(&out)
    })
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn bm25_manifest_mutated(which in any::<Index>(), (muts, _) in mutations()) {
        limit_memory();
        let files = bm25_seed();
        let t = targets(files, |n| n.ends_with(".json"));
        let target = &t[which.index(t.len())];
        let dir = tempfile::tempdir().unwrap();
        restore(dir.path(), files, target, &muts, 0);
        if let Ok(idx) = ragtime::retrieval::bm25::Bm25Index::open(dir.path()) {
            use ragtime::retrieval::Retriever;
            let _ = idx.search("cat dog", 3);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// GloVe vectors (.npy)

fn npy_seed(fortran: bool) -> Vec<u8> {
    let header =
        format!("{{'descr': '<f4', 'fortran_order': {}, 'shape': (3, 2), }}", if fortran { "True" } else { "False" });
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((header.len() as u16).to_le_bytes());
    b.extend(header.bytes());
    b.extend((0..6).flat_map(|i| (i as f32).to_le_bytes()));
    b
}

proptest! {
    #![proptest_config(config(384))]

    #[test]
    fn npy_mutated(fortran in any::<bool>(), (muts, in_header) in mutations()) {
        limit_memory();
        let seed = npy_seed(fortran);
        let bytes = mutate(&seed, &muts, if in_header { seed.len() - 24 } else { 0 });
        if let Ok(n) = ragtime::entities::glove::read_npy(&bytes, Path::new("v.npy")) {
            prop_assert_eq!(n.data.len(), n.rows * n.cols);
        }
    }
}

/// A shape whose byte count overflows to the data's length was accepted (and the Fortran-order copy indexed
/// out of bounds).
#[test]
fn npy_overflowing_shape_is_an_error() {
    let rows = (1usize << 62) + 1;
    let header = format!("{{'descr': '<f4', 'fortran_order': True, 'shape': ({rows}, 4), }}");
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((header.len() as u16).to_le_bytes());
    b.extend(header.bytes());
    b.extend([0u8; 16]);
    let e = ragtime::entities::glove::read_npy(&b, Path::new("v.npy")).expect_err("refused");
    assert!(e.to_string().contains("v.npy"), "{e}");
}

/// The manifest's example count sized the readers' allocations: a damaged count aborted the process.
#[test]
fn hallu_manifest_counts_do_not_size_allocations() {
    limit_memory();
    let files = hallu_seed();
    let dir = tempfile::tempdir().unwrap();
    for (rel, bytes) in files {
        std::fs::write(dir.path().join(rel), bytes).unwrap();
    }
    let path = dir.path().join("_manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["examples"] = serde_json::json!(u64::MAX / 2);
    std::fs::write(&path, m.to_string()).unwrap();
    assert_eq!(ragtime::labels::read_all(dir.path()).unwrap().len(), 3);
    assert_eq!(ragtime::labels::read_features(dir.path(), &["entropy_last"]).unwrap().len(), 3);
    m["hidden"] = serde_json::json!(1u64 << 63);
    std::fs::write(&path, m.to_string()).unwrap();
    let e = format!(
        "{:#}",
        ragtime::labels::read_features(dir.path(), &["entropy_last", "hidden_mean_last", "hidden_final_last"])
            .unwrap_err()
    );
    assert!(e.contains("_manifest.json"), "{e}");
}
