//! A tiny random Llama/Qwen2 written as a Hugging Face folder: loading it back, KV-cache rewinds and chunked
//! feeding must give the same numbers as decoding from scratch.

mod common;

use std::collections::HashMap;

use common::write_tiny_gguf;
use ragtime::device::DeviceKind;
use ragtime::model::safetensors::write_safetensors;
use ragtime::model::{random_weights, Arch, Lm, MemoryWeights, ModelConfig, Tokenizer};

fn tokenizer_path() -> std::path::PathBuf {
    ragtime::data::resolve(std::path::Path::new("models/smollm2-135m-instruct/tokenizer.json"))
}

fn tiny(arch: Arch, dir: &std::path::Path) -> (Lm, Lm) {
    let cfg = ModelConfig::tiny(arch, 49152);
    let w = random_weights(&cfg, 7);
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&cfg.to_hf_config().unwrap()).unwrap())
        .unwrap();
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

/// A quantized GGUF decodes on its blocks held as integers; the result must equal decoding on the de-quantized f32 weights
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
        // the 4-bit formats (q: Q4_1, k: Q4_0, gate: Q4_1); int8 with one scale per 32 weights and no offsets,
        // 1.125, for the symmetric ones (v: Q8_0, o: Q5_0, down: Q8_0, embedding: Q8_0); with an offset per 32,
        // 1.25, for Q5_1 (up)
        let cfg = &int8.config;
        let (d, f, kv) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_kv_heads * cfg.head_dim);
        let u4 = cfg.num_layers * (d * d + kv * d + f * d);
        let sym = cfg.num_layers * (kv * d + d * d + f * d) + cfg.vocab_size * d;
        let with_offset = cfg.num_layers * f * d;
        assert_eq!(
            int8.int8_decode_bytes,
            u4 * 3 / 4 + sym * 9 / 8 + with_offset * 5 / 4,
            "{arch:?}: integer blocks held"
        );
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

/// Prefill chunks longer than `int_rows` multiply in f32: the engine holding only the integer blocks de-quantizes
/// them a tile at a time, and must give bit for bit what it gives holding the whole f32 matrices
/// (`--f32-decode`): every row's entropy, probability, attention row and hidden states, and the next logits;
/// also for two sequences fed together, which share the tiles.
#[test]
fn quantized_prefill_equals_f32_prefill_bit_for_bit() {
    use ragtime::model::engine::cpu::int_rows;
    ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
    let ids: Vec<u32> = (0..int_rows() as u32 + 9).map(|i| (i * 977 + 13) % 4000).collect();
    let other: Vec<u32> = ids.iter().rev().copied().collect();
    for arch in [Arch::Llama, Arch::Qwen2] {
        let dir = tempfile::tempdir().unwrap();
        let path = write_tiny_gguf(arch, dir.path());
        let int = Lm::load(&path, DeviceKind::Cpu, Some(&tokenizer_path())).unwrap();
        let mut f32m = Lm::load(&path, DeviceKind::Cpu, Some(&tokenizer_path())).unwrap();
        f32m.f32_decode();
        let run = |lm: &Lm| {
            let (mut a, mut b) = (lm.session(), lm.session());
            let alone = a.feed(&ids, 0).unwrap();
            let logits = a.logits().unwrap().to_vec();
            let mut a2 = lm.session();
            let both = lm.feed_many(&mut [&mut a2, &mut b], &[&ids, &other], &[0, 0]).unwrap();
            (alone, logits, both)
        };
        let ((sa, la, ba), (sb, lb, bb)) = (run(&int), run(&f32m));
        assert_eq!(la, lb, "{arch:?}: next logits");
        for (x, y) in sa.iter().chain(ba.iter().flatten()).zip(sb.iter().chain(bb.iter().flatten())) {
            let what = format!("{arch:?}, position {}", x.pos);
            // (the first position has no distribution: NaN entropy and probability, compared by their bits)
            assert_eq!(
                (x.id, x.entropy.to_bits(), x.prob.to_bits()),
                (y.id, y.entropy.to_bits(), y.prob.to_bits()),
                "{what}"
            );
            assert_eq!(
                (&x.attn, &x.hidden_final, &x.hidden_mean),
                (&y.attn, &y.hidden_final, &y.hidden_mean),
                "{what}"
            );
        }
        assert_eq!(ba[0].len(), ids.len());
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

/// Steps equal in ids and positions, their numbers within `eps` (attention and probabilities within `eps / 10`).
fn close_steps(a: &[ragtime::step::TokenStep], b: &[ragtime::step::TokenStep], eps: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: step count");
    for (x, y) in a.iter().zip(b) {
        assert_eq!((x.pos, x.id), (y.pos, y.id), "{what}: greedy ids differ");
        let same_nan = x.entropy.is_nan() && y.entropy.is_nan();
        assert!((x.entropy - y.entropy).abs() < eps || same_nan, "{what}: entropy at {}", x.pos);
        let same_nan = x.prob.is_nan() && y.prob.is_nan();
        assert!((x.prob - y.prob).abs() < eps / 10.0 || same_nan, "{what}: prob at {}", x.pos);
        assert_eq!(x.attn.len(), y.attn.len(), "{what}: heads at {}", x.pos);
        for h in 0..x.attn.len() {
            assert_eq!(x.attn[h].len(), x.pos + 1, "{what}: attention row over positions 0..=pos");
            assert!(max_diff(&x.attn[h], &y.attn[h]) < eps / 10.0, "{what}: attention at {}", x.pos);
        }
        assert!(max_diff(&x.hidden_final, &y.hidden_final) < eps, "{what}: final hidden at {}", x.pos);
        assert!(max_diff(&x.hidden_mean, &y.hidden_mean) < eps, "{what}: mean hidden at {}", x.pos);
    }
}

/// The batched engine (lane buffers, a fixed-shape decode grid, padded prefill chunks) against the reference
/// engine on both architectures: twelve sessions of different lengths fed together (more than the buffers'
/// first 8 lanes, so they grow), with prefill chunks beside decoding rows, rewinds, a session dropped and its
/// lane reused, and one sequence outgrowing the first capacity of 1024 positions. Each session gets, within
/// f32 rounding, what the reference engine gives it alone.
#[test]
fn batched_engine_matches_reference_engine() {
    ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
    batched_against_reference(DeviceKind::Cpu, 1e-4);
}

/// A greedy decode on the batched engine reads back each row's scores, not its logits: entropies, probabilities
/// and tokens equal the reference engine's, and no step copied a logits row to the host until one is asked for.
#[test]
fn batched_engine_decodes_greedily_without_reading_logits_back() {
    use ragtime::model::{EngineKind, Sampler};
    ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
    let dir = tempfile::tempdir().unwrap();
    let _ = tiny(Arch::Qwen2, dir.path());
    let batched = Lm::load_on(dir.path(), DeviceKind::Cpu, EngineKind::Batched, None).unwrap();
    let reference = Lm::load_on(dir.path(), DeviceKind::Cpu, EngineKind::Reference, None).unwrap();
    let (mut a, mut b) = (batched.session(), reference.session());
    let prompt: Vec<u32> = (0..9).map(|j| (j * 53 % 4000 + 5) as u32).collect();
    // a capturing prefill: its steps' probabilities are those of the chunk's next tokens
    close_steps(&a.feed(&prompt, 2).unwrap(), &b.feed(&prompt, 2).unwrap(), 1e-4, "prefill");
    for k in 0..6 {
        let (ia, ib) = (a.pick(&mut Sampler::greedy()).unwrap(), b.pick(&mut Sampler::greedy()).unwrap());
        assert!(!a.next_dist().unwrap().fetched(), "step {k}: the greedy pick fetched a logits row");
        // (that feeding the greedy token scores it without the row: dist.rs's unit test)
        close_steps(&a.feed(&[ia], 0).unwrap(), &b.feed(&[ib], 0).unwrap(), 1e-4, &format!("greedy step {k}"));
    }
    // asked for, the row comes back: the reference engine's logits
    let (la, lb) = (a.logits().unwrap().to_vec(), b.logits().unwrap());
    assert!(a.next_dist().unwrap().fetched());
    assert!(max_diff(&la, lb) < 1e-4, "fetched logits differ by {}", max_diff(&la, lb));
    // a sampler that is not greedy reads the row too, and picks as from the reference's
    let mut s1 = Sampler::new(0.8, 0.9, 7);
    let mut s2 = Sampler::new(0.8, 0.9, 7);
    assert_eq!(a.pick(&mut s1).unwrap(), b.pick(&mut s2).unwrap());
}

/// The same with the batched engine on a GPU (`cargo test --release --test tiny_model -- --ignored`), against the
/// reference engine on the CPU: within 3e-2, as CUDA's f32 products are less exact than the CPU's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn batched_engine_on_cuda_matches_reference_engine_on_the_cpu() {
    batched_against_reference(DeviceKind::Cuda(0), 3e-2);
}

fn batched_against_reference(device: DeviceKind, eps: f32) {
    use ragtime::model::{EngineKind, Sampler};
    for arch in [Arch::Llama, Arch::Qwen2] {
        let dir = tempfile::tempdir().unwrap();
        let _ = tiny(arch, dir.path());
        let batched = Lm::load_on(dir.path(), device, EngineKind::Batched, None).unwrap();
        let reference = Lm::load_on(dir.path(), DeviceKind::Cpu, EngineKind::Reference, None).unwrap();
        assert!(batched.engine().starts_with("batched"), "{}", batched.engine());
        let n = 12;
        let prompt =
            |i: usize| -> Vec<u32> { (0..3 + 5 * i).map(|j| ((i * 131 + j * 17) % 4000 + 5) as u32).collect() };
        let mut together: Vec<_> = (0..n).map(|_| batched.session()).collect();
        let mut alone: Vec<_> = (0..n).map(|_| reference.session()).collect();
        // round 0: every prompt (prefill chunks of 3..58 tokens); then decoding rounds, with some sessions
        // feeding a chunk or nothing; a rewind; a session replaced by a fresh one (its lane reused)
        for round in 0..8 {
            let mut ids: Vec<Vec<u32>> = Vec::new();
            let mut from = Vec::new();
            for (i, s) in alone.iter().enumerate() {
                let (chunk, f) = match round {
                    0 => (prompt(i), 1),
                    _ if (i + round) % 5 == 0 => (vec![7, 8, 9, (i + round) as u32], 2),
                    _ if (i + round) % 7 == 0 => (vec![], 0),
                    _ => (vec![s.pick(&mut Sampler::greedy()).unwrap()], 0),
                };
                ids.push(chunk);
                from.push(f);
            }
            let id_refs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
            let mut refs: Vec<&mut ragtime::model::Session<'_>> = together.iter_mut().collect();
            let got = batched.feed_many(&mut refs, &id_refs, &from).unwrap();
            for (i, s) in alone.iter_mut().enumerate() {
                let what = format!("{arch:?} round {round} session {i}");
                let want = s.feed(&ids[i], from[i]).unwrap();
                close_steps(&got[i], &want, eps, &what);
                if let (Some(a), Some(b)) = (together[i].logits(), s.logits()) {
                    assert!(max_diff(a, b) < eps, "{what}: next-token logits differ by {}", max_diff(a, b));
                }
            }
            if round == 3 {
                together[2].truncate(4);
                alone[2].truncate(4);
                let (a, b) = (together[2].feed(&[11], 0).unwrap(), alone[2].feed(&[11], 0).unwrap());
                close_steps(&a, &b, eps, &format!("{arch:?} after a rewind"));
                together[5] = batched.session();
                alone[5] = reference.session();
                together[5].prefill(&[1, 2]).unwrap();
                alone[5].prefill(&[1, 2]).unwrap();
            }
        }
        // one sequence past the buffers' first capacity
        let long: Vec<u32> = (0..1500).map(|i| (i * 37 % 4000) as u32 + 5).collect();
        let a = together[0].feed(&long, 1490).unwrap();
        let b = alone[0].feed(&long, 1490).unwrap();
        close_steps(&a, &b, eps, &format!("{arch:?} long feed"));
        let a = together[0].generate(3, &mut Sampler::greedy()).unwrap();
        let b = alone[0].generate(3, &mut Sampler::greedy()).unwrap();
        close_steps(&a, &b, eps, &format!("{arch:?} after the long feed"));
    }
}

/// A feed past the model's positions fails with `ContextOverflow` (so an eval run can skip that question) and
/// leaves the session as it was, on every engine.
#[test]
fn too_long_a_feed_is_a_context_overflow_and_changes_nothing() {
    use ragtime::model::{ContextOverflow, EngineKind};
    ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
    let dir = tempfile::tempdir().unwrap();
    let _ = tiny(Arch::Llama, dir.path());
    for engine in [EngineKind::Auto, EngineKind::Reference, EngineKind::Batched] {
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

/// `--dtype`: the CPU and reference engines compute in f32 only and say so; the batched engine changes its dtype
/// only before its first sequence (its lane buffers hold keys in the old one).
#[test]
fn only_the_batched_engine_changes_dtype_and_only_before_its_first_sequence() {
    use ragtime::model::{EngineKind, Precision};
    let dir = tempfile::tempdir().unwrap();
    let _ = tiny(Arch::Llama, dir.path());
    for engine in [EngineKind::Auto, EngineKind::Reference] {
        let mut lm = Lm::load_on(dir.path(), DeviceKind::Cpu, engine, None).unwrap();
        lm.set_precision(Precision::F32).unwrap();
        let e = lm.set_precision(Precision::Bf16).unwrap_err().to_string();
        assert!(e.contains("--dtype bf16") && e.contains("computes in f32"), "{engine}: {e}");
    }
    let mut lm = Lm::load_on(dir.path(), DeviceKind::Cpu, EngineKind::Batched, None).unwrap();
    lm.set_precision(Precision::F16).unwrap();
    assert!(lm.engine().contains("f16"), "{}", lm.engine());
    let mut s = lm.session();
    s.prefill(&[5, 6, 7]).unwrap();
    assert!(s.logits().unwrap().iter().all(|x| x.is_finite()));
    drop(s);
    let e = lm.set_precision(Precision::Bf16).unwrap_err().to_string();
    assert!(e.contains("before the first sequence"), "{e}");
}
