//! Helpers shared by the integration tests (each test file uses some of them).
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::Result;
use candle_core::quantized::{GgmlDType, QTensor};
use ragtime::device::DeviceKind;
use ragtime::model::quant::QMatrix;
use ragtime::model::weights::{HostTensor, WeightSource};
use ragtime::model::{random_weights, Arch, Lm, ModelConfig, Tokenizer};
use ragtime::retrieval::{Passage, Retriever};
use ragtime::step::TokenStep;

/// Word-overlap retrieval over a few passages: a passage scores the number of its words that are in the query.
/// Records the queries it saw.
pub struct Tiny(pub Vec<Passage>, pub Mutex<Vec<String>>);

impl Retriever for Tiny {
    fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>> {
        self.1.lock().unwrap().push(query.to_string());
        let q: Vec<String> = query.split_whitespace().map(|w| w.to_lowercase()).collect();
        let mut hits: Vec<Passage> = self
            .0
            .iter()
            .map(|p| {
                let s = p.text.split_whitespace().filter(|w| q.contains(&w.to_lowercase())).count() as f32;
                Passage { score: s, ..p.clone() }
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.truncate(k);
        Ok(hits)
    }
}

impl Tiny {
    /// Passages `0`, `1`, ... with these texts.
    pub fn from_texts(texts: &[&str]) -> Tiny {
        let passages = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Passage { id: i.to_string(), title: format!("doc {i}"), text: t.to_string(), score: 0.0 })
            .collect();
        Tiny(passages, Mutex::new(vec![]))
    }
}

/// Random weights stored as Q4_1 blocks: `tensor` gives the de-quantized values, `quantized` the blocks.
pub struct Q4Weights(HashMap<String, HostTensor>, HashMap<String, QMatrix>);

impl Q4Weights {
    pub fn new(cfg: &ModelConfig, seed: u64) -> Self {
        Self::in_blocks(cfg, seed, |_| GgmlDType::Q4_1)
    }

    /// The blocks of a Q4_K_M file instead: Q6_K for `v_proj` and `down_proj`, Q4_K for the other matrices
    /// (those whose width is a multiple of 256).
    pub fn k_quants(cfg: &ModelConfig, seed: u64) -> Self {
        Self::in_blocks(cfg, seed, |name| {
            if name.contains("v_proj") || name.contains("down_proj") {
                GgmlDType::Q6K
            } else {
                GgmlDType::Q4K
            }
        })
    }

    /// The blocks of Qwen2.5-Coder-0.5B-Instruct's file instead: Q8_0 for the embedding (and a tied head),
    /// `v_proj` and `down_proj`, Q5_0 for the other matrices.
    pub fn q5_q8(cfg: &ModelConfig, seed: u64) -> Self {
        Self::in_blocks(cfg, seed, |name| {
            if name.contains("embed")
                || name.contains("lm_head")
                || name.contains("v_proj")
                || name.contains("down_proj")
            {
                GgmlDType::Q8_0
            } else {
                GgmlDType::Q5_0
            }
        })
    }

    /// Each matrix in the blocks `format` names for it, where its width is a multiple of their size.
    fn in_blocks(cfg: &ModelConfig, seed: u64, format: impl Fn(&str) -> GgmlDType) -> Self {
        let mut f32s = HashMap::new();
        let mut blocks = HashMap::new();
        for (name, t) in random_weights(cfg, seed) {
            let dtype = format(&name);
            if t.shape.len() == 2 && t.shape[1] % dtype.block_size() == 0 {
                let (rows, cols) = (t.shape[0], t.shape[1]);
                let ct =
                    candle_core::Tensor::from_vec(t.data.clone(), (rows, cols), &candle_core::Device::Cpu).unwrap();
                let q = QTensor::quantize(&ct, dtype).unwrap();
                let m = QMatrix::from_ggml(dtype, &q.data().unwrap(), rows, cols).unwrap();
                f32s.insert(name.clone(), HostTensor { data: m.dequantize(), shape: t.shape.clone() });
                blocks.insert(name, m);
            } else {
                f32s.insert(name, t);
            }
        }
        Q4Weights(f32s, blocks)
    }
}

impl WeightSource for Q4Weights {
    fn describe(&self) -> String {
        "<tiny Q4_1 weights>".into()
    }
    fn tensor(&self, name: &str) -> Result<Option<HostTensor>> {
        Ok(self.0.get(name).cloned())
    }
    fn quantized(&self, name: &str) -> Result<Option<QMatrix>> {
        Ok(self.1.get(name).cloned())
    }
}

/// SmolLM2's tokenizer (from the shared data; `None` after reporting the skip when it is missing).
pub fn tokenizer() -> Option<Tokenizer> {
    Some(Tokenizer::from_file(&ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json")?).unwrap())
}

/// A tiny random Llama stored as Q4_1 blocks, as a Q4_1 GGUF is: decoding rows use the integer weights, so the
/// decoding rows of several sequences fed together share their products (the two-vector kernels on AVX2).
pub fn tiny_q4(seed: u64) -> Option<Lm> {
    Some(tiny_q4_with(seed, tokenizer()?))
}

/// A small random Llama (hidden width 256, 512 in the MLP: every matrix a multiple of 256 wide) in the K-quant
/// blocks of a Q4_K_M file ([`Q4Weights::k_quants`]).
pub fn small_k_quants(seed: u64) -> Option<Lm> {
    let cfg =
        ModelConfig { hidden_size: 256, intermediate_size: 512, head_dim: 64, ..ModelConfig::tiny(Arch::Llama, 49152) };
    let lm = Lm::from_source(&Q4Weights::k_quants(&cfg, seed), cfg, tokenizer()?, "small-k".into(), DeviceKind::Cpu);
    Some(lm.unwrap())
}

/// A small random Llama (hidden width 256, 512 in the MLP) in Q5_0 and Q8_0 blocks ([`Q4Weights::q5_q8`]).
pub fn small_q5_q8(seed: u64) -> Option<Lm> {
    let cfg =
        ModelConfig { hidden_size: 256, intermediate_size: 512, head_dim: 64, ..ModelConfig::tiny(Arch::Llama, 49152) };
    let lm = Lm::from_source(&Q4Weights::q5_q8(&cfg, seed), cfg, tokenizer()?, "small-q5-q8".into(), DeviceKind::Cpu);
    Some(lm.unwrap())
}

/// [`tiny_q4`] with this tokenizer (for example one with more stop tokens).
pub fn tiny_q4_with(seed: u64, tokenizer: Tokenizer) -> Lm {
    let cfg = ModelConfig::tiny(Arch::Llama, 49152);
    let lm = Lm::from_source(&Q4Weights::new(&cfg, seed), cfg, tokenizer, "tiny-q4".into(), DeviceKind::Cpu).unwrap();
    assert!(lm.int8_decode_bytes > 0, "the tiny model decodes on integer weights");
    lm
}

/// A tiny random GGUF model (`ModelConfig::tiny`, vocabulary 49152) in `dir`: Q8_0 embedding, F32 norms and the
/// linear weights in several block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0); `llama` Q/K rows permuted as
/// llama.cpp's converter stores them. No tokenizer metadata.
pub fn write_tiny_gguf(arch: Arch, dir: &std::path::Path) -> std::path::PathBuf {
    write_tiny_gguf_with(arch, 49152, &[], dir)
}

/// [`write_tiny_gguf`] with `vocab` tokens and `extra` metadata entries after the model's own.
pub fn write_tiny_gguf_with(
    arch: Arch,
    vocab: usize,
    extra: &[(&str, candle_core::quantized::gguf_file::Value)],
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let cfg = ModelConfig::tiny(arch, vocab);
    let w: HashMap<String, HostTensor> = random_weights(&cfg, 11).into_iter().collect();
    write_gguf(&cfg, &w, extra, &[], true, &dir.join(format!("tiny-{}.gguf", arch.name())))
}

/// Writes the model `cfg` with Hugging Face weights `w` as a GGUF file at `path`, as llama.cpp's converter lays it
/// out: its names, `llama` Q/K rows permuted; `extra` metadata entries after the model's own and `tensors_extra`
/// (F32) after its weights. `quantized`: the linear weights in several block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and
/// the embedding in Q8_0; otherwise every tensor in F32.
pub fn write_gguf(
    cfg: &ModelConfig,
    w: &HashMap<String, HostTensor>,
    extra: &[(&str, candle_core::quantized::gguf_file::Value)],
    tensors_extra: &[(&str, HostTensor)],
    quantized: bool,
    path: &std::path::Path,
) -> std::path::PathBuf {
    use candle_core::quantized::gguf_file;
    use candle_core::{Device, Tensor};
    let arch = cfg.arch;
    let a = arch.name();
    let mut meta: Vec<(String, gguf_file::Value)> = vec![
        ("general.architecture".into(), gguf_file::Value::String(a.into())),
        (format!("{a}.embedding_length"), gguf_file::Value::U32(cfg.hidden_size as u32)),
        (format!("{a}.feed_forward_length"), gguf_file::Value::U32(cfg.intermediate_size as u32)),
        (format!("{a}.block_count"), gguf_file::Value::U32(cfg.num_layers as u32)),
        (format!("{a}.attention.head_count"), gguf_file::Value::U32(cfg.num_heads as u32)),
        (format!("{a}.attention.head_count_kv"), gguf_file::Value::U32(cfg.num_kv_heads as u32)),
        (format!("{a}.context_length"), gguf_file::Value::U32(2048)),
        (format!("{a}.rope.freq_base"), gguf_file::Value::F32(cfg.rope_theta)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), gguf_file::Value::F32(cfg.rms_norm_eps)),
    ];
    meta.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    // llama.cpp's permutation for `llama` Q/K: original row (h, j, i) is stored at (h, i, j)
    let permute = |t: &HostTensor, n_head: usize| -> Vec<f32> {
        let (rows, cols) = (t.shape[0], t.shape[1]);
        let (hd, half) = (rows / n_head, rows / n_head / 2);
        let mut out = vec![0f32; rows * cols];
        for h in 0..n_head {
            for i in 0..half {
                for j in 0..2 {
                    let (stored, orig) = (h * hd + i * 2 + j, h * hd + j * half + i);
                    out[stored * cols..(stored + 1) * cols].copy_from_slice(&t.data[orig * cols..(orig + 1) * cols]);
                }
            }
        }
        out
    };
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let mut put = |name: String, data: Vec<f32>, shape: &[usize], dtype: GgmlDType| {
        let dtype = if quantized { dtype } else { GgmlDType::F32 };
        let t = Tensor::from_vec(data, shape, &Device::Cpu).unwrap();
        tensors.push((name, QTensor::quantize(&t, dtype).unwrap()));
    };
    let e = &w["model.embed_tokens.weight"];
    put("token_embd.weight".into(), e.data.clone(), &e.shape, GgmlDType::Q8_0);
    put("output_norm.weight".into(), w["model.norm.weight"].data.clone(), &[cfg.hidden_size], GgmlDType::F32);
    for l in 0..cfg.num_layers {
        let p = format!("model.layers.{l}");
        for (hf, gg, dtype) in [
            ("self_attn.q_proj", "attn_q", GgmlDType::Q4_1),
            ("self_attn.k_proj", "attn_k", GgmlDType::Q4_0),
            ("self_attn.v_proj", "attn_v", GgmlDType::Q8_0),
            ("self_attn.o_proj", "attn_output", GgmlDType::Q5_0),
            ("mlp.gate_proj", "ffn_gate", GgmlDType::Q4_1),
            ("mlp.up_proj", "ffn_up", GgmlDType::Q5_1),
            ("mlp.down_proj", "ffn_down", GgmlDType::Q8_0),
        ] {
            let t = &w[&format!("{p}.{hf}.weight")];
            let heads = match gg {
                "attn_q" => cfg.num_heads,
                "attn_k" => cfg.num_kv_heads,
                _ => 0,
            };
            let data = if arch == Arch::Llama && heads > 0 { permute(t, heads) } else { t.data.clone() };
            put(format!("blk.{l}.{gg}.weight"), data, &t.shape, dtype);
            if let Some(b) = w.get(&format!("{p}.{hf}.bias")) {
                put(format!("blk.{l}.{gg}.bias"), b.data.clone(), &b.shape, GgmlDType::F32);
            }
        }
        put(
            format!("blk.{l}.attn_norm.weight"),
            w[&format!("{p}.input_layernorm.weight")].data.clone(),
            &[cfg.hidden_size],
            GgmlDType::F32,
        );
        put(
            format!("blk.{l}.ffn_norm.weight"),
            w[&format!("{p}.post_attention_layernorm.weight")].data.clone(),
            &[cfg.hidden_size],
            GgmlDType::F32,
        );
    }
    for (name, t) in tensors_extra {
        put(name.to_string(), t.data.clone(), &t.shape, GgmlDType::F32);
    }
    let mut f = std::fs::File::create(path).unwrap();
    let meta_refs: Vec<(&str, &gguf_file::Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).unwrap();
    path.to_path_buf()
}

/// The records of a JSON-lines file, each without the keys in `drop` (timings that differ between two runs).
pub fn jsonl_without(path: &std::path::Path, drop: &[&str]) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for k in drop {
                v.as_object_mut().unwrap().remove(*k);
            }
            v
        })
        .collect()
}

/// Runs the binary: whether it succeeded, its stdout and its stderr.
pub fn ragtime(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ragtime")).args(args).output().expect("runs the binary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the binary, which must succeed; its stdout.
pub fn ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&run_ok(&strings(args)).stdout).into_owned()
}

/// `v` as owned strings: an argument list a test builds up or extends.
pub fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Runs the binary with `args`, which must succeed; its output.
pub fn run_ok(args: &[String]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_ragtime")).args(args).output().expect("runs the binary");
    assert!(out.status.success(), "ragtime {}\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    out
}

/// `ROOT/NAME.jsonl` in the NQ-open layout, one `(question, answer)` a line.
pub fn write_qa(root: &Path, name: &str, qa: &[(String, String)]) -> PathBuf {
    let data = root.join(format!("{name}.jsonl"));
    let lines: String =
        qa.iter().map(|(q, a)| format!("{}\n", serde_json::json!({"question": q, "answer": [a]}))).collect();
    std::fs::write(&data, lines).unwrap();
    data
}

/// A BM25 index of the corpus file `corpus` at `index`, built by `ragtime index`.
pub fn index_corpus(corpus: &Path, index: &Path) {
    run_ok(&strings(&["index", "--corpus", corpus.to_str().unwrap(), "--out", index.to_str().unwrap(), "-q"]));
}

/// A dataset spec `ROOT/NAME.toml` over `ROOT/NAME.jsonl`: the NQ-open layout, one `(question, answer)` a line,
/// `max_new_tokens`, and the `[splits]` table's lines.
pub fn write_qa_spec(root: &Path, name: &str, qa: &[(String, String)], max_new_tokens: usize, splits: &str) -> PathBuf {
    let data = write_qa(root, name, qa);
    let spec = root.join(format!("{name}.toml"));
    let text = format!(
        "name = \"{name}\"\nfile = \"{}\"\nlayout = \"nq-open\"\nmax_new_tokens = {max_new_tokens}\n\n[splits]\n{splits}\n",
        data.display()
    );
    std::fs::write(&spec, text).unwrap();
    spec
}

/// A tiny evaluation setting on disk: a random Llama GGUF (SmolLM2's tokenizer), six questions (`tinyqa`, splits
/// valid 0..4 and test 4..6) and a BM25 index of six passages that answer them.
pub struct Setup {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub model: String,
    pub tokenizer: String,
    pub spec: String,
    pub index: String,
}

/// The tiny evaluation setting (`None`, with the reason printed, where the shared tokenizer is missing).
pub fn tiny_eval() -> Option<Setup> {
    let tokenizer = ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json")?;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let model = write_tiny_gguf(Arch::Llama, &root);
    let qa = [
        ("Which river flows through Rome?", "Tiber"),
        ("Who painted the Sistine Chapel ceiling?", "Michelangelo"),
        ("What is the capital of Italy?", "Rome"),
        ("Which volcano destroyed Pompeii?", "Vesuvius"),
        ("Which city has the Colosseum?", "Rome"),
        ("What sea lies east of Italy?", "Adriatic"),
    ]
    .map(|(q, a)| (q.to_string(), a.to_string()));
    let spec = write_qa_spec(&root, "tinyqa", &qa, 40, "valid = \"0..4\"\ntest = \"4..6\"");
    let corpus: String = [
        "The Tiber flows through Rome.",
        "Michelangelo painted the Sistine Chapel ceiling.",
        "Rome is the capital of Italy.",
        "Vesuvius destroyed Pompeii in 79 AD.",
        "The Colosseum stands in Rome.",
        "The Adriatic Sea lies east of Italy.",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| format!("{i}\t{t}\tdoc {i}\n"))
    .collect();
    std::fs::write(root.join("corpus.tsv"), format!("id\ttext\ttitle\n{corpus}")).unwrap();
    let index = root.join("index");
    index_corpus(&root.join("corpus.tsv"), &index);
    Some(Setup {
        model: model.display().to_string(),
        tokenizer: tokenizer.display().to_string(),
        spec: spec.display().to_string(),
        index: index.display().to_string(),
        root,
        _dir: dir,
    })
}

/// `--model --tokenizer --dataset --index` of a [`Setup`].
pub fn model_args(s: &Setup) -> Vec<String> {
    ["--model", &s.model, "--tokenizer", &s.tokenizer, "--dataset", &s.spec, "--index", &s.index]
        .iter()
        .map(|x| x.to_string())
        .collect()
}

/// A label store of `articles` articles with 10 random rows each (model "tiny", hidden 64, every hidden column the
/// same vector `v`), labelled `v[0] + v[1] > 0`: learnable, and seconds to train on.
pub fn write_toy_label_store(dir: &Path, articles: usize) {
    use ragtime::labels::{HalluExample, HalluStore};
    let mut store = HalluStore::open(dir, "tiny", 64).unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    for a in 0..articles {
        let rows: Vec<HalluExample> = (0..10)
            .map(|k| {
                let v: Vec<f32> = (0..64).map(|_| rnd()).collect();
                HalluExample {
                    article_id: format!("a{a}"),
                    title: format!("A{a}"),
                    template: "mind".into(),
                    trunc_offset: k,
                    entity_label: "PERSON".into(),
                    original_entity: "x".into(),
                    generated_entity: "y".into(),
                    continuation: "z".into(),
                    label: u8::from(v[0] + v[1] > 0.0),
                    rule: "exact".into(),
                    entropy_last: 1.0,
                    entropy_entity_mean: 1.0,
                    hidden_final_last: v.clone(),
                    hidden_mean_last: v.clone(),
                    hidden_final_entity: v.clone(),
                    hidden_mean_entity: v,
                }
            })
            .collect();
        store.add_article(&format!("a{a}"), rows).unwrap();
    }
    store.finish().unwrap();
}

/// The files under `dir` (relative path, bytes), sorted by path.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if ragtime::io::is_dir(&p).unwrap() {
                stack.push(p);
            } else {
                out.push((p.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Each step's position, token and internals the same, bit for bit.
pub fn same_steps(a: &[TokenStep], b: &[TokenStep], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: step count");
    for (x, y) in a.iter().zip(b) {
        assert_eq!((x.pos, x.id), (y.pos, y.id), "{what}");
        assert_eq!(x.entropy.to_bits(), y.entropy.to_bits(), "{what}: entropy at {}", x.pos);
        assert_eq!(x.prob.to_bits(), y.prob.to_bits(), "{what}: prob at {}", x.pos);
        assert_eq!(x.attn, y.attn, "{what}: attention at {}", x.pos);
        assert_eq!(x.hidden_final, y.hidden_final, "{what}: hidden state at {}", x.pos);
        assert_eq!(x.hidden_mean, y.hidden_mean, "{what}: mean hidden state at {}", x.pos);
    }
}

/// Three rounds of `feed_many` on `lm` (long and short prompts beside decoding rows) against each sequence fed
/// alone: the same steps and next-token logits bit for bit.
pub fn int8_feeds_equal_feeding_each_alone(lm: &ragtime::model::Lm) {
    let prompt = |n: u32, from: u32| (0..n).map(|i| (from + 37 * i) % 49152).collect::<Vec<u32>>();
    let rounds: Vec<[Vec<u32>; 3]> = vec![
        [prompt(40, 11), prompt(1, 5), prompt(70, 900)],
        [prompt(1, 42), prompt(1, 43), prompt(1, 44)],
        [prompt(34, 7), prompt(1, 45), prompt(1, 46)],
    ];
    let mut together: Vec<_> = (0..3).map(|_| lm.session()).collect();
    let mut alone: Vec<_> = (0..3).map(|_| lm.session()).collect();
    for (r, round) in rounds.iter().enumerate() {
        let ids: Vec<&[u32]> = round.iter().map(Vec::as_slice).collect();
        let mut refs: Vec<&mut ragtime::model::Session<'_>> = together.iter_mut().collect();
        let got = lm.feed_many(&mut refs, &ids, &[0; 3]).unwrap();
        for (i, (ids, s)) in round.iter().zip(alone.iter_mut()).enumerate() {
            let want = s.feed(ids, 0).unwrap();
            same_steps(&got[i], &want, &format!("round {r}, sequence {i}"));
            let (a, b) = (together[i].logits().unwrap(), s.logits().unwrap());
            assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "round {r}, sequence {i}: next-token logits"
            );
        }
    }
}
