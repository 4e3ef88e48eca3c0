//! Scaled RoPE (`llama3`, as Llama 3.1 and 3.2 ship it, `linear` and `yarn`) against Hugging Face transformers on
//! a tiny Llama (`tests/data/rope_scaling_reference.json`, written by `scripts/make_rope_scaling_reference.py`):
//! the same weights, made here from the script's formula, loaded as a Hugging Face folder (`rope_scaling` in its
//! config.json) and, for `llama3` and `linear`, as a GGUF file (llama.cpp's `rope_freqs.weight` divisors, or
//! `rope.scaling.type` metadata),
//! on every CPU engine, fed whole and a token at a time. And what is refused rather than run as another model:
//! scalings ragtime does not implement, RoPE on part of a head, a GGUF pre-tokenizer ragtime does not build, a
//! llama file with biases.

mod common;

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value as Meta;
use ragtime::device::DeviceKind;
use ragtime::model::weights::HostTensor;
use ragtime::model::{EngineKind, Lm, ModelConfig};
use serde_json::Value;

fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3))
}

/// The script's numbers: splitmix64 of `fnv1a(name) + index`, mapped to [-1, 1).
fn uniform(name: &str, n: usize) -> Vec<f32> {
    let base = fnv1a(name);
    (0..n as u64)
        .map(|i| {
            let mut z = base.wrapping_add(i).wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 11) as f64 * 2f64.powi(-53) * 2.0 - 1.0) as f32
        })
        .collect()
}

/// The script's weights for `cfg`, under Hugging Face names.
fn weights(cfg: &ModelConfig) -> HashMap<String, HostTensor> {
    let (d, kv, inter) = (cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, cfg.intermediate_size);
    let mut shapes = vec![("model.embed_tokens.weight".to_string(), vec![cfg.vocab_size, d])];
    shapes.push(("model.norm.weight".into(), vec![d]));
    for l in 0..cfg.num_layers {
        let p = format!("model.layers.{l}");
        for (n, s) in [
            ("self_attn.q_proj.weight", vec![d, d]),
            ("self_attn.k_proj.weight", vec![kv, d]),
            ("self_attn.v_proj.weight", vec![kv, d]),
            ("self_attn.o_proj.weight", vec![d, d]),
            ("mlp.gate_proj.weight", vec![inter, d]),
            ("mlp.up_proj.weight", vec![inter, d]),
            ("mlp.down_proj.weight", vec![d, inter]),
            ("input_layernorm.weight", vec![d]),
            ("post_attention_layernorm.weight", vec![d]),
        ] {
            shapes.push((format!("{p}.{n}"), s));
        }
    }
    shapes
        .into_iter()
        .map(|(name, shape)| {
            let u = uniform(&name, shape.iter().product());
            let data = if name.ends_with("norm.weight") {
                u.iter().map(|x| 1.0 + 0.1 * x).collect()
            } else if name == "model.embed_tokens.weight" {
                u
            } else {
                u.iter().map(|x| 0.3 * x).collect()
            };
            (name, HostTensor { data, shape })
        })
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn rel_l2(a: &[f32], b: &[f32]) -> f32 {
    let num: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt();
    num / b.iter().map(|y| y * y).sum::<f32>().sqrt()
}

/// Writes a case's model as a Hugging Face folder (`config`: its config.json) in `dir`.
fn write_hf(dir: &Path, config: &Value, w: &HashMap<String, HostTensor>) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut tensors: Vec<(String, HostTensor)> = w.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    ragtime::sft::export::write_tensors(&dir.join("model.safetensors"), &tensors).unwrap();
}

/// The largest distance of `lm`'s entropies and final hidden states from the reference, fed whole and a token
/// at a time after an 8-token prompt: (max |d entropy|, max hidden rel-L2).
fn distance(lm: &Lm, ids: &[u32], case: &Value) -> (f32, f32) {
    let entropy = floats(&case["entropy"]);
    let whole = lm.session().feed(ids, 0).unwrap();
    let mut s = lm.session();
    let mut stepped = s.feed(&ids[..8], 0).unwrap();
    for &id in &ids[8..] {
        stepped.extend(s.feed(&[id], 0).unwrap());
    }
    let (mut dh, mut dhid) = (0f32, 0f32);
    for steps in [&whole, &stepped] {
        assert_eq!(steps.len(), ids.len());
        // step p's entropy is that of the distribution at position p - 1
        for p in 1..ids.len() {
            dh = dh.max((steps[p].entropy - entropy[p - 1]).abs());
        }
        for (p, h) in case["hidden_final"].as_object().unwrap() {
            dhid = dhid.max(rel_l2(&steps[p.parse::<usize>().unwrap()].hidden_final, &floats(h)));
        }
    }
    (dh, dhid)
}

#[test]
fn scaled_rope_matches_transformers() {
    let Some(tokenizer) = ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json") else { return };
    let root = env!("CARGO_MANIFEST_DIR");
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/tests/data/rope_scaling_reference.json")).unwrap(),
    )
    .unwrap();
    let ids: Vec<u32> = reference["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let dir = tempfile::tempdir().unwrap();
    for case in reference["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let hf = dir.path().join(name);
        write_hf(&hf, &case["config"], &HashMap::new());
        let cfg = ModelConfig::from_hf_config(&hf.join("config.json")).unwrap();
        let w = weights(&cfg);
        write_hf(&hf, &case["config"], &w);

        // the frequencies, as transformers made them
        let inv = ragtime::model::rope::inv_freqs(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling.as_ref());
        let want = floats(&case["inv_freq"]);
        for (a, b) in inv.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-6 * b, "{name}: inv_freq {inv:?} against {want:?}");
        }

        let scale = cfg.rope_scaling.as_ref().map_or(1.0, |s| s.attention_factor());
        let want = case["attention_scaling"].as_f64().unwrap() as f32;
        assert!((scale - want).abs() <= 1e-6, "{name}: cos and sin times {scale}, transformers' {want}");

        // the same model as a GGUF file, its scaling as llama.cpp's converter writes it (where ragtime reads one)
        let meta: Vec<(&str, Meta)> = case["gguf"]["metadata"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    v.as_str().map_or_else(|| Meta::F32(v.as_f64().unwrap() as f32), |s| Meta::String(s.into())),
                )
            })
            .collect();
        let freqs: Vec<(&str, HostTensor)> = case["gguf"]
            .get("rope_freqs")
            .map(|f| {
                let data = floats(f);
                vec![("rope_freqs.weight", HostTensor { shape: vec![data.len()], data })]
            })
            .unwrap_or_default();
        let gguf = common::write_gguf(&cfg, &w, &meta, &freqs, false, &dir.path().join(format!("{name}.gguf")));
        let mut runs = vec![(&hf, EngineKind::Auto), (&hf, EngineKind::Reference), (&hf, EngineKind::Batched)];
        if !case["gguf"].is_null() {
            runs.extend([(&gguf, EngineKind::Auto), (&gguf, EngineKind::Reference)]);
        }

        for (path, engine) in runs {
            let lm = Lm::load_on(path, DeviceKind::Cpu, engine, Some(&tokenizer)).unwrap();
            if path == &gguf {
                let table = |c: &ModelConfig| ragtime::model::rope::rope_tables(c, 128);
                let (a, b) = (table(&lm.config), table(&cfg));
                let d =
                    a.0.iter().zip(&b.0).chain(a.1.iter().zip(&b.1)).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
                assert!(d < 1e-5, "{name}: the GGUF's RoPE tables differ from config.json's by {d}");
            }
            let (dh, dhid) = distance(&lm, &ids, case);
            eprintln!("{name} {} {engine}: max |dH| {dh:.2e}, hidden rel-L2 {dhid:.2e}", path.display());
            assert!(dh < 1e-4, "{name} {} {engine}: entropy differs by {dh}", path.display());
            assert!(dhid < 1e-5, "{name} {} {engine}: final hidden state rel-L2 {dhid}", path.display());
        }

        // without its scaling the model is another one: the comparison above can tell
        let mut plain = case["config"].clone();
        plain["rope_scaling"] = Value::Null;
        let unscaled = dir.path().join(format!("{name}-unscaled"));
        write_hf(&unscaled, &plain, &w);
        let lm = Lm::load_on(&unscaled, DeviceKind::Cpu, EngineKind::Auto, Some(&tokenizer)).unwrap();
        let (dh, dhid) = distance(&lm, &ids, case);
        assert!(dh > 1e-2 && dhid > 1e-2, "{name}: unscaled RoPE gives the same outputs ({dh}, {dhid})");
    }
}

/// Scalings ragtime does not implement are refused by name, in config.json and in GGUF metadata, and so are a GGUF
/// pre-tokenizer ragtime does not build and a llama GGUF with biases; a config.json cannot carry GGUF's per-frequency divisors, so training from such a file stops
/// before it starts.
#[test]
fn unsupported_options_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let base = r#""model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "vocab_size": 100"#;
    for (scaling, want) in [
        (
            r#"{"rope_type": "longrope", "factor": 4.0}"#,
            "rope_scaling type 'longrope' is not supported (default, linear, llama3, yarn)",
        ),
        (r#"{"type": "dynamic", "factor": 2.0}"#, "rope_scaling type 'dynamic' is not supported"),
        (
            r#"{"rope_type": "llama3", "factor": 8.0}"#,
            "rope_scaling of type 'llama3' lacks the number 'low_freq_factor'",
        ),
        (
            r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0}"#,
            "rope_scaling.high_freq_factor = 1: expected more than rope_scaling.low_freq_factor = 4",
        ),
        (r#"{"rope_type": "linear", "factor": 0}"#, "rope_scaling.factor = 0: expected a finite number above 0"),
    ] {
        let p = dir.path().join("config.json");
        std::fs::write(&p, format!("{{{base}, \"rope_scaling\": {scaling}}}")).unwrap();
        let e = format!("{:#}", ModelConfig::from_hf_config(&p).unwrap_err());
        assert!(e.contains("config.json") && e.contains(want), "{scaling}: {e}");
    }
    // the newer layout: rope_parameters, default type
    let p = dir.path().join("config.json");
    std::fs::write(&p, format!(r#"{{{base}, "rope_parameters": {{"rope_type": "default", "rope_theta": 500000.0}}}}"#))
        .unwrap();
    let c = ModelConfig::from_hf_config(&p).unwrap();
    assert_eq!((c.rope_theta, c.rope_scaling), (500000.0, None));

    let yarn = [("llama.rope.scaling.type", Meta::String("yarn".into()))];
    let g = common::write_tiny_gguf_with(ragtime::model::Arch::Llama, 49152, &yarn, dir.path());
    let e = format!("{:#}", ragtime::model::gguf::GgufFile::open(&g).err().unwrap());
    assert!(e.contains("RoPE scaling type 'yarn' (llama.rope.scaling.type) is not supported"), "{e}");
    let partial = [("llama.rope.dimension_count", Meta::U32(4))];
    let g = common::write_tiny_gguf_with(ragtime::model::Arch::Llama, 49152, &partial, dir.path());
    let e = format!("{:#}", ragtime::model::gguf::GgufFile::open(&g).err().unwrap());
    assert!(e.contains("RoPE on 4 of a head's 8 dimensions (llama.rope.dimension_count) is not supported"), "{e}");

    // a GGUF vocabulary whose pre-tokenizer ragtime does not build is refused (it would split text differently)
    let vocab = |pre: &str| -> Vec<(&str, Meta)> {
        let strings = |v: &[&str]| Meta::Array(v.iter().map(|t| Meta::String(t.to_string())).collect());
        vec![
            ("tokenizer.ggml.model", Meta::String("gpt2".into())),
            ("tokenizer.ggml.pre", Meta::String(pre.into())),
            ("tokenizer.ggml.tokens", strings(&["a", "b", "ab", "c"])),
            ("tokenizer.ggml.merges", strings(&["a b"])),
        ]
    };
    for (pre, refused) in [("gpt2", false), ("llama-bpe", false), ("tekken", true), ("deepseek-llm", true)] {
        let g = common::write_tiny_gguf_with(ragtime::model::Arch::Llama, 4, &vocab(pre), dir.path());
        let tok = ragtime::model::Tokenizer::from_gguf(&ragtime::model::gguf::GgufFile::open(&g).unwrap());
        match (refused, tok) {
            (false, Ok(t)) => assert_eq!(t.encode("abc", false).unwrap(), vec![2, 3], "{pre}"),
            (true, Err(e)) => {
                let e = format!("{e:#}");
                assert!(e.contains(&format!("GGUF pre-tokenizer '{pre}' (tokenizer.ggml.pre) is not one")), "{e}");
            }
            (_, other) => panic!("{pre}: {:?}", other.map(|_| ()).map_err(|e| e.to_string())),
        }
    }

    // a llama file with biases is refused rather than run without them
    let cfg = ModelConfig::tiny(ragtime::model::Arch::Llama, 100);
    let mut w: HashMap<String, HostTensor> = ragtime::model::random_weights(&cfg, 1).into_iter().collect();
    w.insert("model.layers.0.self_attn.q_proj.bias".into(), HostTensor { data: vec![0.0; 32], shape: vec![32] });
    let g = common::write_gguf(&cfg, &w, &[], &[], false, &dir.path().join("bias.gguf"));
    let e = format!("{:#}", ragtime::model::gguf::GgufFile::open(&g).err().unwrap());
    assert!(e.contains("a llama file with biases (blk.0.attn_q.bias) is not supported"), "{e}");

    let mut cfg = ModelConfig::tiny(ragtime::model::Arch::Llama, 100);
    cfg.rope_scaling = Some(ragtime::model::rope::RopeScaling::Factors { factors: vec![1.0, 1.0, 2.0, 8.0] });
    let e = cfg.to_hf_config().unwrap_err().to_string();
    assert!(e.contains("per-frequency factors (a GGUF's rope_freqs.weight) is not supported"), "{e}");
}
