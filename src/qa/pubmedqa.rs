//! PubMedQA (ori_pqal.json layout): {pmid: {QUESTION, CONTEXTS[], LABELS[], LONG_ANSWER, final_decision}} with
//! final_decision yes/no/maybe. The abstract's CONTEXTS become the question's context docs (title = pmid), so a
//! reasoning-required run can put them in the prompt.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{read_text, str_field, AnswerKind, At, Doc, Example};

/// A JSON object's entries in file order (serde_json's map sorts its keys).
struct Entries(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object keyed by PubMed id")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> std::result::Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(e) = m.next_entry::<String, Value>()? {
                    out.push(e);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

pub fn load(path: &Path) -> Result<Vec<Example>> {
    let text = read_text(path)?;
    let Entries(map) =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), e.line()))?;
    let mut out = Vec::with_capacity(map.len());
    for (index, (pmid, v)) in map.iter().enumerate() {
        let at = At { path, line: None, index };
        let decision = str_field(v, "final_decision", &at)?.trim().to_ascii_lowercase();
        if !matches!(decision.as_str(), "yes" | "no" | "maybe") {
            bail!("{at} ({pmid}): final_decision should be yes, no or maybe, found '{decision}'");
        }
        let contexts = match v.get("CONTEXTS") {
            Some(Value::Array(c)) => {
                c.iter().filter_map(Value::as_str).map(|t| Doc { title: pmid.clone(), text: t.to_string() }).collect()
            }
            _ => vec![],
        };
        out.push(Example {
            id: pmid.clone(),
            question: str_field(v, "QUESTION", &at)?,
            answers: vec![decision],
            kind: AnswerKind::YesNoMaybe,
            supporting: vec![],
            contexts,
            entries: vec![],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_shared_file() {
        let ex = load(&crate::require_data!("qa/pubmedqa/pqal_dev_500.json")).unwrap();
        assert_eq!(ex.len(), 500);
        // 276 yes / 169 no / 55 maybe, counted with Python when the file was examined.
        let count = |a: &str| ex.iter().filter(|e| e.answers[0] == a).count();
        assert_eq!((count("yes"), count("no"), count("maybe")), (276, 169, 55));
        assert_eq!(ex[0].id, "10808977");
        assert_eq!(ex[0].question, "Can tailored interventions increase mammography use among HMO women?");
        assert!(!ex[0].contexts.is_empty());
    }

    #[test]
    fn bad_decision_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.json");
        std::fs::write(
            &p,
            r#"{"2": {"QUESTION": "q", "final_decision": "yes"}, "1": {"QUESTION": "q", "final_decision": "perhaps"}}"#,
        )
        .unwrap();
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("record 1 (1)") && err.contains("perhaps"), "{err}");
        std::fs::write(&p, "[1]").unwrap();
        assert!(format!("{:#}", load(&p).unwrap_err()).contains("keyed by PubMed id"));
    }
}
