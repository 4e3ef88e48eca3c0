//! Fine-tune a tiny random decoder on toy Auto-RAG dialogues (full and LoRA), export it as a Hugging Face
//! folder, and load that folder back with `Lm::load`: same config, same chat template default, same logits.
#![allow(clippy::disallowed_methods)] // a test looks at paths directly (clippy.toml)

use std::collections::HashMap;

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Int, Tensor, TensorData};

use ragtime::autorag::dialogue::{Dialogue, Turn};
use ragtime::device::DeviceKind;
use ragtime::model::llama::{Capture, Rope};
use ragtime::model::quantize::Quantize;
use ragtime::model::{random_weights, Arch, EngineKind, Lm, MemoryWeights, ModelConfig, Tokenizer};
use ragtime::sft::export::{export_hf, TokenizerJson};
use ragtime::sft::{LoraConfig, SftConfig, SftData};

mod common;

fn tokenizer_path() -> std::path::PathBuf {
    ragtime::data::resolve(std::path::Path::new("models/smollm2-135m-instruct/tokenizer.json"))
}

fn dialogues(n: usize) -> Vec<Dialogue> {
    (0..n)
        .map(|i| Dialogue {
            id: format!("d{i}"),
            dataset: "toy".into(),
            question: format!("Where was person {i} born?"),
            answers: vec!["Paris".into()],
            turns: vec![
                Turn {
                    input: format!("Where was person {i} born?"),
                    output: format!("Retrieval Query: person {i} birthplace"),
                },
                Turn {
                    input: format!("Retrieved Document_1: Person {i} was born in Paris."),
                    output: "Final Answer: Paris".into(),
                },
            ],
            iterations: 1,
            final_answer: "Paris".into(),
        })
        .collect()
}

#[test]
fn trained_model_exports_and_loads_back_with_the_same_logits() {
    ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
    for (arch, lora) in [(Arch::Llama, false), (Arch::Qwen2, true)] {
        let mut mcfg = ModelConfig::tiny(arch, 49152);
        mcfg.eos_token_ids = vec![2];
        let w = MemoryWeights(random_weights(&mcfg, 5).into_iter().collect::<HashMap<_, _>>());
        let mut tok = Tokenizer::from_file(&tokenizer_path()).unwrap();
        tok.default_system = Some("You are a test assistant.".into());
        let data = SftData::prepare(&dialogues(12), &tok, 96, 0.2).unwrap();
        let cfg = SftConfig {
            epochs: 1,
            lr: 1e-2,
            batch_size: 2,
            grad_accum: 1,
            max_len: 96,
            eval_every: 0,
            save_every: 0,
            log_every: 0,
            valid_fraction: 0.2,
            lora: lora.then(|| LoraConfig { rank: 2, alpha: 4.0, targets: vec!["q_proj".into(), "down_proj".into()] }),
            ..Default::default()
        };
        let dev = Default::default();
        let t = ragtime::sft::train::<Autodiff<Flex>>(&w, &mcfg, &data, &cfg, None, &dev, &mut |_| {}).unwrap();
        assert!(t.finished);
        assert!(t.model.layers.iter().all(|b| b.self_attn.q_proj.lora.is_none()), "export needs merged adapters");

        let dir = tempfile::tempdir().unwrap();
        export_hf(&t.model, &mcfg, &TokenizerJson::File(tokenizer_path()), &tok, dir.path()).unwrap();
        for f in
            ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]
        {
            assert!(dir.path().join(f).exists(), "{f} missing");
        }
        let back_cfg = ModelConfig::from_hf_config(&dir.path().join("config.json")).unwrap();
        assert_eq!(back_cfg, mcfg);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap()).unwrap();
        assert_eq!(v["model_type"], if arch == Arch::Llama { "llama" } else { "qwen2" });
        assert_eq!(v["rms_norm_eps"], serde_json::json!(1e-5));

        let lm = Lm::load(dir.path(), DeviceKind::Cpu, None).unwrap();
        assert_eq!(lm.tokenizer.default_system.as_deref(), Some("You are a test assistant."));
        assert_eq!((lm.engine(), lm.int8_decode_bytes), ("cpu".to_string(), 0), "an f32 folder decodes in f32");
        let ids: Vec<u32> = data.train[0].ids[..40].to_vec();
        let mut s = lm.session();
        s.prefill(&ids).unwrap();
        let loaded = s.logits().unwrap().to_vec();

        // --quantize q8_0: the same folder decoded from integer blocks, its logits near the f32 ones
        let q8 = Lm::load_with(dir.path(), DeviceKind::Cpu, EngineKind::Auto, None, Some(Quantize::Q8_0)).unwrap();
        assert_eq!(q8.engine(), "cpu (integer decode)");
        assert!(q8.int8_decode_bytes > 0);
        let mut s = q8.session();
        s.prefill(&ids).unwrap();
        let qdiff = s.logits().unwrap().iter().zip(&loaded).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        let scale = loaded.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(
            qdiff > 0.0 && qdiff < 0.02 * scale,
            "{arch:?} lora={lora}: q8_0 logits differ by {qdiff} (max |logit| {scale})"
        );

        let rope = Rope::<Flex>::new(&mcfg, 64, &dev);
        let x = Tensor::<Flex, 2, Int>::from_data(
            TensorData::new(ids.iter().map(|&i| i as i32).collect::<Vec<_>>(), [1, ids.len()]),
            &dev,
        );
        let h = t.model.forward(x, &rope, 0, None, Capture::default()).hidden;
        let all = t.model.logits(h).into_data().convert::<f32>().to_vec::<f32>().unwrap();
        let direct = &all[(ids.len() - 1) * 49152..];
        let diff = loaded.iter().zip(direct).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff < 1e-4, "{arch:?} lora={lora}: exported model's logits differ by {diff}");

        // The fine-tuned weights differ from the base ones (training did something and export kept it).
        let base = Lm::from_source(
            &w,
            mcfg.clone(),
            Tokenizer::from_file(&tokenizer_path()).unwrap(),
            "base".into(),
            DeviceKind::Cpu,
        )
        .unwrap();
        let mut sb = base.session();
        sb.prefill(&ids).unwrap();
        let bdiff = sb.logits().unwrap().iter().zip(&loaded).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(bdiff > 1e-3, "{arch:?} lora={lora}: exported logits equal the base model's");

        // The adapter alone (PEFT's files) on the base exported beside: the merged model's logits.
        if let (Some(ad), Some(l)) = (&t.adapters, &cfg.lora) {
            let base_dir = dir.path().join("base");
            let base_model = ragtime::model::build_llama::<Flex>(&w, &mcfg, &dev).unwrap();
            export_hf(&base_model, &mcfg, &TokenizerJson::File(tokenizer_path()), &tok, &base_dir).unwrap();
            let ad_dir = dir.path().join("adapter");
            std::fs::create_dir_all(&ad_dir).unwrap();
            ragtime::sft::export::write_tensors(&ad_dir.join("adapter_model.safetensors"), ad).unwrap();
            let acfg = ragtime::sft::lora::adapter_config_json(l, base_dir.to_str().unwrap());
            std::fs::write(ad_dir.join("adapter_config.json"), acfg.to_string()).unwrap();
            let lm = Lm::load(&ad_dir, DeviceKind::Cpu, None).unwrap();
            let mut s = lm.session();
            s.prefill(&ids).unwrap();
            let adiff = s.logits().unwrap().iter().zip(&loaded).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(adiff < 1e-4, "{arch:?}: adapter on its base differs from the merged export by {adiff}");
        }
    }
}

/// `train autorag --lora R --export-base DIR` writes, beside the base, the adapters a LoRA run starts from (what
/// the PyTorch replay starts from): PEFT's names and layout for every layer's seven projections, `A [R, in]` within
/// PEFT's bound 1/sqrt(in), `B [out, R]` zero; the same seed writes the same adapters, another seed others, and an
/// export without --lora writes none.
#[test]
fn export_base_with_lora_writes_the_initial_adapters() {
    let Some(s) = common::tiny_eval() else { return };
    let export = |name: &str, extra: &[&str]| {
        let dir = s.root.join(name);
        let mut args = vec!["train", "autorag", "--model", &s.model, "--tokenizer", &s.tokenizer, "--data", "unused"];
        args.extend(extra);
        args.extend(["--export-base", dir.to_str().unwrap()]);
        common::ok(&args);
        std::fs::read(dir.join("adapter_init.safetensors")).ok()
    };
    let bytes = export("a", &["--lora", "4"]).expect("adapter_init.safetensors written");
    let t = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let cfg = ModelConfig::tiny(Arch::Llama, 49152);
    assert_eq!(t.len(), cfg.num_layers * 7 * 2, "A and B of 7 projections per layer");
    let floats = |v: &safetensors::tensor::TensorView<'_>| -> Vec<f32> {
        v.data().chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    };
    for (name, v) in t.tensors() {
        assert!(name.starts_with("base_model.model.model.layers."), "{name}");
        let shape = v.shape().to_vec();
        if name.ends_with(".lora_A.weight") {
            assert_eq!(shape[0], 4, "{name}: A is [r, in]");
            let bound = 1.0 / (shape[1] as f32).sqrt();
            let a = floats(&v);
            assert!(a.iter().all(|x| x.abs() <= bound) && a.iter().any(|&x| x != 0.0), "{name}: A in PEFT's range");
        } else {
            assert!(name.ends_with(".lora_B.weight"), "{name}");
            assert_eq!(shape[1], 4, "{name}: B is [out, r]");
            assert!(floats(&v).iter().all(|&x| x == 0.0), "{name}: B starts at zero");
        }
    }
    assert_eq!(export("b", &["--lora", "4"]).unwrap(), bytes, "the same seed, the same adapters");
    assert_ne!(export("c", &["--lora", "4", "--seed", "7"]).unwrap(), bytes, "another seed, other adapters");
    assert!(export("d", &[]).is_none(), "no --lora, no adapters");
}

/// `train autorag --data A --data B`: the dialogue sets of two synthesis runs train as one, in order, a dialogue
/// that repeats an earlier one's question and queries (SQuAD-normalised) left out; a missing second set is an
/// error naming it.
#[test]
fn several_dialogue_sets_train_as_one_without_repeats() {
    let Some(s) = common::tiny_eval() else { return };
    let write = |name: &str, ds: &[Dialogue]| {
        let p = s.root.join(name);
        let lines: Vec<String> = ds.iter().map(|d| serde_json::to_string(d).unwrap()).collect();
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p.to_str().unwrap().to_string()
    };
    let first = dialogues(6);
    let mut again = dialogues(2); // d0 and d1 once more: d0 with the same query (other case), d1 with another
    again[0].turns[0].output = "Retrieval Query: PERSON 0 birthplace.".into();
    again[0].final_answer = "paris".into();
    again[1].turns[0].output = "Retrieval Query: where was person 1 born".into();
    let (a, b) = (write("a.jsonl", &first), write("b.jsonl", &again));
    let plan = s.root.join("plan.jsonl");
    let examples = |data: &[&str]| -> Vec<String> {
        let mut args = vec!["train", "autorag", "--model", &s.model, "--tokenizer", &s.tokenizer];
        for d in data {
            args.extend(["--data", d]);
        }
        args.extend(["--max-len", "96", "--dump-plan", plan.to_str().unwrap()]);
        common::ok(&args);
        let text = std::fs::read_to_string(&plan).unwrap();
        let rows = text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
        let mut ids: Vec<String> =
            rows.filter(|r| r["kind"] == "example").map(|r| r["id"].as_str().unwrap().to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(examples(&[&a]), ["d0", "d1", "d2", "d3", "d4", "d5"]);
    assert_eq!(examples(&[&a, &b]), ["d0", "d1", "d1", "d2", "d3", "d4", "d5"], "d0's repeat left out");
    let missing = s.root.join("none.jsonl");
    let (success, _, err) = common::ragtime(&[
        "train",
        "autorag",
        "--model",
        &s.model,
        "--tokenizer",
        &s.tokenizer,
        "--data",
        &a,
        "--data",
        missing.to_str().unwrap(),
        "--dump-plan",
        plan.to_str().unwrap(),
    ]);
    assert!(!success && err.contains("none.jsonl"), "{err}");
    // a plan replaces a plan (above), never another file: the dialogues named as --dump-plan stay as they were
    let before = std::fs::read(&a).unwrap();
    let args = ["train", "autorag", "--model", &s.model, "--tokenizer", &s.tokenizer, "--data", &a, "--dump-plan", &a];
    let (success, _, err) = common::ragtime(&args);
    assert!(!success && err.contains("a.jsonl: exists and is not a plan `ragtime train autorag` wrote"), "{err}");
    assert_eq!(std::fs::read(&a).unwrap(), before);
}
