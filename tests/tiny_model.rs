//! A tiny random Llama/Qwen2 written as a Hugging Face folder: loading it back, KV-cache rewinds and chunked
//! feeding must give the same numbers as decoding from scratch.

use std::collections::HashMap;

use ragtime::device::DeviceKind;
use ragtime::model::safetensors::write_safetensors;
use ragtime::model::{random_weights, Arch, Lm, MemoryWeights, ModelConfig, Tokenizer};

fn tokenizer_path() -> std::path::PathBuf {
    ragtime::shared_data_dir().join("models/smollm2-135m-instruct/tokenizer.json")
}

fn tiny(arch: Arch, dir: &std::path::Path) -> (Lm, Lm) {
    let cfg = ModelConfig::tiny(arch, 49152);
    let w = random_weights(&cfg, 7);
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&cfg.to_hf_config()).unwrap()).unwrap();
    write_safetensors(&dir.join("model.safetensors"), &w, None).unwrap();
    std::fs::copy(tokenizer_path(), dir.join("tokenizer.json")).unwrap();
    let from_disk = Lm::load(dir, DeviceKind::Cpu, None).unwrap();
    let mem = MemoryWeights(w.into_iter().collect::<HashMap<_, _>>());
    let tok = Tokenizer::from_file(&tokenizer_path()).unwrap();
    let in_memory = Lm::from_source(&mem, cfg, tok, "tiny".into(), DeviceKind::Cpu).unwrap();
    (from_disk, in_memory)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn safetensors_folder_loads_and_rewind_matches_fresh_decode() {
    for arch in [Arch::Llama, Arch::Qwen2] {
        let dir = tempfile::tempdir().unwrap();
        let (disk, mem) = tiny(arch, dir.path());
        let a = [10u32, 200, 3000, 4000, 50];
        let b = [7u32, 8, 9];
        let c = [600u32, 700];

        // same weights from disk and from memory
        let mut s1 = disk.session();
        s1.prefill(&a).unwrap();
        let mut s2 = mem.session();
        s2.prefill(&a).unwrap();
        assert!(max_diff(s1.logits().unwrap(), s2.logits().unwrap()) < 1e-5, "{arch:?}: disk vs memory");

        // rewind: a + b, truncate to a, then c  ==  a + c from scratch
        let mut r = disk.session();
        r.prefill(&a).unwrap();
        r.feed(&b, 0).unwrap();
        r.truncate(a.len());
        let steps_r = r.feed(&c, 0).unwrap();
        let mut f = disk.session();
        f.prefill(&a).unwrap();
        let steps_f = f.feed(&c, 0).unwrap();
        assert!(max_diff(r.logits().unwrap(), f.logits().unwrap()) < 1e-5, "{arch:?}: rewind changed logits");
        // after a rewind the distribution of the first re-fed token is unknown (NaN), the rest match
        assert!(steps_r[0].entropy.is_nan());
        assert!((steps_r[1].entropy - steps_f[1].entropy).abs() < 1e-5);
        for (x, y) in steps_r.iter().zip(&steps_f) {
            assert_eq!(x.pos, y.pos);
            for h in 0..x.attn.len() {
                assert!(max_diff(&x.attn[h], &y.attn[h]) < 1e-5, "{arch:?}: attention after rewind");
            }
            assert!(max_diff(&x.hidden_final, &y.hidden_final) < 1e-4);
        }

        // one chunk vs token by token: same steps
        let mut one = disk.session();
        one.prefill(&a[..1]).unwrap();
        let chunk = one.feed(&a[1..], 0).unwrap();
        let mut each = disk.session();
        each.prefill(&a[..1]).unwrap();
        let singles: Vec<_> = a[1..].iter().map(|&t| each.feed(&[t], 0).unwrap().pop().unwrap()).collect();
        for (x, y) in chunk.iter().zip(&singles) {
            assert!((x.entropy - y.entropy).abs() < 1e-4, "{arch:?}: chunked entropy");
            assert_eq!(x.attn[0].len(), x.pos + 1);
            assert!(max_diff(&x.attn[0], &y.attn[0]) < 1e-5);
            assert!(max_diff(&x.hidden_mean, &y.hidden_mean) < 1e-4);
        }
    }
}

#[test]
fn bad_model_files_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("cut.gguf");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("checkpoints/smollm2-135m-instruct-q4_1.gguf");
    let bytes = std::fs::read(&src).expect("run scripts/setup.sh");
    std::fs::write(&g, &bytes[..bytes.len() / 2]).unwrap();
    let err = format!("{:#}", Lm::load(&g, DeviceKind::Cpu, None).err().unwrap());
    assert!(err.contains("cut.gguf") && err.contains("truncated") && err.contains("tensor"), "{err}");
    let err = format!("{:#}", Lm::load(&dir.path().join("missing.gguf"), DeviceKind::Cpu, None).err().unwrap());
    assert!(err.contains("missing.gguf") && err.contains("not found"), "{err}");
}
