//! Hallucination labels from QA itself, the second label source beside MIND's Wikipedia continuations
//! (`ragtime synth qa-labels`). As Probing-RAG (Baek et al. 2024) and UAR (Cheng et al. 2024) label the model's
//! own generations: the model answers training questions closed-book (no retrieval, the dataset's prompt), its
//! answer is scored against the gold answers, and every generated sentence becomes one example labelled by
//! whether the final answer was wrong (1, "hallucinated": retrieval would have been needed) or right (0), with
//! the same hidden-state features MIND's labels carry. So `train detector` reads either source, and the `mlp`
//! trigger reads a detector trained on either.
//!
//! Features per sentence, in the store's columns ([`HalluExample`]): `hidden_*_last` and `entropy_last` are the
//! sentence's last token's (the state the `mlp` trigger scores while decoding); `hidden_*_entity` and
//! `entropy_entity_mean` are means over the sentence's tokens. `article_id` is the question id (so the
//! detector's train/valid/test split, a hash of it, keeps a question's sentences together), `title` the
//! question, `trunc_offset` the sentence's index, `original_entity` the gold answers (`|`-separated),
//! `generated_entity` the extracted answer, `continuation` the sentence, `template` "qa-closed-book".
//!
//! Correctness (`rule`): `em` when the answer equals a gold alias after SQuAD normalisation, `contains` when a
//! gold alias occurs in the answer (closed-book answers are often a phrase around the entity), else `wrong`
//! (label 1); a list question's answer is `em` when it names exactly its entries, `contains` when it names every
//! one ([`crate::eval::list_answers`]). Questions whose answer is empty are labelled wrong, as unanswered.
//!
//! HotpotQA, 2WikiMultihopQA and MuSiQue questions are reserved for testing controllers and are refused
//! ([`crate::eval::RESERVED_FOR_TESTING`]); the training pools are NQ-open, TriviaQA and similar (`--split train` of
//! their specs).

use crate::eval::run::PredictionRecord;
use crate::labels::HalluExample;
use crate::qa::Example;
use crate::rag::Outcome;
use crate::synth::hallucination::mean_rows;
use crate::text::words::token_sentences;

/// `template` of QA-label rows.
pub const TEMPLATE: &str = "qa-closed-book";

/// The rule that decided a closed-book answer's label, and the label (1 = wrong).
pub fn judge(rec: &PredictionRecord) -> (&'static str, u8) {
    if rec.prediction.trim().is_empty() {
        ("unanswered", 1)
    } else if rec.metrics.em >= 1.0 {
        ("em", 0)
    } else if rec.metrics.contains >= 1.0 {
        ("contains", 0)
    } else {
        ("wrong", 1)
    }
}

/// One example per generated sentence of the closed-book answer `o` to `ex`.
pub fn examples(ex: &Example, o: &Outcome, hidden: usize) -> Vec<HalluExample> {
    let rec = PredictionRecord::new(ex, &o.text);
    let (rule, label) = judge(&rec);
    token_sentences(&o.tokens)
        .into_iter()
        .enumerate()
        .filter(|(_, r)| !r.is_empty())
        .map(|(k, r)| {
            let toks = &o.tokens[r.clone()];
            let last = &toks[toks.len() - 1];
            HalluExample {
                article_id: ex.id.clone(),
                title: ex.question.clone(),
                template: TEMPLATE.to_string(),
                trunc_offset: k as u32,
                entity_label: "QA".to_string(),
                original_entity: ex.answers.join(" | "),
                generated_entity: rec.prediction.clone(),
                continuation: toks.iter().map(|t| t.text.as_str()).collect(),
                label,
                rule: rule.to_string(),
                entropy_last: last.entropy,
                entropy_entity_mean: toks.iter().map(|t| t.entropy).sum::<f32>() / toks.len() as f32,
                hidden_final_last: last.hidden_final.clone(),
                hidden_mean_last: last.hidden_mean.clone(),
                hidden_final_entity: mean_rows(toks.iter().map(|t| &t.hidden_final), hidden),
                hidden_mean_entity: mean_rows(toks.iter().map(|t| &t.hidden_mean), hidden),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qa::AnswerKind;
    use crate::step::TokenStep;

    fn step(text: &str, entropy: f32, h: f32) -> TokenStep {
        TokenStep {
            text: text.into(),
            entropy,
            hidden_final: vec![h, 2.0 * h],
            hidden_mean: vec![-h, h],
            ..Default::default()
        }
    }

    fn example(answer: &str) -> Example {
        Example {
            id: "q7".into(),
            question: "Who wrote Hamlet?".into(),
            answers: vec![answer.into(), "Shakespeare".into()],
            kind: AnswerKind::Span,
            supporting: vec![],
            contexts: vec![],
            entries: vec![],
        }
    }

    /// Two sentences, "Hamlet is a play. So the answer is William Shakespeare.": the first three tokens, then the
    /// rest; features by hand (last token's states; means over each sentence).
    #[test]
    fn one_example_per_sentence_with_its_features() {
        let tokens = vec![
            step("Hamlet", 1.0, 1.0),
            step(" is a play", 2.0, 2.0),
            step(".", 3.0, 3.0),
            step(" So the answer is", 0.5, 4.0),
            step(" William Shakespeare", 0.25, 6.0),
            step(".", 0.75, 8.0),
        ];
        let text: String = tokens.iter().map(|t| t.text.as_str()).collect();
        let o = Outcome { text, tokens, ..Default::default() };
        let rows = examples(&example("William Shakespeare"), &o, 2);
        assert_eq!(rows.len(), 2);
        let (a, b) = (&rows[0], &rows[1]);
        assert_eq!((a.continuation.as_str(), a.trunc_offset), ("Hamlet is a play.", 0));
        assert_eq!(b.continuation, " So the answer is William Shakespeare.");
        assert_eq!((a.label, a.rule.as_str(), b.label), (0, "em", 0));
        assert_eq!(a.generated_entity, "William Shakespeare");
        assert_eq!(a.original_entity, "William Shakespeare | Shakespeare");
        assert_eq!((a.entropy_last, a.entropy_entity_mean), (3.0, 2.0));
        assert_eq!(a.hidden_final_last, vec![3.0, 6.0]);
        assert_eq!(a.hidden_mean_last, vec![-3.0, 3.0]);
        assert_eq!(a.hidden_final_entity, vec![2.0, 4.0]);
        assert_eq!(b.hidden_final_entity, vec![6.0, 12.0]);
        assert_eq!(b.entropy_entity_mean, 0.5);
        assert!(rows.iter().all(|r| r.article_id == "q7" && r.template == TEMPLATE && r.title == "Who wrote Hamlet?"));
    }

    #[test]
    fn labels_by_exact_match_containment_or_wrong() {
        let o = |text: &str| Outcome { text: text.into(), tokens: vec![step(text, 1.0, 1.0)], ..Default::default() };
        let rule = |text: &str| {
            let r = &examples(&example("William Shakespeare"), &o(text), 2)[0];
            (r.rule.clone(), r.label)
        };
        assert_eq!(rule("So the answer is Shakespeare."), ("em".into(), 0));
        assert_eq!(rule("So the answer is the poet Shakespeare of Stratford."), ("contains".into(), 0));
        assert_eq!(rule("So the answer is Christopher Marlowe."), ("wrong".into(), 1));
        assert_eq!(rule(""), ("unanswered".into(), 1));
    }
}
