//! Auto-RAG's loops end to end on a tiny random model and a tiny corpus: Algorithm 2 (inference) must retrieve
//! T times with new passages each time, feed them back as document turns, force an answer, and reuse the cached
//! exemplar prefix across questions; Algorithm 1 (synthesis) must pick candidates by the sub-answer filter and
//! record the attempt in a resumable store.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

mod common;

use common::{model_args, ok, tiny_eval, Tiny};
use ragtime::autorag::filter::SubAnswer;
use ragtime::autorag::infer::{AutoRag, ChatGen, InferConfig};
use ragtime::autorag::prompts::AutoRagPrompts;
use ragtime::autorag::synth::{DialogueStore, SynthConfig, Synthesizer};
use ragtime::device::DeviceKind;
use ragtime::model::{random_weights, Arch, Lm, MemoryWeights, ModelConfig, Tokenizer};
use ragtime::qa::{AnswerKind, Example};
use ragtime::retrieval::Passage;

fn tiny_lm(max_pos: usize) -> Option<Lm> {
    let mut cfg = ModelConfig::tiny(Arch::Llama, 49152);
    cfg.max_position_embeddings = max_pos;
    let tok = Tokenizer::from_file(&ragtime::testing::require("models/smollm2-135m-instruct/tokenizer.json")?).unwrap();
    let w = MemoryWeights(random_weights(&cfg, 11).into_iter().collect::<HashMap<_, _>>());
    Some(Lm::from_source(&w, cfg, tok, "tiny".into(), DeviceKind::Cpu).unwrap())
}

fn corpus() -> Tiny {
    Tiny(
        [
            "Paris is the capital of France.",
            "Berlin is the capital of Germany.",
            "The Seine flows through Paris.",
            "Rome is in Italy.",
        ]
        .iter()
        .enumerate()
        .map(|(i, t)| Passage { id: i.to_string(), title: format!("doc {i}"), text: t.to_string(), score: 0.0 })
        .collect(),
        Mutex::new(vec![]),
    )
}

#[test]
fn algorithm2_retrieves_new_passages_and_forces_an_answer() {
    let Some(lm) = tiny_lm(2048) else { return };
    let corpus = corpus();
    let prompts = AutoRagPrompts::load(&AutoRagPrompts::default_dir(), "nq").unwrap();
    let cfg = InferConfig {
        max_iter: 2,
        max_pk: 2,
        top_k: 1,
        max_new_tokens: 6,
        answer_tokens: 4,
        fewshot: true,
        ..InferConfig::default()
    };
    let rag = AutoRag { lm: &lm, retriever: &corpus, prompts: &prompts, cfg };
    let mut main = ChatGen::new(&lm);
    let mut aux = ChatGen::new(&lm);
    let a = rag.answer(&mut main, &mut aux, "What is the capital of France?").unwrap();
    assert!(!a.context_full);
    // the random model never writes "Final Answer:": T retrievals, then a forced answer
    assert_eq!(a.retrievals.len(), 2);
    assert!(a.forced);
    // it writes no query either, so the question is the query (as the authors' code), and each retrieval brings
    // one passage not shown before
    assert!(a
        .retrievals
        .iter()
        .all(|r| r.query == "What is the capital of France?" && !r.pseudo && r.passages.len() == 1));
    let ids: HashSet<&str> = a.retrievals.iter().map(|r| r.passages[0].id.as_str()).collect();
    assert_eq!(ids.len(), 2);
    // the tiny retriever saw the query once per retrieval (search_excluding asks for k + shown passages)
    assert_eq!(corpus.1.lock().unwrap().len(), 2);
    // turns: x_0 question, x_1, x_2 documents; the last output ends with the forced final answer
    assert_eq!(a.turns.len(), 3);
    assert_eq!(a.turns[0].input, "Question: What is the capital of France?");
    assert!(a.turns[1].input.starts_with("Retrieved Document_1: (Title: doc "));
    assert!(a.turns[2].input.starts_with("Retrieved Document_2: "));
    assert!(a.turns[2].output.contains("Final Answer:"), "{:?}", a.turns[2].output);
    assert!(a.generated_tokens > 0 && a.generated_tokens <= 3 * 6 + 4);
    // a second question reuses the cached system prompt + exemplars; the exemplars' own pass (the first question
    // ran it) counts for neither question, so a question's count does not depend on what ran before it
    let raw = |main: &ChatGen<'_>, aux: &ChatGen<'_>| main.decoder.forward_tokens + aux.decoder.forward_tokens;
    let raw_a = raw(&main, &aux);
    let b = rag.answer(&mut main, &mut aux, "What is the capital of Germany?").unwrap();
    assert_eq!(b.forward_tokens, raw(&main, &aux) - raw_a, "no exemplar pass in the second question");
    let prefix = lm
        .tokenizer
        .encode(
            &lm.tokenizer.apply_chat_template(
                &ragtime::autorag::prompts::dialogue_messages(
                    Some(ragtime::autorag::prompts::SYSTEM_PROMPT),
                    &prompts.fewshot_messages(),
                    &[],
                ),
                false,
            ),
            true,
        )
        .unwrap()
        .len();
    assert!(prefix > 200, "exemplar prefix {prefix} tokens");
    // the first question ran the exemplar passes (the main and the query model's anchors) beside what it counts
    assert!(raw_a >= a.forward_tokens + prefix, "ran {raw_a}, counted {}, prefix {prefix}", a.forward_tokens);
    // the same question in a fresh session gives the same dialogue (cache reuse changes nothing)
    let mut fresh = ChatGen::new(&lm);
    let mut fresh_aux = ChatGen::new(&lm);
    let c = rag.answer(&mut fresh, &mut fresh_aux, "What is the capital of Germany?").unwrap();
    assert_eq!(b.turns, c.turns);
    assert_eq!(b.answer, c.answer);
}

/// `eval --trigger autorag --batch B`: questions answered on the lanes of a batch (two lanes per question slot,
/// slots refilled as questions finish) give the dialogues, retrievals and traces of one question at a time.
#[test]
fn algorithm2_on_batch_lanes_equals_one_question_at_a_time() {
    use std::cell::{Cell, RefCell};
    let Some(lm) = tiny_lm(2048) else { return };
    let corpus = corpus();
    let prompts = AutoRagPrompts::load(&AutoRagPrompts::default_dir(), "nq").unwrap();
    let cfg = InferConfig {
        max_iter: 2,
        max_pk: 1,
        top_k: 1,
        max_new_tokens: 5,
        answer_tokens: 3,
        fewshot: true,
        ..InferConfig::default()
    };
    let rag = AutoRag { lm: &lm, retriever: &corpus, prompts: &prompts, cfg };
    let questions = [
        "What is the capital of France?",
        "Where does the Seine flow?",
        "Is Rome in Italy?",
        "What is the capital of Germany?",
        "Name a river.",
    ];
    let (mut main, mut aux) = (ChatGen::new(&lm), ChatGen::new(&lm));
    let one_by_one: Vec<_> = questions
        .iter()
        .map(|q| {
            let o = rag.answer(&mut main, &mut aux, q).unwrap();
            (o, std::mem::take(&mut main.trace))
        })
        .collect();

    let slots = 2;
    let batch = ragtime::rag::Batch::new(&lm, 2 * slots);
    let gens: Vec<_> = (0..slots)
        .map(|k| Cell::new(Some((ChatGen::on(&lm, batch.lane(2 * k)), ChatGen::on(&lm, batch.lane(2 * k + 1))))))
        .collect();
    let results = RefCell::new(vec![None; questions.len()]);
    let mut queue = questions.iter().enumerate();
    let (rag, gens) = (&rag, &gens);
    batch
        .run(
            |lane| {
                if lane % 2 == 1 {
                    return None;
                }
                let (i, q) = queue.next()?;
                Some(Box::pin(async move {
                    let (mut m, mut a) = gens[lane / 2].take().unwrap();
                    let o = rag.answer_with(&mut m, &mut a, q).await.unwrap();
                    let trace = std::mem::take(&mut m.trace);
                    gens[lane / 2].set(Some((m, a)));
                    (i, o, trace)
                }))
            },
            |(i, o, trace)| {
                results.borrow_mut()[i] = Some((o, trace));
                Ok(())
            },
        )
        .unwrap();
    assert!(batch.fed.get() > batch.passes.get(), "the slots shared forward passes");
    for (i, (r, (o, trace))) in results.into_inner().into_iter().zip(&one_by_one).enumerate() {
        let (b, btrace) = r.expect("every question answered");
        assert_eq!(b.turns, o.turns, "question {i}");
        assert_eq!((&b.answer, b.forced, b.generated_tokens), (&o.answer, o.forced, o.generated_tokens));
        let retrievals = |x: &ragtime::autorag::infer::InferOutcome| -> Vec<(usize, String, Vec<String>)> {
            x.retrievals
                .iter()
                .map(|r| (r.token_pos, r.query.clone(), r.passages.iter().map(|p| p.id.clone()).collect()))
                .collect()
        };
        assert_eq!(retrievals(&b), retrievals(o), "question {i}");
        // the entropies of every generated token, bit for bit
        assert_eq!(btrace, *trace, "question {i}");
    }
}

/// The command: `eval --trigger autorag --batch 3` writes the records of `--batch 1`, in question order (all but the
/// timings).
#[test]
fn eval_autorag_on_lanes_writes_the_records_of_one_at_a_time() {
    let Some(s) = tiny_eval() else { return };
    let run = |batch: &str| {
        let out = s.root.join(format!("autorag-b{batch}"));
        let mut args: Vec<String> = ["eval", "--trigger", "autorag", "--batch", batch, "--max-new-tokens", "6"]
            .iter()
            .map(|x| x.to_string())
            .collect();
        args.extend(model_args(&s));
        args.extend(["--set", "autorag.max_iter=2", "--out", out.to_str().unwrap()].map(String::from));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&argv);
        let mut recs: Vec<serde_json::Value> = std::fs::read_to_string(out.join("predictions.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for r in &mut recs {
            r.as_object_mut().unwrap().remove("seconds");
            // the first question of each slot also encodes the exemplars
            r.as_object_mut().unwrap().remove("forward_tokens");
        }
        recs
    };
    let (one, lanes) = (run("1"), run("3"));
    assert_eq!(one.len(), 6);
    assert!(one.iter().all(|r| !r["retrievals"].as_array().unwrap().is_empty()), "the tiny model retrieves");
    assert_eq!(one, lanes);
}

/// `synth autorag --batch 3` (one model: teacher and query lanes) writes the attempts and dialogues of `--batch 1`,
/// in the same order (all but the timings); with rejection sampling, so that lanes run several samples, and with
/// greedy and sampled reasoning turns (the queries are always sampled: each lane's tokens are picked beside the
/// other lanes', with its own sampler).
#[test]
fn synth_autorag_on_lanes_writes_what_one_session_writes() {
    let Some(s) = tiny_eval() else { return };
    let run = |batch: &str, temperature: &str| {
        let out = s.root.join(format!("synth-b{batch}-t{temperature}"));
        let mut args: Vec<String> =
            ["synth", "autorag", "--batch", batch, "--max-iter", "2", "--candidates", "2", "--samples", "2"]
                .iter()
                .map(|x| x.to_string())
                .collect();
        args.extend(model_args(&s));
        args.extend(["--set".into(), format!("synth.reasoning_temperature={temperature}")]);
        args.extend(["--out", out.to_str().unwrap()].map(String::from));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&argv);
        let lines = |f: &str| -> Vec<serde_json::Value> {
            std::fs::read_to_string(out.join(f))
                .unwrap_or_default()
                .lines()
                .map(|l| {
                    let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                    v.as_object_mut().unwrap().remove("seconds");
                    v
                })
                .collect()
        };
        (lines("attempts.jsonl"), lines("dialogues.jsonl"))
    };
    let mut reasoning = Vec::new();
    for temperature in ["0.0", "0.7"] {
        let (one, lanes) = (run("1", temperature), run("3", temperature));
        assert_eq!(one.0.len(), 6, "reasoning temperature {temperature}");
        assert!(one.0.iter().any(|a| !a["queries"].as_array().unwrap().is_empty()), "{:?}", one.0);
        assert_eq!(one, lanes, "reasoning temperature {temperature}");
        reasoning.push(one.0);
    }
    assert_ne!(reasoning[0], reasoning[1], "sampled reasoning makes other attempts than greedy");
}

#[test]
fn algorithm2_context_full_ends_cleanly() {
    let Some(lm) = tiny_lm(300) else { return }; // the exemplar prefix alone is longer
    let corpus = corpus();
    let prompts = AutoRagPrompts::load(&AutoRagPrompts::default_dir(), "nq").unwrap();
    let rag = AutoRag {
        lm: &lm,
        retriever: &corpus,
        prompts: &prompts,
        cfg: InferConfig { max_iter: 2, max_new_tokens: 6, fewshot: true, ..InferConfig::default() },
    };
    let a = rag.answer(&mut ChatGen::new(&lm), &mut ChatGen::new(&lm), "Where is Paris?").unwrap();
    assert!(a.context_full);
    assert_eq!(a.answer, "");
    assert!(a.retrievals.is_empty());
    assert_eq!(a.generated_tokens, 0);
}

#[test]
fn algorithm1_filters_candidates_and_records_attempts() {
    let Some(lm) = tiny_lm(2048) else { return };
    let corpus = corpus();
    let prompts = AutoRagPrompts::load(&AutoRagPrompts::default_dir(), "nq").unwrap();
    let ex = Example {
        id: "q1".into(),
        question: "What is the capital of France?".into(),
        answers: vec!["Paris".into()],
        kind: AnswerKind::Span,
        supporting: vec![],
        contexts: vec![],
        entries: vec![],
    };
    // k = 4: every candidate retrieves the whole corpus at t = 1, which holds "Paris": the first candidate is
    // chosen for its sub-answer
    let cfg = SynthConfig {
        max_iter: 2,
        candidates: 2,
        top_k: 4,
        max_new_tokens: 6,
        query_tokens: 6,
        answer_tokens: 4,
        reasoning: "nq".into(),
        ..SynthConfig::default()
    };
    let synth = Synthesizer { retriever: &corpus, prompts: &prompts, cfg, dataset: "tiny".into() };
    let mut tgen = ChatGen::new(&lm);
    let mut qgen = ChatGen::new(&lm);
    let (a, d) = synth.synthesize(&mut tgen, &mut qgen, &ex).unwrap();
    assert!(a.iterations >= 1 && a.iterations <= 2, "{a:?}");
    assert_eq!(a.queries.len(), a.iterations);
    assert_eq!(a.sub_answers[0], Some(SubAnswer::Answer));
    // every passage was shown at t = 1, so a second iteration would find nothing new
    assert!(
        ["kept", "wrong_answer", "no_answer", "malformed_query", "repeated_query", "empty_reasoning"]
            .contains(&a.reason.as_str()),
        "{}",
        a.reason
    );
    assert_eq!(a.dialogue_count(), d.len());
    assert!(d.len() <= 1);
    assert!(a.generated_tokens > 0);
    // synthesis is deterministic per question (seeded by the config seed and the id): a resumed run redoes it
    // identically
    let (a2, _) = synth.synthesize(&mut ChatGen::new(&lm), &mut ChatGen::new(&lm), &ex).unwrap();
    assert_eq!((a2.queries, a2.final_answer, a2.reason), (a.queries.clone(), a.final_answer.clone(), a.reason.clone()));
    // rejection sampling: sample 0 is the sample above; a question is sampled until one passes, at most 3 times,
    // and the attempt counts the tokens of every sample
    let three = Synthesizer { cfg: SynthConfig { samples: 3, ..synth.cfg.clone() }, ..synth };
    let (r, rd) = three.synthesize(&mut ChatGen::new(&lm), &mut ChatGen::new(&lm), &ex).unwrap();
    assert_eq!(r.dialogue_count(), rd.len());
    assert!(rd.len() <= 1);
    assert!(r.samples >= 1 && r.samples <= 3 && r.sample + 1 == r.samples, "{r:?}");
    assert!(r.kept || r.samples == 3, "a rejected question is sampled 3 times: {r:?}");
    // the samples before the recorded one are recorded by why they were dropped
    assert_eq!(r.rejected.len(), r.samples - 1, "{r:?}");
    assert!(r.rejected.iter().all(|why| why != "kept"), "{r:?}");
    if !a.kept {
        assert_eq!(r.rejected[0], a.reason, "sample 0's reason first: {r:?}");
    }
    if a.kept {
        assert_eq!((r.samples, &r.queries), (1, &a.queries), "sample 0 passed: no second sample");
    } else {
        assert!(r.generated_tokens > a.generated_tokens, "tokens of all samples: {r:?}");
    }
    // recorded and resumed
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"test": 1});
    let mut store = DialogueStore::open(dir.path(), &config).unwrap();
    store.record(&a, &d).unwrap();
    drop(store);
    let store = DialogueStore::open(dir.path(), &config).unwrap();
    assert!(store.is_done("q1"));
    let stats = store.finish().unwrap();
    assert_eq!(stats.tried, 1);
    assert_eq!(stats.kept, a.kept as usize);
}
