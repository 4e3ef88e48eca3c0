//! Several questions through the model at once: `Lm::feed_many` and `ragtime eval --batch` (`rag::Batch`) must
//! give every sequence exactly, bit for bit, what it gets alone. The tiny random model carries 4-bit copies of
//! its weights (as a Q4_1 GGUF does), so decoding rows of several sequences share the integer products (the
//! two-vector kernels on an AVX2 CPU), while prefill chunks and attention stay per sequence.

use std::collections::HashMap;

use anyhow::Result;
use candle_core::quantized::{GgmlDType, QTensor};
use ragtime::device::DeviceKind;
use ragtime::model::quant::QMatrix;
use ragtime::model::weights::{HostTensor, WeightSource};
use ragtime::model::{random_weights, Arch, Lm, ModelConfig, Tokenizer};
use ragtime::prompt::PromptBuilder;
use ragtime::rag::{Batch, LoopConfig, RagLoop};
use ragtime::retrieval::{Passage, Retriever};
use ragtime::step::TokenStep;

/// Random weights stored as Q4_1 blocks: `tensor` gives the de-quantized values, `quantized` the blocks.
struct Q4Weights(HashMap<String, HostTensor>, HashMap<String, QMatrix>);

impl Q4Weights {
    fn new(cfg: &ModelConfig, seed: u64) -> Self {
        let mut f32s = HashMap::new();
        let mut blocks = HashMap::new();
        for (name, t) in random_weights(cfg, seed) {
            if t.shape.len() == 2 && t.shape[1] % 32 == 0 {
                let (rows, cols) = (t.shape[0], t.shape[1]);
                let ct =
                    candle_core::Tensor::from_vec(t.data.clone(), (rows, cols), &candle_core::Device::Cpu).unwrap();
                let q = QTensor::quantize(&ct, GgmlDType::Q4_1).unwrap();
                let m = QMatrix::from_ggml(GgmlDType::Q4_1, &q.data().unwrap(), rows, cols).unwrap();
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

fn tokenizer() -> Option<Tokenizer> {
    Some(Tokenizer::from_file(&ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json")?).unwrap())
}

fn tiny_q4(seed: u64) -> Option<Lm> {
    let cfg = ModelConfig::tiny(Arch::Llama, 49152);
    let lm =
        Lm::from_source(&Q4Weights::new(&cfg, seed), cfg, tokenizer()?, "tiny-q4".into(), DeviceKind::Cpu).unwrap();
    assert!(lm.int8_decode_bytes > 0, "the tiny model decodes on integer weights");
    Some(lm)
}

fn same_steps(a: &[TokenStep], b: &[TokenStep], what: &str) {
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

/// Three sessions at different lengths, fed together: a prefill chunk beside two single tokens, then three
/// single tokens (two share a two-vector pass, the third goes alone), then a rewind and an empty feed. Each
/// gets what feeding it alone gives.
#[test]
fn feed_many_equals_feeding_each_alone() {
    let Some(lm) = tiny_q4(11) else { return };
    let prompts: [&[u32]; 3] = [&[1, 20, 300, 4000, 5], &[9, 8, 7], &[100, 200, 300, 400, 500, 600, 700, 800]];
    let mut together: Vec<_> = prompts.iter().map(|_| lm.session()).collect();
    let mut alone: Vec<_> = prompts.iter().map(|_| lm.session()).collect();
    for (s, p) in together.iter_mut().zip(prompts) {
        s.prefill(&p[..2]).unwrap();
    }
    for (s, p) in alone.iter_mut().zip(prompts) {
        s.prefill(&p[..2]).unwrap();
    }
    let rounds: Vec<[(Vec<u32>, usize); 3]> = vec![
        // a long chunk (prefill path) beside two decoding rows
        [(prompts[0][2..].to_vec(), 0), (vec![prompts[1][2]], 0), (prompts[2][2..].to_vec(), 3)],
        [(vec![42], 0), (vec![43], 0), (vec![44], 0)],
        [(vec![45, 46], 1), (vec![], 0), (vec![47], 0)],
    ];
    for (r, round) in rounds.iter().enumerate() {
        let ids: Vec<&[u32]> = round.iter().map(|(i, _)| i.as_slice()).collect();
        let from: Vec<usize> = round.iter().map(|(_, f)| *f).collect();
        let mut refs: Vec<&mut ragtime::model::Session<'_>> = together.iter_mut().collect();
        let got = lm.feed_many(&mut refs, &ids, &from).unwrap();
        for (i, ((ids, f), s)) in round.iter().zip(alone.iter_mut()).enumerate() {
            let want = s.feed(ids, *f).unwrap();
            same_steps(&got[i], &want, &format!("round {r}, sequence {i}"));
            let (a, b) = (together[i].logits().unwrap(), s.logits().unwrap());
            assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "round {r}, sequence {i}: next-token logits"
            );
            assert_eq!(together[i].forward_tokens, s.forward_tokens);
        }
        if r == 1 {
            together[0].truncate(4);
            alone[0].truncate(4);
        }
    }
}

/// Word-overlap retrieval over a few passages.
struct Tiny(Vec<Passage>);

impl Retriever for Tiny {
    fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>> {
        let q: Vec<String> = query.split_whitespace().map(|w| w.to_lowercase()).collect();
        let mut hits: Vec<Passage> = self
            .0
            .iter()
            .map(|p| Passage {
                score: p.text.split_whitespace().filter(|w| q.contains(&w.to_lowercase())).count() as f32,
                ..p.clone()
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.truncate(k);
        Ok(hits)
    }
}

/// The decode loop over three lanes answers five questions (with retrievals and KV-cache rewinds) exactly as
/// one session answering them in turn.
#[test]
fn batched_decode_loop_equals_one_question_at_a_time() {
    let Some(lm) = tiny_q4(5) else { return };
    let corpus = Tiny(
        [
            "Paris is the capital of France.",
            "Berlin is the capital of Germany.",
            "Madrid is in Spain.",
            "The Seine flows through Paris.",
        ]
        .iter()
        .enumerate()
        .map(|(i, t)| Passage { id: i.to_string(), title: format!("doc {i}"), text: t.to_string(), score: 0.0 })
        .collect(),
    );
    let exemplars =
        "Question: What is the capital of Italy?\nAnswer: Rome is the capital of Italy. So the answer is Rome.\n";
    let prompt = PromptBuilder::new(ragtime::prompt::parse_exemplars(exemplars).unwrap());
    let rag = RagLoop {
        lm: &lm,
        prompt: &prompt,
        retriever: Some(&corpus),
        cfg: LoopConfig { max_new_tokens: 16, max_retrievals: 3, suffix_tokens: 4, ..LoopConfig::default() },
    };
    let qf = ragtime::query::build("last-tokens", &toml::toml! { n = 8 }.into()).unwrap();
    let trigger = || ragtime::trigger::build("fixed-length", &toml::toml! { n = 5 }.into()).unwrap();
    let questions = [
        "What is the capital of France?",
        "Where is Madrid?",
        "What river flows through Paris?",
        "What is the capital of Germany?",
        "Who wrote Hamlet?",
    ];

    let mut session = lm.session();
    let sequential: Vec<_> =
        questions.iter().map(|q| rag.answer_in(&mut session, q, trigger().as_mut(), qf.as_ref()).unwrap()).collect();

    let batch = Batch::new(&lm, 3);
    let triggers: Vec<_> = (0..3).map(|_| std::cell::Cell::new(Some(trigger()))).collect();
    let mut queue = questions.iter().enumerate();
    let mut batched = vec![None; questions.len()];
    let (rag, qf, triggers) = (&rag, qf.as_ref(), &triggers);
    batch
        .run(
            |lane| {
                let (i, q) = queue.next()?;
                let mut d = batch.lane(lane);
                Some(Box::pin(async move {
                    let mut t = triggers[lane].take().expect("one question per lane at a time");
                    let o = rag.answer_with(&mut d, q, t.as_mut(), qf).await;
                    triggers[lane].set(Some(t));
                    (i, o)
                }))
            },
            |(i, o)| {
                batched[i] = Some(o?);
                Ok(())
            },
        )
        .unwrap();
    // decoding steps of several lanes did share passes
    assert!(batch.fed.get() > batch.passes.get(), "{} sequences in {} passes", batch.fed.get(), batch.passes.get());
    for (i, (a, b)) in sequential.iter().zip(&batched).enumerate() {
        let b = b.as_ref().unwrap();
        assert!(!a.retrievals.is_empty());
        assert_eq!(a.text, b.text, "question {i}");
        assert_eq!(
            a.retrievals.iter().map(|r| (r.token_pos, r.query.clone())).collect::<Vec<_>>(),
            b.retrievals.iter().map(|r| (r.token_pos, r.query.clone())).collect::<Vec<_>>()
        );
        assert_eq!(
            a.scores.iter().map(|s| s.map(f32::to_bits)).collect::<Vec<_>>(),
            b.scores.iter().map(|s| s.map(f32::to_bits)).collect::<Vec<_>>()
        );
        same_steps(&a.tokens, &b.tokens, &format!("question {i}"));
        assert_eq!(a.generated_tokens, b.generated_tokens);
    }
}
