//! End to end on a tiny random model and a tiny corpus: a fixed-length trigger must retrieve during decoding,
//! the prompt is rebuilt with the documents, and the KV cache is rewound to the shared prefix rather than
//! re-encoding everything; the loop guard stops a trigger from retrieving again and again in place.

use std::collections::HashMap;

mod common;

use common::Tiny;
use ragtime::device::DeviceKind;
use ragtime::model::{random_weights, Arch, Lm, MemoryWeights, ModelConfig, Tokenizer};
use ragtime::prompt::PromptBuilder;
use ragtime::query::QueryFormer;
use ragtime::rag::{LoopConfig, Outcome, RagLoop};
use ragtime::trigger::{Decision, GenView, Judgement, Lookahead, Trigger};

/// One exemplar in DRAGIN's layout.
fn italy_prompt() -> PromptBuilder {
    let exemplars =
        "Question: What is the capital of Italy?\nAnswer: Rome is the capital of Italy. So the answer is Rome.\n";
    PromptBuilder::new(ragtime::prompt::parse_exemplars(exemplars).unwrap())
}

/// A tiny random Llama (seed 3) and a three-passage corpus.
fn tiny_and_corpus(tok: Tokenizer) -> (Lm, Tiny) {
    let cfg = ModelConfig::tiny(Arch::Llama, 49152);
    let w = MemoryWeights(random_weights(&cfg, 3).into_iter().collect::<HashMap<_, _>>());
    let lm = Lm::from_source(&w, cfg, tok, "tiny".into(), DeviceKind::Cpu).unwrap();
    let corpus = Tiny::from_texts(&[
        "Paris is the capital of France.",
        "Berlin is the capital of Germany.",
        "The Seine flows through Paris.",
    ]);
    (lm, corpus)
}

#[test]
fn fixed_length_retrieves_and_rewinds() {
    let tok = Tokenizer::from_file(&ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json")).unwrap();
    let (lm, corpus) = tiny_and_corpus(tok);
    let prompt = italy_prompt();
    let rag = RagLoop {
        lm: &lm,
        prompt: &prompt,
        retriever: Some(&corpus),
        cfg: LoopConfig { max_new_tokens: 24, max_retrievals: 2, suffix_tokens: 0, ..LoopConfig::default() },
    };
    let mut trigger = ragtime::trigger::build("fixed-length", &toml::toml! { n = 8 }.into()).unwrap();
    let qf = ragtime::query::build("last-tokens", &toml::toml! { n = 8 }.into()).unwrap();
    let out = rag.answer("What is the capital of France?", trigger.as_mut(), qf.as_ref()).unwrap();

    // retrieved during decoding, up to the cap, with queries built from generated text
    assert_eq!(out.retrievals.len(), 2, "{:?}", out.retrievals.iter().map(|r| r.token_pos).collect::<Vec<_>>());
    // FL-RAG retrieves with the question first, then every n = 8 tokens: at token 8
    let positions: Vec<usize> = out.retrievals.iter().map(|r| r.token_pos).collect();
    assert_eq!(positions, vec![0, 8]);
    assert!(out.retrievals.iter().all(|r| r.passages.len() == 3));
    assert_eq!(corpus.1.lock().unwrap().len(), 2);
    assert_eq!(out.tokens.len(), 24);
    assert_eq!(out.scores.len(), out.tokens.len());
    // answer tokens are contiguous and every one was re-fed / decoded under the current prompt
    for w in out.tokens.windows(2) {
        assert_eq!(w[1].pos, w[0].pos + 1);
    }
    // rewind: the exemplar prefix is encoded once (in a pass not counted for the question, see `forward_tokens`),
    // so forward tokens are fewer than re-encoding three prompts, and at least the final prompt past the
    // exemplars plus the answer
    let prefix = lm.tokenizer.encode(prompt.shared_prefix(), true).unwrap().len() - 1;
    let last_prompt = out.tokens[0].pos; // tokens before the answer in the final prompt
    assert!(prefix > 10);
    assert!(
        out.forward_tokens < 3 * (last_prompt - prefix),
        "forward tokens {} should be below three prompts past the exemplars ({} each)",
        out.forward_tokens,
        last_prompt - prefix
    );
    assert!(out.forward_tokens >= last_prompt - prefix + out.tokens.len());
}

/// A run reuses one session across questions: the few-shot prefix is encoded once, and every answer equals the
/// one a fresh session gives, bit for bit.
#[test]
fn session_reuse_across_questions_equals_fresh_sessions() {
    let cfg = ModelConfig::tiny(Arch::Llama, 49152);
    let tok = Tokenizer::from_file(&ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json")).unwrap();
    let w = MemoryWeights(random_weights(&cfg, 5).into_iter().collect::<HashMap<_, _>>());
    let lm = Lm::from_source(&w, cfg, tok, "tiny".into(), DeviceKind::Cpu).unwrap();
    let corpus = Tiny::from_texts(&["Paris is the capital of France.", "Berlin is the capital of Germany."]);
    let prompt = italy_prompt();
    let rag = RagLoop {
        lm: &lm,
        prompt: &prompt,
        retriever: Some(&corpus),
        cfg: LoopConfig { max_new_tokens: 12, max_retrievals: 2, suffix_tokens: 0, ..LoopConfig::default() },
    };
    let qf = ragtime::query::build("last-tokens", &toml::toml! { n = 8 }.into()).unwrap();
    let questions =
        ["What is the capital of France?", "What is the capital of Germany?", "What is the capital of France?"];
    let mut shared = lm.session();
    let mut reused_forward = 0;
    let mut fresh_forward = 0;
    for q in questions {
        let mut t1 = ragtime::trigger::build("fixed-length", &toml::toml! { n = 5 }.into()).unwrap();
        let mut t2 = ragtime::trigger::build("fixed-length", &toml::toml! { n = 5 }.into()).unwrap();
        let a = rag.answer_in(&mut shared, q, t1.as_mut(), qf.as_ref()).unwrap();
        let b = rag.answer(q, t2.as_mut(), qf.as_ref()).unwrap();
        assert_eq!(a.text, b.text, "question {q}");
        assert_eq!(
            a.tokens.iter().map(|t| t.id).collect::<Vec<_>>(),
            b.tokens.iter().map(|t| t.id).collect::<Vec<_>>()
        );
        // bit for bit: the reused exemplars were encoded exactly as a fresh session encodes them
        for (x, y) in a.tokens.iter().zip(&b.tokens) {
            assert!(x.entropy.is_finite());
            assert_eq!(x.entropy.to_bits(), y.entropy.to_bits(), "entropy {} vs {}", x.entropy, y.entropy);
            assert_eq!(x.hidden_final, y.hidden_final);
        }
        reused_forward += a.forward_tokens;
        fresh_forward += b.forward_tokens;
    }
    let prefix = lm.tokenizer.encode(prompt.shared_prefix(), true).unwrap().len();
    // a question's count leaves out the exemplars' own pass, so reused and fresh sessions report the same; the
    // shared session did encode the exemplars (but their last token, which may merge with the text after it)
    // once for all three questions
    assert_eq!(reused_forward, fresh_forward);
    assert_eq!(shared.forward_tokens, reused_forward + (prefix - 1), "prefix {prefix}");
}

/// DRAGIN-style recomputation of the internals (`recompute_internals`) must take the same decisions as the
/// captured ones, also when a block ends on a stop token: the session then holds the stop token's id, which is
/// not one of the answer tokens (a regression: "recompute: 45 steps for 44 tokens").
#[test]
fn recomputed_internals_match_captured_when_a_block_ends_at_a_stop_token() {
    let cfg = ModelConfig::tiny(Arch::Llama, 49152);
    let tok_path = ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json");
    let tok = || Tokenizer::from_file(&tok_path).unwrap();
    let weights: HashMap<_, _> = random_weights(&cfg, 3).into_iter().collect();
    let corpus = Tiny::from_texts(&["Paris is the capital of France.", "Berlin is the capital of Germany."]);
    let prompt = italy_prompt();
    let run = |tok: Tokenizer, recompute: bool| {
        let lm =
            Lm::from_source(&MemoryWeights(weights.clone()), cfg.clone(), tok, "tiny".into(), DeviceKind::Cpu).unwrap();
        let rag = RagLoop {
            lm: &lm,
            prompt: &prompt,
            retriever: Some(&corpus),
            cfg: LoopConfig {
                max_new_tokens: 24,
                max_retrievals: 2,
                suffix_tokens: 0,
                recompute_internals: recompute,
                ..LoopConfig::default()
            },
        };
        let mut trigger = ragtime::trigger::build("fixed-length", &toml::toml! { n = 8 }.into()).unwrap();
        let qf = ragtime::query::build("last-tokens", &toml::toml! { n = 8 }.into()).unwrap();
        rag.answer("What is the capital of France?", trigger.as_mut(), qf.as_ref()).unwrap()
    };
    // Make the 4th answer token of a free run a stop token, so the first judged block ends on it.
    let free = run(tok(), false);
    let stop = free.tokens[3].id;
    let stopping = || {
        let mut t = tok();
        t.stop_ids.push(stop);
        t
    };
    let captured = run(stopping(), false);
    let recomputed = run(stopping(), true);
    assert!(captured.tokens.len() < free.tokens.len(), "the stop token ended the generation early");
    assert!(recomputed.recompute_tokens > 0);
    assert_eq!(recomputed.text, captured.text);
    let ids = |o: &ragtime::rag::Outcome| o.tokens.iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(ids(&recomputed), ids(&captured));
    let at = |o: &ragtime::rag::Outcome| o.retrievals.iter().map(|r| r.token_pos).collect::<Vec<_>>();
    assert_eq!(at(&recomputed), at(&captured));
}

/// Asks to retrieve at the start of every block it judges (`keep = at = new_from`: drop the block), in blocks of
/// 4 tokens; with `initial`, also with the question before generating.
struct AtEveryBlock {
    initial: bool,
}

impl Trigger for AtEveryBlock {
    fn name(&self) -> &str {
        "at-every-block"
    }
    fn lookahead(&self) -> Lookahead {
        Lookahead::Tokens(4)
    }
    fn before_generation(&mut self, _question: &str) -> bool {
        self.initial
    }
    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        let n = view.tokens.len() - view.new_from;
        Ok(Judgement::new(Decision::Retrieve { keep: view.new_from, at: view.new_from }, vec![f32::NAN; n]))
    }
}

/// A query former whose every query is new: `query 1`, `query 2`, ...
struct Numbered(std::cell::Cell<usize>);

impl QueryFormer for Numbered {
    fn name(&self) -> &str {
        "numbered"
    }
    fn form(&self, _view: &GenView, _at: usize, _keep: usize) -> anyhow::Result<String> {
        self.0.set(self.0.get() + 1);
        Ok(format!("query {}", self.0.get()))
    }
}

/// The loop guard. A trigger that fires at the start of every 4-token block, with the question as the query, on a
/// tiny random model (16 answer tokens, at most 10 retrievals, greedy):
/// - without the guard (the papers' loop) it retrieves at token 0 with the question ten times, the cap: each
///   retrieval rebuilds the same prompt, the model writes the same block again, and the trigger fires on it
///   again; the other three blocks are accepted at the cap. 10 blocks of 4 dropped + 16 kept = 56 generated.
/// - with the guard the second firing at token 0 (same place, same query as the retrieval before) is not a
///   retrieval: the block is accepted, and the same happens after each block's one retrieval, so it retrieves
///   at tokens 0, 4, 8, 12 (a new place each time), guards 4 loops, and generates 4 x 4 dropped + 16 = 32.
/// - with an initial retrieval (token 0, the question) the first firing at token 0 already repeats it: guarded,
///   then 4, 8, 12 as before.
/// - a query that changes each time is not a loop: the guard lets all ten retrievals at token 0 through.
///
/// With and without the guard the kept 16 tokens are the same: every retrieval asks the same query, so the
/// answer is written under the same passages.
#[test]
fn loop_guard_stops_in_place_retrieval_loops() {
    let tok = Tokenizer::from_file(&ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json")).unwrap();
    let (lm, corpus) = tiny_and_corpus(tok);
    let prompt = italy_prompt();
    let question = "What is the capital of France?";
    let run = |loop_guard: bool, initial: bool, qf: &dyn QueryFormer| {
        let cfg = LoopConfig { max_new_tokens: 16, suffix_tokens: 0, loop_guard, ..LoopConfig::default() };
        assert_eq!(cfg.max_retrievals, 10);
        let rag = RagLoop { lm: &lm, prompt: &prompt, retriever: Some(&corpus), cfg };
        rag.answer(question, &mut AtEveryBlock { initial }, qf).unwrap()
    };
    let places = |o: &Outcome| o.retrievals.iter().map(|r| (r.token_pos, r.query.clone())).collect::<Vec<_>>();
    let at = |pos: &[usize]| pos.iter().map(|&p| (p, question.to_string())).collect::<Vec<_>>();
    let same_place_twice =
        |o: &Outcome| o.retrievals.windows(2).any(|w| (w[0].token_pos, &w[0].query) == (w[1].token_pos, &w[1].query));
    let by_question = ragtime::query::build("question", &toml::Table::new().into()).unwrap();

    let papers = run(false, false, by_question.as_ref());
    assert_eq!(papers.tokens.len(), 16, "the answer runs to max_new_tokens (no stop token)");
    assert_eq!(places(&papers), at(&[0; 10]));
    assert!(same_place_twice(&papers));
    assert_eq!(papers.loops_guarded, 0);
    assert_eq!(papers.generated_tokens, 10 * 4 + 16);

    let guarded = run(true, false, by_question.as_ref());
    assert_eq!(places(&guarded), at(&[0, 4, 8, 12]));
    assert!(!same_place_twice(&guarded));
    assert_eq!(guarded.loops_guarded, 4);
    assert_eq!(guarded.generated_tokens, 4 * 4 + 16);
    assert_eq!(guarded.text, papers.text);
    assert_eq!(guarded.scores.len(), 16);

    let initial = run(true, true, by_question.as_ref());
    assert_eq!(places(&initial), at(&[0, 4, 8, 12]));
    assert_eq!(initial.loops_guarded, 4);
    assert_eq!(initial.generated_tokens, 3 * 4 + 16, "no block dropped at token 0");
    let initial_papers = run(false, true, by_question.as_ref());
    assert_eq!(places(&initial_papers), at(&[0; 10]), "the initial retrieval and nine repeats of it");

    // the guard needs the same query too: new queries at the same place all go through, up to the cap
    let numbered = run(true, false, &Numbered(Default::default()));
    let queries: Vec<(usize, String)> = (1..=10).map(|i| (0, format!("query {i}"))).collect();
    assert_eq!(places(&numbered), queries);
    assert_eq!(numbered.loops_guarded, 0);
    assert_eq!(numbered.generated_tokens, 10 * 4 + 16);
}

/// A decoder that writes a fixed answer after whatever prompt it was fed: answer step `k` is `answer[k]`
/// (entropy 0.1, no attention), then an end-of-text token.
struct Scripted {
    ids: Vec<u32>,
    prompt: usize,
    answer: Vec<&'static str>,
    stop: u32,
}

impl ragtime::rag::Decoder for Scripted {
    fn ids(&self) -> Vec<u32> {
        self.ids.clone()
    }
    fn len(&self) -> usize {
        self.ids.len()
    }
    fn forward_tokens(&self) -> usize {
        self.ids.len()
    }
    fn truncate(&mut self, len: usize) {
        self.ids.truncate(len);
    }
    async fn feed(&mut self, ids: &[u32], _steps_from: usize) -> anyhow::Result<Vec<ragtime::step::TokenStep>> {
        self.ids.extend_from_slice(ids);
        self.prompt = self.ids.len(); // no retrieval here: every feed is the prompt
        Ok(Vec::new())
    }
    async fn step(&mut self, _: &mut ragtime::model::Sampler) -> anyhow::Result<ragtime::step::TokenStep> {
        let k = self.ids.len() - self.prompt;
        let (id, text) = match self.answer.get(k) {
            Some(t) => (1000 + k as u32, t.to_string()),
            None => (self.stop, String::new()),
        };
        self.ids.push(id);
        Ok(ragtime::step::TokenStep {
            pos: self.ids.len() - 1,
            id,
            text,
            entropy: 0.1,
            prob: 0.9,
            ..Default::default()
        })
    }
}

/// Judges blocks of the given size and never retrieves.
struct Silent(Lookahead);

impl Trigger for Silent {
    fn name(&self) -> &str {
        "silent"
    }
    fn lookahead(&self) -> Lookahead {
        self.0
    }
    fn judge(&mut self, view: &GenView) -> anyhow::Result<Judgement> {
        Ok(Judgement::new(Decision::Continue, vec![f32::NAN; view.tokens.len() - view.new_from]))
    }
}

/// The loop stops once the answer sentence ends, but a period right after a letter or digit may be inside a word:
/// the next token decides. A letter or digit continues the word (`$10.` -> `$10.5 million.`, `Uc.` -> `Uc.160+`),
/// anything else ends the answer there and is dropped (`1998.` or `Paris.` then a newline: the answer as before,
/// one token more decoded). For token-by-token judging (the learned trigger's) and sentence blocks (RIND's) alike.
#[test]
fn an_answer_is_not_cut_at_a_period_inside_a_word() {
    let tok = Tokenizer::from_file(&ragtime::require_data!("models/smollm2-135m-instruct/tokenizer.json")).unwrap();
    let stop = (0..49152).find(|&id| tok.is_stop(id)).expect("a stop token");
    let (lm, _) = tiny_and_corpus(tok);
    let prompt = italy_prompt();
    let rag = RagLoop {
        lm: &lm,
        prompt: &prompt,
        retriever: None,
        cfg: LoopConfig { max_new_tokens: 32, suffix_tokens: 0, ..LoopConfig::default() },
    };
    let qf = ragtime::query::build("question", &toml::Table::new().into()).unwrap();
    let decimal =
        vec![" Costs", " rose", ".", " So", " the", " answer", " is", " $", "10", ".", "5", " million", ".", "\n"];
    let year = vec![" So", " the", " answer", " is", " 1998", ".", "\n", "Question", ":", " Who", "?"];
    let ident = vec![" So", " the", " answer", " is", " Uc", ".", "160", "+,", " uc", ".", "38", ".", "\n", "Question"];
    let word = vec![" So", " the", " answer", " is", " Paris", ".", "\n", "Question", ":", " Who", "?"];
    for lookahead in [Lookahead::Tokens(1), Lookahead::Sentence { max_tokens: 64 }] {
        let run = |answer: &Vec<&'static str>| {
            let mut s = Scripted { ids: Vec::new(), prompt: 0, answer: answer.clone(), stop };
            let mut trigger = Silent(lookahead);
            ragtime::rag::batch::block_on(rag.answer_with(&mut s, "How much?", &mut trigger, qf.as_ref())).unwrap()
        };
        let out = run(&decimal);
        assert_eq!(out.text, " Costs rose. So the answer is $10.5 million.", "{lookahead:?}");
        assert_eq!(out.tokens.len(), 13);
        let why = "the digit after `$10.` decoded to see, and kept; the newline after `million.` decoded and dropped";
        assert_eq!(out.generated_tokens, 14, "{lookahead:?}: {why}");
        assert_eq!(out.scores.len(), out.tokens.len());
        let out = run(&year);
        assert_eq!(out.text, " So the answer is 1998.", "{lookahead:?}");
        assert_eq!(out.generated_tokens, 7, "{lookahead:?}: the newline decoded to see the period was no decimal one");
        assert_eq!(out.scores.len(), 6);
        let out = run(&ident);
        assert_eq!(out.text, " So the answer is Uc.160+, uc.38.", "{lookahead:?}");
        assert_eq!(out.generated_tokens, 13, "{lookahead:?}: `160` and `38` kept, the newline decoded and dropped");
        let out = run(&word);
        assert_eq!(out.text, " So the answer is Paris.", "{lookahead:?}");
        assert_eq!(out.generated_tokens, 7, "{lookahead:?}");
    }
}
