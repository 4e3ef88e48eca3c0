//! MuSiQue in its official layout (`musique_ans_v1.0_*.jsonl`, `musique_full_v1.0_*.jsonl`): JSON lines {id,
//! question, answer, answer_aliases[], answerable, paragraphs[] {idx, title, paragraph_text, is_supporting},
//! question_decomposition[]}. The gold answers are `answer` followed by its aliases; every paragraph is a context
//! doc and those marked `is_supporting` are supporting.
//!
//! MuSiQue-Full pairs each answerable question with an unanswerable twin (`answerable: false`, its supporting
//! paragraphs removed, `answer` still the original's). A QA benchmark scores answers, so those are skipped, as
//! IRCoT and DRAGIN-style evaluations read MuSiQue-Ans; a record without `answerable` counts as answerable. IRCoT's
//! processed MuSiQue (question_id, question_text, answers_objects, contexts) is read by the `hotpotqa-ircot` layout.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{kind_of, non_empty_answers, read_jsonl, str_field, str_list, titled_paragraphs, AnswerKind, At, Example};

pub fn load(path: &Path) -> Result<Vec<Example>> {
    let mut out = Vec::new();
    for (index, (line, v)) in read_jsonl(path)?.into_iter().enumerate() {
        let at = At { path, line: Some(line), index };
        match v.get("answerable") {
            None | Some(Value::Bool(true)) => {}
            Some(Value::Bool(false)) => continue,
            Some(other) => bail!("{at}: field 'answerable' should be true or false, found {}", kind_of(other)),
        }
        let mut answers = str_list(&v, "answer", &at)?;
        if v.get("answer_aliases").is_some() {
            for alias in str_list(&v, "answer_aliases", &at)? {
                if !answers.contains(&alias) {
                    answers.push(alias);
                }
            }
        }
        let (contexts, supporting) = titled_paragraphs(&v, "paragraphs", &at)?;
        out.push(Example {
            id: str_field(&v, "id", &at)?,
            question: str_field(&v, "question", &at)?,
            answers: non_empty_answers(answers, &at)?,
            kind: AnswerKind::Span,
            supporting,
            contexts,
            entries: vec![],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two records as MuSiQue-Full writes them (an answerable question and its unanswerable twin), a blank line, and
    /// a record of one's own without `answerable`, `answer_aliases` or paragraphs.
    const FULL: &str = r#"{"id":"2hop__1_2","paragraphs":[{"idx":0,"title":"Southampton","paragraph_text":"A port city.","is_supporting":false},{"idx":1,"title":"University of Southampton","paragraph_text":"Founded in 1862.","is_supporting":true},{"idx":2,"title":"Neville A. Stanton","paragraph_text":"Works at the University of Southampton.","is_supporting":true}],"question":"When was Neville A. Stanton's employer founded?","question_decomposition":[{"id":1,"question":"Neville A. Stanton >> employer","answer":"University of Southampton","paragraph_support_idx":2},{"id":2,"question":"When was #1 founded?","answer":"1862","paragraph_support_idx":1}],"answer":"1862","answer_aliases":["1862 AD","1862"],"answerable":true}
{"id":"2hop__1_2","paragraphs":[{"idx":0,"title":"Southampton","paragraph_text":"A port city.","is_supporting":false}],"question":"When was Neville A. Stanton's employer founded?","question_decomposition":[],"answer":"1862","answer_aliases":[],"answerable":false}

{"id":"3hop1__9_8_7","question":"Who?","answer":"Geneva","paragraphs":[]}
"#;

    #[test]
    fn reads_answerable_questions_with_aliases_and_supporting_paragraphs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("musique_full_v1.0_dev.jsonl");
        std::fs::write(&p, FULL).unwrap();
        let ex = load(&p).unwrap();
        assert_eq!(ex.len(), 2, "the unanswerable twin is skipped");
        assert_eq!(ex[0].id, "2hop__1_2");
        assert_eq!(ex[0].question, "When was Neville A. Stanton's employer founded?");
        assert_eq!(ex[0].answers, vec!["1862", "1862 AD"], "the answer first, then the aliases not already there");
        assert_eq!(ex[0].contexts.len(), 3);
        let titles: Vec<&str> = ex[0].supporting.iter().map(|d| d.title.as_str()).collect();
        assert_eq!(titles, ["University of Southampton", "Neville A. Stanton"]);
        assert!(ex[0].is_supporting("University of Southampton", "Founded in 1862."));
        assert_eq!((ex[1].id.as_str(), ex[1].answers.as_slice()), ("3hop1__9_8_7", &["Geneva".to_string()][..]));
        assert!(ex[1].contexts.is_empty() && ex[1].supporting.is_empty());
    }

    #[test]
    fn bad_records_name_the_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.jsonl");
        let cases = [
            (r#"{"id":"a","question":"q","answer":"x","answerable":"yes"}"#, "'answerable'"),
            (r#"{"id":"a","question":"q","answer":"x","paragraphs":{"title":"T"}}"#, "'paragraphs'"),
            (r#"{"id":"a","question":"q","answer":"x","paragraphs":[{"title":"T"}]}"#, "'paragraph_text'"),
            (
                r#"{"id":"a","question":"q","answer":"x","paragraphs":[{"title":"T","paragraph_text":"t","is_supporting":1}]}"#,
                "'is_supporting'",
            ),
            (r#"{"id":"a","question":"q","answer":" ","answer_aliases":[]}"#, "no gold answer"),
            (r#"{"id":"a","answer":"x"}"#, "'question'"),
        ];
        for (record, what) in cases {
            std::fs::write(&p, format!("{FULL}{record}\n")).unwrap();
            let err = format!("{:#}", load(&p).unwrap_err());
            assert!(err.contains("m.jsonl:5") && err.contains(what), "{record}: {err}");
        }
    }
}
