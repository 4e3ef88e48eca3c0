//! End-to-end check of the trigger/query protocol with the shipped configs: a scripted "model" and a minimal
//! decode loop (lookahead, judge, truncate, query, re-feed), as the loop in `src/rag` is specified in this module's
//! parent. Expected retrievals and queries are worked out by hand below.

use super::{build_section, Decision, GenView, Lookahead};
use crate::config::resolve_dataset;
use crate::step::TokenStep;
use crate::text::words::ends_sentence;

const QUESTION: &str = "When was the tower built?";
const SCRIPT: &[&str] = &[
    " The", " Eiffel", " Tower", " is", " in", " Paris", ".", // 0..7
    " It", " was", " built", " in", " 1889", " by", " Gustave", " Eiffel", ".", // 7..16
    " It", " is", " 330", " m", " tall", ".", // 16..22
];
const YEAR: usize = 11; // " 1889"
const BY: usize = 12; // " by"
const PROMPT: usize = 20; // prompt length: answer token i sits at position 20 + i

/// The scripted model. Until an in-loop retrieval (`informed`) it is unsure of the year (entropy 3.0,
/// probability 0.3) and the token after it looks back at it (attention 0.9); every other token has entropy 0.2,
/// probability 0.95 and a flat attention row (0.01 to every key).
fn step(i: usize, informed: bool) -> TokenStep {
    let pos = PROMPT + i;
    let unsure = i == YEAR && !informed;
    let mut row = vec![0.01; pos + 1];
    if i == BY && !informed {
        row[PROMPT + YEAR] = 0.9;
    }
    TokenStep {
        pos,
        text: SCRIPT[i].to_string(),
        entropy: if unsure { 3.0 } else { 0.2 },
        prob: if unsure { 0.3 } else { 0.95 },
        attn: vec![row],
        ..Default::default()
    }
}

/// Runs one question; returns (initial retrieval?, [(keep, at, query)], final text).
fn run(config: &str) -> (bool, Vec<(usize, usize, String)>, String) {
    run_with(config, &[])
}

/// [`run`] with `[trigger]` keys set over the config's.
fn run_with(config: &str, trigger_keys: &[(&str, toml::Value)]) -> (bool, Vec<(usize, usize, String)>, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs").join(config);
    let mut root: toml::Value = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let table = root.get_mut("trigger").and_then(|t| t.as_table_mut()).unwrap();
    for (k, v) in trigger_keys {
        table.insert(k.to_string(), v.clone());
    }
    let root = resolve_dataset(&root, None).unwrap();
    let mut trigger = build_section(&root).unwrap();
    let former = crate::query::build_section(&root).unwrap();
    trigger.reset();
    let initial = trigger.before_generation(QUESTION);
    let mut informed = false; // the initial retrieval (question only) does not find the year; a later one does
    let mut tokens: Vec<TokenStep> = Vec::new();
    let mut events = Vec::new();
    while tokens.len() < SCRIPT.len() && events.len() < 10 {
        let new_from = tokens.len();
        let (max, by_sentence) = match trigger.lookahead() {
            Lookahead::Tokens(n) => (n, false),
            Lookahead::Sentence { max_tokens } => (max_tokens, true),
        };
        while tokens.len() < SCRIPT.len() && tokens.len() - new_from < max {
            tokens.push(step(tokens.len(), informed));
            let texts: Vec<&str> = tokens.iter().map(|t| t.text.as_str()).collect();
            if by_sentence && ends_sentence(&texts, texts.len() - 1) {
                break;
            }
        }
        let view = GenView { question: QUESTION, tokens: &tokens, new_from };
        let j = trigger.judge(&view).unwrap();
        assert_eq!(j.scores.len(), tokens.len() - new_from, "{config}: one score per block token");
        if let Decision::Retrieve { keep, at } = j.decision {
            assert!(keep <= tokens.len() && at < tokens.len(), "{config}: keep {keep} at {at} out of range");
            events.push((keep, at, former.form(&view, at, keep).unwrap()));
            trigger.on_retrieval();
            informed = true;
            tokens = (0..keep).map(|i| step(i, true)).collect(); // re-fed under the new prompt
        }
    }
    (initial, events, tokens.iter().map(|t| t.text.as_str()).collect())
}

#[test]
fn shipped_configs_drive_the_loop_as_worked_out_by_hand() {
    let full: String = SCRIPT.concat();
    let s1_s2 = "The Eiffel Tower is in Paris. It was built in 1889 by Gustave Eiffel.";

    // wo-RAG and SR-RAG: no retrieval in the loop
    assert_eq!(run("none.toml"), (false, vec![], full.clone()));
    assert_eq!(run("single.toml"), (true, vec![], full.clone()));

    // FL-RAG, n = 16: tokens 0..16 form a full block -> retrieve keeping all 16, query = those 16 tokens;
    // the last block (6 tokens) is short -> no retrieval
    assert_eq!(run("fixed-length.toml"), (true, vec![(16, 15, s1_s2.to_string())], full.clone()));

    // FS-RAG: one retrieval per sentence, query = that sentence
    let (initial, ev, text) = run("fixed-sentence.toml");
    assert!(initial);
    assert_eq!(text, full);
    let got: Vec<(usize, usize, &str)> = ev.iter().map(|(k, a, q)| (*k, *a, q.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (7, 6, "The Eiffel Tower is in Paris."),
            (16, 15, "It was built in 1889 by Gustave Eiffel."),
            (22, 21, "It is 330 m tall."),
        ]
    );

    // FLARE, theta 0.8: the draft of sentence 2 has p(1889) = 0.3 < 0.8 -> drop the draft (keep 7), at = 11;
    // masked query (beta 0.4) removes " 1889"; the regenerated sentence is confident
    assert_eq!(
        run("flare.toml"),
        (true, vec![(7, YEAR, "It was built in by Gustave Eiffel.".to_string())], full.clone())
    );

    // RIND (paper), theta 1.2: S(1889) = H 3.0 * a_max 0.9 (from " by") * s 1 = 2.7 > 1.2; every other word
    // has S <= 0.2 * 0.01. Truncate at the word (keep 11). QFS: question + content words before it, text order
    // (flat attention: all of them, fewer than top_n = 40).
    assert_eq!(
        run("rind.toml"),
        (false, vec![(YEAR, YEAR, format!("{QUESTION} Eiffel Tower Paris built"))], full.clone())
    );

    // ETC (paper), alpha 1.0: content-word entropies Eiffel Tower Paris built 1889 Gustave = .2 .2 .2 .2 3 .2
    //   d2: Paris 0, built 0, 1889 2.8, Gustave -5.6
    //   built:   E = 0, w = 0/0 -> 1/2, d~2 = 0
    //   1889:    E = 2.8/3 = 0.93333, w = 0.93333 / (1.86667 + 0.93333) = 1/3, d~2 = 2.8/3 = 0.93333 < 1.0
    //   Gustave: E = -2.8/4 = -0.7, w = 3.5 / (4.9 + 3.5) = 0.416667,
    //            d~2 = 0.416667 * -5.6 + 0.583333 * 0.93333 = -1.78889, |.| >= 1.0 -> trigger at token 13
    // QFS from " Gustave": the content words before it
    assert_eq!(
        run("etc.toml"),
        (false, vec![(13, 13, format!("{QUESTION} Eiffel Tower Paris built 1889"))], full.clone())
    );
}

#[test]
fn rind_and_etc_retrieve_with_the_question_first_when_asked() {
    // `initial_retrieval = true` adds the question's retrieval before generating (as FLARE and FL-RAG do); the
    // scripted model stays unsure of the year after it (the question alone does not find it), so the in-loop
    // retrievals are the ones worked out above
    let on = [("initial_retrieval", toml::Value::Boolean(true))];
    let full: String = SCRIPT.concat();
    assert_eq!(
        run_with("rind.toml", &on),
        (true, vec![(YEAR, YEAR, format!("{QUESTION} Eiffel Tower Paris built"))], full.clone())
    );
    assert_eq!(
        run_with("etc.toml", &on),
        (true, vec![(13, 13, format!("{QUESTION} Eiffel Tower Paris built 1889"))], full)
    );
    let off = [("initial_retrieval", toml::Value::Boolean(false))];
    assert!(!run_with("rind.toml", &off).0);
}
