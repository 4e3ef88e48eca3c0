//! The burn decoder against Hugging Face transformers on the same de-quantized weights
//! (`../shared/reference/*.json`): greedy ids, entropies, top-5 logits, last-layer attention rows, hidden states,
//! and the tokenizer.
//!
//! Needs the model files `scripts/setup.sh` fetches (SmolLM2 always; Qwen with `--model qwen`, test ignored by
//! default: `cargo test --release --test reference_models -- --ignored`).

use ragtime::device::DeviceKind;
use ragtime::model::{sampling, Lm, Message, Sampler};
use serde_json::Value;

/// The reference file (`../shared/reference/NAME`, beside the shared data folder), or `None` after reporting the
/// skip.
fn load_reference(name: &str) -> Option<Value> {
    let p = ragtime::testing::require(&format!("../reference/{name}"))?;
    Some(serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap())
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn rel_l2(a: &[f32], b: &[f32]) -> f32 {
    let num: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt();
    let den: f32 = b.iter().map(|y| y * y).sum::<f32>().sqrt();
    num / den
}

fn check_against(model_file: &str, reference: &str) {
    let Some(reference) = load_reference(reference) else { return };
    let model = ragtime::require_checkpoint!(model_file);
    let lm = Lm::load(&model, DeviceKind::Cpu, None).unwrap();

    for case in reference["tokenizer"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(lm.tokenizer.encode(text, false).unwrap(), ids(&case["ids"]), "tokenizer case {text:?}");
    }

    for case in reference["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let prompt_ids = ids(&case["prompt_ids"]);
        if name == "chat_capital" {
            let chat =
                lm.tokenizer.apply_chat_template(&[Message::new("user", "What is the capital of France?")], true);
            assert_eq!(chat, case["prompt"].as_str().unwrap(), "chat template");
        }
        assert_eq!(
            lm.tokenizer.encode(case["prompt"].as_str().unwrap(), true).unwrap(),
            prompt_ids,
            "{name}: prompt ids"
        );
        let expected = ids(&case["generated_ids"]);
        let mut s = lm.session();
        s.prefill(&prompt_ids).unwrap();
        let mut max_dl = 0f32;
        let mut max_da = 0f32;
        let mut max_dh = 0f32;
        let mut last = None;
        for (i, step_ref) in case["steps"].as_array().unwrap().iter().enumerate() {
            let logits = s.logits().unwrap().to_vec();
            let top = sampling::top_k(&logits, 5);
            let top_ids: Vec<u32> = top.iter().map(|t| t.0).collect();
            assert_eq!(top_ids, ids(&step_ref["top5_ids"]), "{name} step {i}: top-5 ids");
            for (t, l) in top.iter().zip(floats(&step_ref["top5_logits"])) {
                max_dl = max_dl.max((t.1 - l).abs());
            }
            let step = s.step(&mut Sampler::greedy()).unwrap();
            assert_eq!(step.id, expected[i], "{name} step {i}: greedy id");
            assert_eq!(step.pos, step_ref["pos"].as_u64().unwrap() as usize + 1, "{name} step {i}: position");
            let h_ref = step_ref["entropy"].as_f64().unwrap() as f32;
            max_dh = max_dh.max((step.entropy - h_ref).abs());
            if let Some(rows) = case["attention_rows"].get(step.pos.to_string()) {
                for (h, row) in rows.as_array().unwrap().iter().enumerate() {
                    let row = floats(row);
                    assert_eq!(step.attn[h].len(), row.len(), "{name} pos {}: attention row length", step.pos);
                    for (a, b) in step.attn[h].iter().zip(&row) {
                        max_da = max_da.max((a - b).abs());
                    }
                }
            }
            last = Some(step);
        }
        let last = last.unwrap();
        let dfin = rel_l2(&last.hidden_final, &floats(&case["hidden_final_last"]));
        let dmean = rel_l2(&last.hidden_mean, &floats(&case["hidden_mean_layers_last"]));
        eprintln!("{name}: max |dlogit| {max_dl:.2e}, max |dH| {max_dh:.2e}, max |dattn| {max_da:.2e}, hidden rel-L2 final {dfin:.2e} mean {dmean:.2e}");
        assert!(max_dl < 2e-3, "{name}: top-5 logits differ by {max_dl}");
        assert!(max_dh < 1e-3, "{name}: entropy differs by {max_dh}");
        assert!(max_da < 1e-4, "{name}: attention differs by {max_da}");
        assert!(dfin < 1e-3, "{name}: final hidden state rel L2 {dfin}");
        assert!(dmean < 1e-3, "{name}: mean-over-layers hidden state rel L2 {dmean}");
    }
}

#[test]
fn smollm2_matches_transformers() {
    check_against("smollm2-135m-instruct-q4_1.gguf", "smollm2_135m_q4_1.json");
}

#[test]
#[ignore = "needs scripts/setup.sh --model qwen (491 MB); run with --ignored"]
fn qwen25_coder_matches_transformers() {
    check_against("qwen2.5-coder-0.5b-instruct.gguf", "qwen25_coder_05b_instruct.json");
}
