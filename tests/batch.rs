//! Several questions through the model at once: `Lm::feed_many` and `ragtime eval --batch` (`rag::Batch`) must
//! give every sequence exactly, bit for bit, what it gets alone. The tiny random model carries 4-bit copies of
//! its weights (as a Q4_1 GGUF does), so decoding rows of several sequences share the integer products (the
//! two-vector kernels on an AVX2 CPU), while prefill chunks and attention stay per sequence.

mod common;

use common::{int8_feeds_equal_feeding_each_alone, same_steps, tiny_q4, Tiny};
use ragtime::detector::mlp::{LinearWeights, MlpConfig, MlpWeights};
use ragtime::detector::{Detector, DetectorInfo};
use ragtime::prompt::PromptBuilder;
use ragtime::query::QueryFormer;
use ragtime::rag::{Batch, LoopConfig, Outcome, RagLoop};
use ragtime::trigger::mlp::{MlpGate, MlpRule, MlpTrigger};
use ragtime::trigger::Trigger;

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

/// The same with `--int8-dot`, in chunks on either side of the engine's thresholds (32 rows, up to which a chunk
/// takes the integer products on AVX2 and AVX-512 CPUs, and 64, from which a chunk is multiplied where it is rather
/// than gathered with the others): 40 and 70 prompt tokens beside a decoding row, then three decoding rows, then 34
/// tokens beside two. Where the integer products take chunks of any length (AMX, or AMD's AVX-512 VNNI) the long
/// chunks go through them, gathered with other lanes' rows or alone; elsewhere through gemm. Either way each
/// sequence gets what it gets alone, bit for bit.
#[test]
fn feed_many_with_int8_dot_equals_feeding_each_alone() {
    let Some(mut lm) = tiny_q4(12) else { return };
    lm.int8_dot().unwrap();
    int8_feeds_equal_feeding_each_alone(&lm);
}

/// The same on K-quant blocks (Q4_K, and Q6_K for `v_proj` and `down_proj`, as in a Q4_K_M file): on an AVX2 CPU
/// without VNNI `--int8-dot` multiplies their superblock copies (`quant::superblocks`: one, two or four vectors per
/// pass, the decoding rows and the chunks of any length), and the tied head and the embedding's rows come from the
/// embedding's superblocks; elsewhere the row tiles or the plain copies.
#[test]
fn feed_many_on_k_quants_with_int8_dot_equals_feeding_each_alone() {
    let Some(mut lm) = common::small_k_quants(14) else { return };
    lm.int8_dot().unwrap();
    int8_feeds_equal_feeding_each_alone(&lm);
}

/// The same on Q5_0 and Q8_0 blocks (Q8_0 for the embedding, the tied head, `v_proj` and `down_proj`, as in
/// Qwen2.5-Coder-0.5B's file): on an AVX2 CPU without VNNI `--int8-dot` multiplies their quartet copies
/// (`quant::quartets`: 16-bit sums for Q5_0, 32-bit for Q8_0; one, two or four vectors per pass, the decoding rows
/// and the chunks of any length), and the embedding's rows come from the quartets; elsewhere the row tiles.
#[test]
fn feed_many_on_q5_q8_with_int8_dot_equals_feeding_each_alone() {
    let Some(mut lm) = common::small_q5_q8(15) else { return };
    lm.int8_dot().unwrap();
    int8_feeds_equal_feeding_each_alone(&lm);
}

/// A prefix copied from one session to another ([`ragtime::model::Session::copy_prefix_from`]) continues as the
/// original does after a rewind to it, on every engine: the same steps bit for bit from the same feeds. The copy
/// overwrites what the receiving session held (longer and shorter than the prefix), a copy of nothing empties
/// it, the source is left as it was, and a prefix longer than the source or a session of another model is refused.
#[test]
fn a_copied_prefix_continues_as_the_original() {
    let Some(lm2) = common::tiny_q4(9) else { return };
    let cfg = ragtime::model::ModelConfig::tiny(ragtime::model::Arch::Llama, 49152);
    let weights = common::Q4Weights::new(&cfg, 9);
    let prompt: Vec<u32> = (0..40).map(|i| (i * 977 + 13) % 49152).collect();
    let more: [u32; 3] = [7, 70, 700];
    use ragtime::model::EngineKind::{Auto, Batched, Reference};
    for kind in [Auto, Reference, Batched] {
        let lm = ragtime::model::Lm::from_source_on(
            &weights,
            cfg.clone(),
            common::tokenizer().unwrap(),
            "tiny-q4".into(),
            ragtime::device::DeviceKind::Cpu,
            kind,
        )
        .unwrap();
        let what = lm.engine();
        // the original: the prompt in one pass, rewound to 25 positions, then the rest and three single tokens
        let mut src = lm.session();
        src.prefill(&prompt).unwrap();
        let mut original = lm.session();
        original.prefill(&prompt).unwrap();
        original.truncate(25);
        let mut want = original.feed(&prompt[25..], 0).unwrap();
        for &id in &more {
            want.extend(original.feed(&[id], 0).unwrap());
        }
        // receivers holding more and fewer positions than the prefix
        for held in [60usize, 3] {
            let mut copy = lm.session();
            copy.prefill(&(0..held as u32).map(|i| i * 31 + 5).collect::<Vec<_>>()).unwrap();
            let before = copy.forward_tokens;
            copy.copy_prefix_from(&src, 25).unwrap();
            assert_eq!((copy.len(), copy.ids(), copy.forward_tokens), (25, &prompt[..25], before), "{what}");
            let mut got = copy.feed(&prompt[25..], 0).unwrap();
            for &id in &more {
                got.extend(copy.feed(&[id], 0).unwrap());
            }
            same_steps(&got, &want, &format!("{what}, receiver of {held} positions"));
            copy.copy_prefix_from(&src, 0).unwrap();
            assert!(copy.is_empty() && copy.ids().is_empty(), "{what}: a copy of nothing");
        }
        assert_eq!((src.len(), src.ids()), (prompt.len(), &prompt[..]), "{what}: the source is unchanged");
        let mut other = lm.session();
        assert!(other.copy_prefix_from(&src, prompt.len() + 1).is_err(), "{what}: more than the source holds");
        assert!(lm2.session().copy_prefix_from(&src, 5).is_err(), "{what}: a session of another model");
    }
}

fn corpus() -> Tiny {
    Tiny::from_texts(&[
        "Paris is the capital of France.",
        "Berlin is the capital of Germany.",
        "Madrid is in Spain.",
        "The Seine flows through Paris.",
    ])
}

fn italy_prompt() -> PromptBuilder {
    let exemplars =
        "Question: What is the capital of Italy?\nAnswer: Rome is the capital of Italy. So the answer is Rome.\n";
    PromptBuilder::new(ragtime::prompt::parse_exemplars(exemplars).unwrap())
}

/// Questions of different lengths (so lanes sit at different positions).
const QUESTIONS: [&str; 6] = [
    "What is the capital of France?",
    "Where is Madrid?",
    "What river flows through Paris?",
    "What is the capital of Germany?",
    "Who wrote Hamlet?",
    "Which river flows through the capital of France, and into which sea does it flow?",
];

/// What a [`Batch`] counted over a run.
struct Counts {
    /// Sequences fed, and forward passes.
    fed: usize,
    passes: usize,
    /// Few-shot prefixes (anchors) run by a pass of their own, and copied from lane to lane.
    anchor_passes: usize,
    anchor_copies: usize,
}

/// `questions` answered one after another in one session with one trigger (as `eval --batch 1`), and over
/// `lanes` lanes of a [`Batch`] with one trigger per lane (as `eval --batch B`), with the batch's counts.
fn sequential_and_batched(
    rag: &RagLoop<'_>,
    trigger: &dyn Fn() -> Box<dyn Trigger>,
    qf: &dyn QueryFormer,
    questions: &[&str],
    lanes: usize,
) -> (Vec<Outcome>, Vec<Outcome>, Counts) {
    let mut session = rag.lm.session();
    let mut t = trigger();
    let sequential: Vec<Outcome> =
        questions.iter().map(|q| rag.answer_in(&mut session, q, t.as_mut(), qf).unwrap()).collect();

    let batch = Batch::new(rag.lm, lanes);
    let triggers = (0..lanes).map(|_| trigger()).collect();
    let mut batched = vec![None; questions.len()];
    rag.answer_on_lanes(&batch, triggers, qf, questions.iter().copied(), |i, o| {
        batched[i] = Some(o?);
        Ok(())
    })
    .unwrap();
    let batched = batched.into_iter().map(|o| o.expect("every question answered")).collect();
    let counts = Counts {
        fed: batch.fed.get(),
        passes: batch.passes.get(),
        anchor_passes: batch.anchor_passes.get(),
        anchor_copies: batch.anchor_copies.get(),
    };
    (sequential, batched, counts)
}

/// A question's retrievals: token position, query and passage ids of each.
fn retrievals(o: &Outcome) -> Vec<(usize, String, Vec<String>)> {
    o.retrievals
        .iter()
        .map(|r| (r.token_pos, r.query.clone(), r.passages.iter().map(|p| p.id.clone()).collect()))
        .collect()
}

/// Everything the loop reports for a question, internals bit for bit, and its forward-token count (the few-shot
/// exemplars, encoded once per lane, are not counted, so it does not depend on the lane or on what came before).
fn same_outcome(a: &Outcome, b: &Outcome, what: &str) {
    assert_eq!(a.text, b.text, "{what}: text");
    assert_eq!(retrievals(a), retrievals(b), "{what}: retrieval positions, queries and passages");
    let scores = |o: &Outcome| o.scores.iter().map(|s| s.map(f32::to_bits)).collect::<Vec<_>>();
    assert_eq!(scores(a), scores(b), "{what}: trigger scores");
    same_steps(&a.tokens, &b.tokens, what);
    assert_eq!(a.generated_tokens, b.generated_tokens, "{what}: generated tokens");
    assert_eq!(a.forward_tokens, b.forward_tokens, "{what}: forward tokens");
    assert_eq!(a.loops_guarded, b.loops_guarded, "{what}: loops guarded");
}

/// The decode loop over three lanes answers five questions (with retrievals and KV-cache rewinds) exactly as
/// one session answering them in turn. The few-shot prefix runs once: the two other lanes copy it.
#[test]
fn batched_decode_loop_equals_one_question_at_a_time() {
    let Some(lm) = tiny_q4(5) else { return };
    let corpus = corpus();
    let prompt = italy_prompt();
    let rag = RagLoop {
        lm: &lm,
        prompt: &prompt,
        retriever: Some(&corpus),
        cfg: LoopConfig { max_new_tokens: 16, max_retrievals: 3, suffix_tokens: 4, ..LoopConfig::default() },
    };
    let qf = ragtime::query::build("last-tokens", &toml::toml! { n = 8 }.into()).unwrap();
    let trigger = || ragtime::trigger::build("fixed-length", &toml::toml! { n = 5 }.into()).unwrap();
    let (sequential, batched, n) = sequential_and_batched(&rag, &trigger, qf.as_ref(), &QUESTIONS[..5], 3);
    // decoding steps of several lanes did share passes
    assert!(n.fed > n.passes, "{} sequences in {} passes", n.fed, n.passes);
    assert_eq!((n.anchor_passes, n.anchor_copies), (1, 2), "the few-shot prefix: passes of its own, copies");
    for (i, (a, b)) in sequential.iter().zip(&batched).enumerate() {
        assert!(!a.retrievals.is_empty());
        same_outcome(a, b, &format!("question {i}"));
    }
}

/// A detector over the token's mean hidden state and entropy with seeded random weights (one hidden layer of
/// 8): its scores depend on every value of the hidden states.
fn random_detector(hidden: usize, seed: u64) -> Detector {
    let mut x = seed | 1;
    let mut layer = |d_in: usize, d_out: usize| {
        let scale = 2.0 / (d_in as f32).sqrt();
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
        };
        let weight = (0..d_in * d_out).map(|_| next()).collect();
        let bias = (0..d_out).map(|_| next()).collect();
        LinearWeights { d_in, d_out, weight, bias }
    };
    let layers = vec![layer(hidden + 1, 8), layer(8, 2)];
    let info = DetectorInfo {
        format: ragtime::detector::FORMAT.into(),
        model_id: "tiny-q4".into(),
        hidden,
        columns: vec![("hidden_mean_last".into(), hidden), ("entropy_last".into(), 1)],
        mlp: MlpConfig { input: hidden + 1, hidden_layers: vec![8], dropout: 0.0 },
        standardized: false,
        training: None,
        members: 1,
        ensemble: None,
    };
    Detector::new(info, MlpWeights { layers }, None).unwrap()
}

/// One controller of the loop: how to build its trigger (one per lane) and its query former.
struct Case {
    name: &'static str,
    trigger: Box<dyn Fn() -> Box<dyn Trigger>>,
    qf: Box<dyn QueryFormer>,
    /// Retrieves with the question before generating.
    initial: bool,
    /// Drops generated tokens when it retrieves (the lane's cache is rewound and the dropped tokens regenerated).
    drops: bool,
    /// Retrieves after some answer tokens were kept (the lane's cache is rewound into the answer, and the kept
    /// tokens are re-fed behind the new prompt).
    mid_answer: bool,
}

/// `expect`: `initial`, `drops`, `mid_answer`.
fn case(
    name: &'static str,
    trigger: &'static str,
    t: toml::Table,
    qf: &str,
    q: toml::Table,
    expect: [bool; 3],
) -> Case {
    let [initial, drops, mid_answer] = expect;
    let t = toml::Value::from(t);
    Case {
        name,
        trigger: Box::new(move || ragtime::trigger::build(trigger, &t).unwrap()),
        qf: ragtime::query::build(qf, &q.into()).unwrap(),
        initial,
        drops,
        mid_answer,
    }
}

/// Every token-level trigger `eval` runs, over six questions, with 8 lanes (more than questions) and with 4 (a
/// lane takes the next question while the others are mid-answer): the same text, retrieval positions, queries,
/// passages, trigger scores and captured internals as one question at a time. Thresholds are set so that each
/// retrieving trigger retrieves on the tiny random model (its entropies are near the maximum and its token
/// probabilities tiny), also while decoding, and the triggers that cut the answer at the flagged token drop
/// generated tokens (the lane's cache is rewound into the answer). The questions have different lengths, and
/// stop tokens end some answers early, so the lanes finish at different times. `mlp` runs a detector with
/// random weights over the hidden states (so its scores depend on every captured value). All of it with the loop
/// guard off (the papers' loop, which the checks of what each case went through are written for) and on: then
/// no retrieval repeats the one before it in place, and the guard accepts blocks of flare (its first draft
/// fires, and its masked query, every token below beta, is the question of its initial retrieval), rind
/// (paper), etc and mlp, never of the triggers that cannot fire twice at one place (none, single, fixed-length
/// and fixed-sentence keep every token; rind's code form accepts the sentence after a retrieval).
#[test]
fn every_trigger_batched_equals_one_question_at_a_time() {
    let Some(tokenizer) = stop_every_23rd() else { return };
    every_trigger(&common::tiny_q4_with(5, tokenizer), &same_outcome);
}

/// A tokenizer in which every 23rd token id ends an answer, so that the answers have different lengths.
fn stop_every_23rd() -> Option<ragtime::model::Tokenizer> {
    let mut tokenizer = common::tokenizer()?;
    tokenizer.stop_ids.extend((1..49152u32).filter(|i| i % 23 == 0));
    Some(tokenizer)
}

/// The same on the batched engine (lane buffers; what the GPU runs), on the CPU: one question at a time and
/// over lanes give the same text, retrieval positions, queries and passages, and internals and trigger scores
/// within f32 rounding (its passes run other shapes, so not bit for bit).
#[test]
fn every_trigger_on_the_batched_engine_over_lanes_equals_one_question_at_a_time() {
    batched_engine_every_trigger(ragtime::device::DeviceKind::Cpu);
}

/// The same on a GPU (`cargo test --release --test batch -- --ignored`): the batched engine on CUDA.
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_trigger_on_the_batched_engine_on_cuda_over_lanes_equals_one_question_at_a_time() {
    batched_engine_every_trigger(ragtime::device::DeviceKind::Cuda(0));
}

fn batched_engine_every_trigger(device: ragtime::device::DeviceKind) {
    let Some(tokenizer) = stop_every_23rd() else { return };
    let cfg = ragtime::model::ModelConfig::tiny(ragtime::model::Arch::Llama, 49152);
    let lm = ragtime::model::Lm::from_source_on(
        &common::Q4Weights::new(&cfg, 5),
        cfg,
        tokenizer,
        "tiny-q4".into(),
        device,
        ragtime::model::EngineKind::Batched,
    )
    .unwrap();
    assert!(lm.engine().starts_with("batched"));
    every_trigger(&lm, &close_outcome);
}

fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol || x.is_nan() && y.is_nan())
}

/// [`same_outcome`] within f32 rounding: the same tokens, text, retrievals and token counts; entropies,
/// probabilities, trigger scores and captured internals within 1e-4.
fn close_outcome(a: &Outcome, b: &Outcome, what: &str) {
    assert_eq!(a.text, b.text, "{what}: text");
    assert_eq!(retrievals(a), retrievals(b), "{what}: retrieval positions, queries and passages");
    let scores = |o: &Outcome| o.scores.iter().map(|s| s.unwrap_or(f32::NAN)).collect::<Vec<_>>();
    assert!(close(&scores(a), &scores(b), 1e-4), "{what}: trigger scores");
    assert_eq!(a.tokens.len(), b.tokens.len(), "{what}: step count");
    for (x, y) in a.tokens.iter().zip(&b.tokens) {
        assert_eq!((x.pos, x.id), (y.pos, y.id), "{what}");
        assert!(close(&[x.entropy, x.prob], &[y.entropy, y.prob], 1e-4), "{what}: entropy/prob at {}", x.pos);
        assert_eq!(x.attn.len(), y.attn.len(), "{what}: heads at {}", x.pos);
        assert!(x.attn.iter().zip(&y.attn).all(|(p, q)| close(p, q, 1e-4)), "{what}: attention at {}", x.pos);
        assert!(close(&x.hidden_final, &y.hidden_final, 1e-4), "{what}: hidden state at {}", x.pos);
        assert!(close(&x.hidden_mean, &y.hidden_mean, 1e-4), "{what}: mean hidden state at {}", x.pos);
    }
    assert_eq!(a.generated_tokens, b.generated_tokens, "{what}: generated tokens");
    assert_eq!(a.forward_tokens, b.forward_tokens, "{what}: forward tokens");
    assert_eq!(a.loops_guarded, b.loops_guarded, "{what}: retrievals the loop guard held back");
}

/// Runs every trigger's case on `lm`, one question at a time and over 8 and 4 lanes, comparing the outcomes
/// with `compare`, and checks that each case went through what it is meant to exercise.
fn every_trigger(lm: &ragtime::model::Lm, compare: &dyn Fn(&Outcome, &Outcome, &str)) {
    let corpus = corpus();
    let prompt = italy_prompt();
    let cfg = LoopConfig { max_new_tokens: 20, max_retrievals: 3, suffix_tokens: 0, ..LoopConfig::default() };
    let rag = RagLoop { lm, prompt: &prompt, retriever: Some(&corpus), cfg };
    let detector = random_detector(lm.config.hidden_size, 7);
    let gated = detector.clone();
    let sentence = |extra: toml::Table| {
        let mut t = toml::toml! { max_sentence_tokens = 6 };
        t.extend(extra);
        t
    };
    let qfs = || toml::toml! { top_n = 8 };
    // RaDIO's query former without GloVe (a machine with it installed would form other queries)
    let radio = || ragtime::query::build("radio", &toml::toml! { top_n = 8 glove = false }.into()).unwrap();
    let none = toml::Table::new;
    let cases = vec![
        case("none", "none", toml::toml! { lookahead = 8 }, "question", none(), [false; 3]),
        case("single", "single", toml::toml! { lookahead = 8 }, "question", none(), [true, false, false]),
        case(
            "fixed-length",
            "fixed-length",
            toml::toml! { n = 5 },
            "last-tokens",
            toml::toml! { n = 8 },
            [true, false, true],
        ),
        case("fixed-sentence", "fixed-sentence", sentence(none()), "last-sentence", none(), [true, false, true]),
        case(
            "flare",
            "flare",
            sentence(toml::toml! { theta = 0.023 }),
            "flare-masked",
            toml::toml! { with_question = true },
            [true, true, false],
        ),
        case("rind (paper)", "rind", sentence(toml::toml! { theta = 0.2 }), "qfs", qfs(), [false, true, true]),
        case(
            "rind (code)",
            "rind",
            toml::toml! { theta = 3.0
            variant = "code"
            lookahead = 6 },
            "qfs",
            qfs(),
            [false, true, false],
        ),
        case("etc (paper)", "etc", sentence(toml::toml! { alpha = 0.01 }), "qfs", qfs(), [false, true, true]),
        case(
            "etc (code)",
            "etc",
            sentence(toml::toml! { alpha = 0.001
            variant = "code" }),
            "qfs",
            qfs(),
            [false, true, true],
        ),
        Case {
            name: "mlp",
            trigger: Box::new(move || Box::new(MlpTrigger::new(detector.clone(), MlpRule::Threshold(0.59)))),
            qf: radio(),
            initial: false,
            drops: true,
            mid_answer: true,
        },
        Case {
            name: "mlp (content gate)",
            trigger: Box::new(move || {
                Box::new(MlpTrigger::new(gated.clone(), MlpRule::Threshold(0.59)).with_gate(MlpGate::Content))
            }),
            qf: radio(),
            initial: false,
            drops: true,
            mid_answer: true,
        },
    ];
    let covered: Vec<&str> = cases.iter().map(|c| c.name.split(' ').next().unwrap()).collect();
    for name in ragtime::trigger::NAMES {
        assert!(covered.contains(name), "trigger {name} is not covered");
    }
    let mut problems = Vec::new();
    let mut guarded = Vec::new();
    for c in &cases {
        for (loop_guard, lanes) in [(false, 8), (false, 4), (true, 8), (true, 4)] {
            let rag = RagLoop { cfg: LoopConfig { loop_guard, ..rag.cfg.clone() }, ..rag };
            let (sequential, batched, n) = sequential_and_batched(&rag, &c.trigger, c.qf.as_ref(), &QUESTIONS, lanes);
            assert!(n.fed > n.passes, "{}: {} sequences in {} passes", c.name, n.fed, n.passes);
            // the few-shot prefix ran once, and every other lane that took a question copied it
            let used = lanes.min(QUESTIONS.len());
            assert_eq!((n.anchor_passes, n.anchor_copies), (1, used - 1), "{}, {lanes} lanes: prefix", c.name);
            for (i, (a, b)) in sequential.iter().zip(&batched).enumerate() {
                compare(a, b, &format!("{}, {lanes} lanes, question {i}", c.name));
            }
            if lanes > 4 {
                continue;
            }
            if loop_guard {
                let in_place = |o: &Outcome| {
                    o.retrievals.windows(2).any(|w| (w[0].token_pos, &w[0].query) == (w[1].token_pos, &w[1].query))
                };
                if sequential.iter().any(in_place) {
                    problems.push(format!("{}: a retrieval repeated the one before it in place", c.name));
                }
                guarded.push((c.name, sequential.iter().map(|o| o.loops_guarded).collect::<Vec<_>>()));
                continue;
            }
            if sequential.iter().any(|o| o.loops_guarded > 0) {
                problems.push(format!("{}: guarded with the guard off", c.name));
            }
            // what the runs went through (the same for both lane counts)
            let mut check = |ok: bool, what: &str| {
                if !ok {
                    problems.push(format!(
                        "{}: {what}; retrievals at {:?}, answer lengths {:?}, generated {:?}",
                        c.name,
                        sequential
                            .iter()
                            .map(|o| o.retrievals.iter().map(|r| r.token_pos).collect())
                            .collect::<Vec<Vec<_>>>(),
                        sequential.iter().map(|o| o.tokens.len()).collect::<Vec<_>>(),
                        sequential.iter().map(|o| o.generated_tokens).collect::<Vec<_>>(),
                    ))
                }
            };
            let lengths: std::collections::BTreeSet<usize> = sequential.iter().map(|o| o.tokens.len()).collect();
            check(lengths.len() > 1, "the answers have one length");
            let retrievals: usize = sequential.iter().map(|o| o.retrievals.len()).sum();
            let while_decoding: usize =
                sequential.iter().map(|o| o.retrievals.len().saturating_sub(c.initial as usize)).sum();
            match c.name {
                "none" => check(retrievals == 0, "retrieved"),
                "single" => check(retrievals == QUESTIONS.len() && while_decoding == 0, "not one retrieval each"),
                _ => check(while_decoding > 0, "no retrieval while decoding"),
            }
            if c.initial {
                check(sequential.iter().all(|o| o.retrievals.first().is_some_and(|r| r.token_pos == 0)), "no initial");
            }
            if c.drops {
                // without an answer suffix, generated = kept + dropped + (a stop token)
                check(sequential.iter().any(|o| o.generated_tokens > o.tokens.len() + 1), "no token dropped");
            }
            if c.mid_answer {
                check(sequential.iter().any(|o| o.retrievals.iter().any(|r| r.token_pos > 0)), "none mid-answer");
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    for (name, g) in &guarded {
        let never = ["none", "single", "fixed-length", "fixed-sentence", "rind (code)"].contains(name);
        assert_eq!(g.iter().sum::<usize>() == 0, never, "{name}: loops guarded per question {g:?}");
    }
}

/// `Batch::run_slots`: slots of 2 lanes in a batch of 5 (2 slots; the fifth lane idle), 7 jobs of different
/// lengths. Every job runs once, on the state its slot's previous job handed back, feeding only its slot's first
/// lane; the other lanes are never fed; each used lane ends holding its slot's last job's tokens.
#[test]
fn run_slots_hands_each_slot_its_state_from_job_to_job() {
    use ragtime::rag::Decoder;
    let Some(lm) = tiny_q4(11) else { return };
    let batch = Batch::new(&lm, 5);
    let b = &batch;
    let ids_of = |job: usize| -> Vec<u32> { (0..2 + job % 3).map(|i| (job * 10 + i + 1) as u32).collect() };
    // a slot's state: its number and the jobs it ran, in order
    let states: Vec<(usize, Vec<usize>)> = (0..2).map(|k| (k, vec![])).collect();
    let mut outs: Vec<(usize, usize, Vec<usize>)> = Vec::new();
    batch
        .run_slots(
            2,
            states,
            0..7usize,
            |(k, mut ran), job| {
                Box::pin(async move {
                    let mut lane = b.lane(2 * k);
                    lane.truncate(0);
                    let ids = ids_of(job);
                    lane.feed(&ids, ids.len()).await.unwrap();
                    for _ in 0..job % 4 {
                        lane.feed(&[7], 0).await.unwrap(); // a few decoding steps: jobs of the two slots interleave
                    }
                    ran.push(job);
                    ((k, ran.clone()), (job, k, ran))
                })
            },
            |out| {
                outs.push(out);
                Ok(())
            },
        )
        .unwrap();
    let mut jobs: Vec<usize> = outs.iter().map(|o| o.0).collect();
    jobs.sort();
    assert_eq!(jobs, (0..7).collect::<Vec<_>>(), "every job once");
    for k in 0..2 {
        let mine: Vec<&(usize, usize, Vec<usize>)> = outs.iter().filter(|o| o.1 == k).collect();
        assert!(!mine.is_empty(), "slot {k} ran jobs");
        for (i, (job, _, ran)) in mine.iter().enumerate() {
            let before: &[usize] = if i == 0 { &[] } else { &mine[i - 1].2 };
            assert_eq!(ran[..ran.len() - 1], *before, "slot {k}: job {job} got the state its previous job left");
            assert_eq!(ran.last(), Some(job));
        }
        let last = mine.last().unwrap().0;
        assert_eq!(b.lane(2 * k).len(), ids_of(last).len() + last % 4, "slot {k}'s lane holds its last job");
    }
    for idle in [1, 3, 4] {
        assert_eq!(b.lane(idle).len(), 0, "lane {idle} is not a slot's first lane");
    }
    let feeds: usize = (0..7).map(|job| 1 + job % 4).sum();
    assert!(batch.passes.get() < feeds, "the slots' feeds shared passes: {} for {feeds}", batch.passes.get());
}
