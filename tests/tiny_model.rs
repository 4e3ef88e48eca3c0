//! A tiny random Llama/Qwen2 written as a Hugging Face folder: loading it back, KV-cache rewinds and chunked
//! feeding must give the same numbers as decoding from scratch.

use std::collections::HashMap;

use ragtime::device::DeviceKind;
use ragtime::model::safetensors::write_safetensors;
use ragtime::model::{random_weights, Arch, Lm, MemoryWeights, ModelConfig, Tokenizer};

fn tokenizer_path() -> std::path::PathBuf {
    ragtime::data::resolve(std::path::Path::new("models/smollm2-135m-instruct/tokenizer.json"))
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
    ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
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
    let err = format!("{:#}", Lm::load(&dir.path().join("missing.gguf"), DeviceKind::Cpu, None).err().unwrap());
    assert!(err.contains("missing.gguf") && err.contains("not found"), "{err}");
    let g = dir.path().join("cut.gguf");
    let src = ragtime::require_checkpoint!("smollm2-135m-instruct-q4_1.gguf");
    let bytes = std::fs::read(&src).unwrap();
    std::fs::write(&g, &bytes[..bytes.len() / 2]).unwrap();
    let err = format!("{:#}", Lm::load(&g, DeviceKind::Cpu, None).err().unwrap());
    assert!(err.contains("cut.gguf") && err.contains("truncated") && err.contains("tensor"), "{err}");
}

/// Writes a tiny random model as a GGUF file the way llama.cpp lays it out (GGUF names, Q/K rows permuted for
/// `llama`), linear weights in quantized block formats, and returns the path.
fn write_tiny_gguf(arch: Arch, dir: &std::path::Path) -> std::path::PathBuf {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    use candle_core::{Device, Tensor};
    let cfg = ModelConfig::tiny(arch, 49152);
    let w: HashMap<String, ragtime::model::weights::HostTensor> = random_weights(&cfg, 11).into_iter().collect();
    let a = if arch == Arch::Llama { "llama" } else { "qwen2" };
    let meta: Vec<(String, gguf_file::Value)> = vec![
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
    // llama.cpp's permutation for `llama` Q/K: original row (h, j, i) is stored at (h, i, j)
    let permute = |t: &ragtime::model::weights::HostTensor, n_head: usize| -> Vec<f32> {
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
    let path = dir.join(format!("tiny-{a}.gguf"));
    let mut f = std::fs::File::create(&path).unwrap();
    let meta_refs: Vec<(&str, &gguf_file::Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).unwrap();
    path
}

/// A quantized GGUF decodes on integer copies of its blocks; the result must equal decoding on the de-quantized f32 weights
/// (same greedy ids, logits, attention and hidden states up to f32 rounding), through a rewind too. For `llama`
/// this also checks that the blocks' Q/K rows are un-permuted like the f32 ones.
#[test]
fn quantized_gguf_decode_matches_f32_decode() {
    ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
    for arch in [Arch::Llama, Arch::Qwen2] {
        let dir = tempfile::tempdir().unwrap();
        let path = write_tiny_gguf(arch, dir.path());
        let int8 = Lm::load(&path, DeviceKind::Cpu, Some(&tokenizer_path())).unwrap();
        let mut f32m = Lm::load(&path, DeviceKind::Cpu, Some(&tokenizer_path())).unwrap();
        // every linear weight and the tied output projection have an integer copy: 0.75 bytes per weight for
        // the 4-bit formats (q: Q4_1, k: Q4_0, gate: Q4_1), 1.5 for the others (v, o, up, down, embedding)
        let cfg = &int8.config;
        let (d, f, kv) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_kv_heads * cfg.head_dim);
        let u4 = cfg.num_layers * (d * d + kv * d + f * d);
        let i8w = cfg.num_layers * (kv * d + d * d + 2 * f * d) + cfg.vocab_size * d;
        assert_eq!(int8.int8_decode_bytes, u4 * 3 / 4 + i8w * 3 / 2, "{arch:?}: integer copies attached");
        f32m.f32_decode();
        assert_eq!(f32m.int8_decode_bytes, 0);
        let prompt = [10u32, 200, 3000, 4000, 50, 60, 70];
        let run = |lm: &Lm| {
            let mut s = lm.session();
            s.prefill(&prompt).unwrap();
            let mut steps = s.generate(6, &mut ragtime::model::Sampler::greedy()).unwrap();
            s.truncate(prompt.len() + 2);
            steps.extend(s.feed(&[5, 6, 7], 0).unwrap());
            (steps, s.logits().unwrap().to_vec())
        };
        let ((sa, la), (sb, lb)) = (run(&int8), run(&f32m));
        assert!(max_diff(&la, &lb) < 1e-4, "{arch:?}: logits differ by {}", max_diff(&la, &lb));
        assert_eq!(sa.len(), sb.len());
        for (x, y) in sa.iter().zip(&sb) {
            assert_eq!(x.id, y.id, "{arch:?}: greedy ids differ at {}", x.pos);
            assert!((x.entropy - y.entropy).abs() < 1e-4 || (x.entropy.is_nan() && y.entropy.is_nan()));
            for h in 0..x.attn.len() {
                assert!(max_diff(&x.attn[h], &y.attn[h]) < 1e-5, "{arch:?}: attention");
            }
            assert!(max_diff(&x.hidden_final, &y.hidden_final) < 1e-4, "{arch:?}: hidden");
        }
    }
}

/// The CPU engine (ragtime's kernels, integer decode) against the reference engine (burn's ops, the training
/// forward pass) on the same weights: f32 safetensors and a quantized GGUF, Llama and Qwen2 (biases). A capturing
/// prefill chunk, greedy decoding, a rewind, a long feed that outgrows the first cache allocation (512 positions)
/// and a decode after it: same greedy ids, and logits, entropies, attention rows and both hidden states within
/// f32 rounding.
#[test]
fn cpu_engine_matches_reference_engine() {
    use ragtime::model::EngineKind;
    ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
    for arch in [Arch::Llama, Arch::Qwen2] {
        let dir = tempfile::tempdir().unwrap();
        let gguf = write_tiny_gguf(arch, dir.path());
        let st = dir.path().join("st");
        std::fs::create_dir(&st).unwrap();
        let _ = tiny(arch, &st);
        for path in [&gguf, &st] {
            let tok = Some(tokenizer_path());
            let cpu = Lm::load_on(path, DeviceKind::Cpu, EngineKind::Auto, tok.as_deref()).unwrap();
            let reference = Lm::load_on(path, DeviceKind::Cpu, EngineKind::Reference, tok.as_deref()).unwrap();
            assert!(cpu.engine().starts_with("cpu") && reference.engine().starts_with("reference"));
            let what = format!("{arch:?} {}", path.display());
            let run = |lm: &Lm| {
                let mut s = lm.session();
                s.prefill(&[1, 2, 3]).unwrap();
                let mut steps = s.feed(&[10, 200, 3000, 4000, 50, 60, 70], 1).unwrap();
                steps.extend(s.generate(5, &mut ragtime::model::Sampler::greedy()).unwrap());
                s.truncate(7);
                steps.extend(s.feed(&[5, 6, 7], 0).unwrap());
                let long: Vec<u32> = (0..600).map(|i| (i * 37 % 4000) as u32 + 5).collect();
                steps.extend(s.feed(&long, 595).unwrap());
                steps.extend(s.generate(3, &mut ragtime::model::Sampler::greedy()).unwrap());
                (steps, s.logits().unwrap().to_vec())
            };
            let ((sa, la), (sb, lb)) = (run(&cpu), run(&reference));
            assert!(max_diff(&la, &lb) < 1e-4, "{what}: logits differ by {}", max_diff(&la, &lb));
            assert_eq!(sa.len(), sb.len(), "{what}: step count");
            for (x, y) in sa.iter().zip(&sb) {
                assert_eq!((x.pos, x.id), (y.pos, y.id), "{what}: greedy ids differ");
                let same_nan = x.entropy.is_nan() && y.entropy.is_nan();
                assert!((x.entropy - y.entropy).abs() < 1e-4 || same_nan, "{what}: entropy at {}", x.pos);
                assert_eq!(x.attn.len(), y.attn.len());
                for h in 0..x.attn.len() {
                    assert_eq!(x.attn[h].len(), x.pos + 1, "{what}: attention row over positions 0..=pos");
                    assert!(max_diff(&x.attn[h], &y.attn[h]) < 1e-5, "{what}: attention at {}", x.pos);
                }
                assert!(max_diff(&x.hidden_final, &y.hidden_final) < 1e-4, "{what}: final hidden at {}", x.pos);
                assert!(max_diff(&x.hidden_mean, &y.hidden_mean) < 1e-4, "{what}: mean hidden at {}", x.pos);
            }
        }
    }
}

/// A feed past the model's positions fails with `ContextOverflow` (so an eval run can skip that question) and
/// leaves the session as it was, on both engines.
#[test]
fn too_long_a_feed_is_a_context_overflow_and_changes_nothing() {
    use ragtime::model::{ContextOverflow, EngineKind};
    ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
    let dir = tempfile::tempdir().unwrap();
    let _ = tiny(Arch::Llama, dir.path());
    for engine in [EngineKind::Auto, EngineKind::Reference] {
        let lm = Lm::load_on(dir.path(), DeviceKind::Cpu, engine, None).unwrap();
        let max = lm.config.max_position_embeddings;
        let mut s = lm.session();
        s.prefill(&[1, 2, 3]).unwrap();
        let logits = s.logits().unwrap().to_vec();
        let e = s.feed(&vec![5u32; max - 2], 0).unwrap_err();
        assert_eq!(e.downcast_ref::<ContextOverflow>(), Some(&ContextOverflow { needed: max + 1, max }), "{engine}");
        assert_eq!((s.len(), s.ids(), s.logits().unwrap()), (3, &[1u32, 2, 3][..], &logits[..]), "{engine}");
        s.feed(&[7, 8], 0).unwrap();
    }
}
