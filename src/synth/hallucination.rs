//! `ragtime synth hallucination`: MIND's recipe for hallucination labels, as RaDIO uses it (RaDIO's released code
//! does not implement it; this follows the papers).
//!
//! For every article of a WikiExtractor dump:
//! 1. take its opening (the title line and the first `sentences` sentences of the body);
//! 2. find entities with an [`EntityExtractor`] and keep the [`synthesis_candidates`] (not opening a sentence,
//!    not inside the title) that lie in the opening; with `max_entities > 0`, a seeded sample of that many
//!    (the same for every run, so resuming redoes exactly the same work);
//! 3. for each candidate and each [`Template`], truncate the body just before the entity and let the model
//!    continue greedily for `(tokens of the entity) + extra_tokens` tokens;
//! 4. read the entity at the start of the continuation ([`entity_at_start`]), compare it with the original
//!    ([`compare_entities`]): label 1 = hallucinated;
//! 5. store the example with the model's internals ([`HalluExample`]): at the last prompt token (the hidden
//!    state after the final norm, the mean over layers, and the entropy of the next-token distribution) and
//!    averaged over the tokens of the generated entity.
//!
//! Prompts. Both templates are chat turns whose answer *starts with* the truncated text, so that the model's
//! continuation begins exactly where the original entity stood:
//! - `mind`: user "Tell me something about {title}.", answer = the truncated text (MIND's template);
//! - `radio`: user "Below is the opening sentence from a Wikipedia article titled {title}. Please continue the
//!   passage from where the sentence ends.", answer = the truncated text (RaDIO's wording; RaDIO shows the
//!   sentence in the instruction, we put it at the start of the answer for the reason above: a deviation).
//!
//! The truncated text is trimmed of trailing whitespace ("... was born in" rather than "... was born in "):
//! byte-level BPE models write the space together with the next word (" 1889"), and a prompt ending in a bare
//! space is out of distribution for them.
//!
//! Consecutive prompts of one article share their beginning (chat header + the text before the earlier
//! entity), so the session keeps the KV cache of the longest common token prefix and encodes only the tail. An
//! article's first prompt is encoded whole (a few header tokens more), so that its examples are the same
//! whichever article the session did before ([`feed_prompt`]).
//!
//! Several articles at once (`--batch B`): [`Synthesizer::article_with`] is written once, as an `async fn` over a
//! [`Decoder`]; [`run`] hands articles to the lanes of a [`Batch`] (each lane one session, so the prefix reuse
//! above works per lane) and writes finished articles in input order, so the store gets exactly the rows of one
//! session.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::corpus::wikiextractor::Article;
use crate::entities::{
    char_to_byte, compare_entities, entity_at_start, synthesis_candidates, Entity, EntityExtractor, Resources,
};
use crate::labels::{HalluExample, HalluStore, Manifest};
use crate::model::{Lm, Message, Sampler, Session};
use crate::rag::batch::{block_on, feed_prompt, Batch, Decoder, InOrder};
use crate::step::TokenStep;
use crate::text::sentences::sentence_spans;

/// Prompt template of a continuation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Template {
    Mind,
    Radio,
}

impl Template {
    pub fn name(self) -> &'static str {
        match self {
            Template::Mind => "mind",
            Template::Radio => "radio",
        }
    }

    /// The user turn for an article titled `title`.
    pub fn instruction(self, title: &str) -> String {
        match self {
            Template::Mind => format!("Tell me something about {title}."),
            Template::Radio => format!(
                "Below is the opening sentence from a Wikipedia article titled {title}. Please continue the passage from where the sentence ends."
            ),
        }
    }

    /// The full prompt text: chat template with the truncated text as the start of the answer.
    pub fn prompt(self, lm_tokenizer: &crate::model::Tokenizer, title: &str, truncated: &str) -> String {
        let mut p = lm_tokenizer.apply_chat_template(&[Message::new("user", self.instruction(title))], true);
        p.push_str(truncated.trim_end());
        p
    }
}

impl std::str::FromStr for Template {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "mind" => Ok(Template::Mind),
            "radio" => Ok(Template::Radio),
            _ => bail!("unknown template '{s}' (mind, radio)"),
        }
    }
}

/// Settings of a synthesis run (recorded in the run's `synth-config.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SynthConfig {
    pub templates: Vec<Template>,
    /// Body sentences that form the opening (0 = the whole text).
    pub sentences: usize,
    /// Candidates per article (0 = all), a seeded sample in text order.
    pub max_entities: usize,
    /// Tokens generated beyond the original entity's length in tokens.
    pub extra_tokens: usize,
    pub seed: u64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            templates: vec![Template::Mind, Template::Radio],
            sentences: 5,
            max_entities: 0,
            extra_tokens: 16,
            seed: 42,
        }
    }
}

/// Byte offset in `article.text` where its opening ends: after the `k`-th body sentence (`k == 0`: the end).
pub fn opening_end(article: &Article, k: usize) -> usize {
    if k == 0 {
        return article.text.len();
    }
    let off = article.body_offset();
    let spans = sentence_spans(article.body());
    spans.get(k - 1).map_or(article.text.len(), |s| off + s.end)
}

/// FNV-1a, for seeding per-article sampling independently of the run's order.
fn fnv(s: &str, seed: u64) -> u64 {
    let mut h = 0xcbf29ce484222325u64 ^ seed;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The truncation points of an article: skip-rule survivors inside the opening, sampled to `max_entities`,
/// in text order.
pub fn truncation_points(article: &Article, extractor: &dyn EntityExtractor, cfg: &SynthConfig) -> Vec<Entity> {
    let end = opening_end(article, cfg.sentences);
    let opening = &article.text[..end];
    let ents = extractor.extract(opening);
    let body_start_char = article.text[..article.body_offset()].chars().count();
    let mut cands: Vec<Entity> = synthesis_candidates(opening, &article.title, &ents)
        .into_iter()
        .filter(|e| e.start >= body_start_char)
        .collect();
    if cfg.max_entities > 0 && cands.len() > cfg.max_entities {
        // seeded partial Fisher-Yates on an xorshift stream, then back to text order
        let mut x = fnv(&article.id, cfg.seed) | 1;
        for i in 0..cfg.max_entities {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let j = i + (x % (cands.len() - i) as u64) as usize;
            cands.swap(i, j);
        }
        cands.truncate(cfg.max_entities);
        cands.sort_by_key(|e| e.start);
    }
    cands
}

/// The body text before `entity` (what the model is asked to continue).
pub fn truncated_body<'a>(article: &'a Article, entity: &Entity) -> &'a str {
    let b = char_to_byte(&article.text, entity.start);
    &article.text[article.body_offset().min(b)..b]
}

/// Indices of the tokens whose text overlaps bytes `start..end` of the concatenated texts of `steps`.
pub fn tokens_overlapping(steps: &[TokenStep], start: usize, end: usize) -> Vec<usize> {
    let mut out = Vec::new();
    if start >= end {
        return out;
    }
    let mut pos = 0;
    for (i, s) in steps.iter().enumerate() {
        let (a, b) = (pos, pos + s.text.len());
        if a < end && b > start && b > a {
            out.push(i);
        }
        pos = b;
    }
    out
}

/// Element-wise mean of `rows` (each `dim` long); zeros for none.
pub(crate) fn mean_rows<'a>(rows: impl Iterator<Item = &'a Vec<f32>>, dim: usize) -> Vec<f32> {
    let mut acc = vec![0f32; dim];
    let mut n = 0;
    for r in rows {
        for (a, v) in acc.iter_mut().zip(r) {
            *a += v;
        }
        n += 1;
    }
    if n > 0 {
        acc.iter_mut().for_each(|a| *a /= n as f32);
    }
    acc
}

/// Continues truncated articles and labels the continuations.
pub struct Synthesizer<'a> {
    pub lm: &'a Lm,
    pub extractor: &'a dyn EntityExtractor,
    pub resources: &'a Resources,
    pub cfg: SynthConfig,
}

impl Synthesizer<'_> {
    /// Every example of one article (all truncation points x templates), reusing `s`'s KV cache where the
    /// prompts share a prefix.
    pub fn article(&self, s: &mut Session<'_>, article: &Article) -> Result<Vec<HalluExample>> {
        block_on(self.article_with(s, article))
    }

    /// [`article`](Self::article) on any [`Decoder`]: a [`Session`], or a lane of a [`Batch`] that works on
    /// several articles at once (each lane's examples equal the one-session examples).
    pub async fn article_with<D: Decoder>(&self, s: &mut D, article: &Article) -> Result<Vec<HalluExample>> {
        let points = truncation_points(article, self.extractor, &self.cfg);
        let mut out = Vec::with_capacity(points.len() * self.cfg.templates.len());
        for &template in &self.cfg.templates {
            for e in &points {
                out.push(self.example(s, out.is_empty(), article, e, template).await?);
            }
        }
        Ok(out)
    }

    /// One example; `first`: the article's first (it keeps nothing of the previous article's cache, so that an
    /// article's examples do not depend on which article the session did before).
    async fn example<D: Decoder>(
        &self,
        s: &mut D,
        first: bool,
        article: &Article,
        e: &Entity,
        template: Template,
    ) -> Result<HalluExample> {
        let tok = &self.lm.tokenizer;
        let prompt = template.prompt(tok, &article.title, truncated_body(article, e));
        let ids = tok.encode(&prompt, true)?;
        // keep the cached prefix, re-feed at least the last prompt token (its internals are features)
        let n = ids.len() - 1;
        let last = feed_prompt(s, &[], first, &ids, n, n).await?.steps.pop().context("no prompt step")?;
        let entity_tokens = tok.encode(&format!(" {}", e.text), false)?.len();
        let max_new = entity_tokens + self.cfg.extra_tokens;
        // greedy, up to a stop token (included), as `Session::generate`
        let mut sampler = Sampler::greedy();
        let mut steps = Vec::with_capacity(max_new);
        while steps.len() < max_new {
            let t = s.step(&mut sampler).await?;
            let stop = tok.is_stop(t.id);
            steps.push(t);
            if stop {
                break;
            }
        }
        let continuation: String = steps.iter().map(|t| t.text.as_str()).collect();
        let generated = entity_at_start(&continuation, e, self.extractor).unwrap_or_default();
        let cmp = compare_entities(&e.text, &generated, self.resources);
        // the generated entity's tokens: it starts after the continuation's leading whitespace
        let lead = continuation.len() - continuation.trim_start().len();
        let mut idx = tokens_overlapping(&steps, lead, lead + generated.len());
        if idx.is_empty() && !steps.is_empty() {
            idx.push(0);
        }
        let d = self.lm.config.hidden_size;
        let sel = || idx.iter().map(|&i| &steps[i]);
        let entropy_first = steps.first().map_or(f32::NAN, |t| t.entropy);
        Ok(HalluExample {
            article_id: article.id.clone(),
            title: article.title.clone(),
            template: template.name().to_string(),
            trunc_offset: e.start as u32,
            entity_label: e.label.as_str().to_string(),
            original_entity: e.text.clone(),
            generated_entity: generated,
            continuation,
            label: cmp.hallucinated as u8,
            rule: cmp.rule.to_string(),
            // entropy of the distribution the first continuation token is drawn from = the next-token
            // distribution at the last prompt token
            entropy_last: entropy_first,
            entropy_entity_mean: if idx.is_empty() {
                f32::NAN
            } else {
                sel().map(|t| t.entropy).sum::<f32>() / idx.len() as f32
            },
            hidden_final_last: last.hidden_final,
            hidden_mean_last: last.hidden_mean,
            hidden_final_entity: mean_rows(sel().map(|t| &t.hidden_final), d),
            hidden_mean_entity: mean_rows(sel().map(|t| &t.hidden_mean), d),
        })
    }
}

pub use crate::shard::Shard;

/// Progress of a run, one stderr line per article.
pub struct Progress {
    clock: crate::progress::Clock,
    pub total: usize,
    pub done_before: usize,
    pub articles: usize,
    pub examples: usize,
    pub hallucinated: usize,
}

impl Progress {
    pub fn new(total: usize, done_before: usize) -> Self {
        Progress { clock: crate::progress::Clock::new(), total, done_before, articles: 0, examples: 0, hallucinated: 0 }
    }

    /// Adds the next article's examples (articles are written in input order) and returns the progress line;
    /// `finished`: the articles this process has done so far, this one and those on lanes that wait for a slower
    /// one before them, which the ETA counts.
    pub fn update(&mut self, examples: &[HalluExample], finished: usize) -> String {
        let secs = self.clock.elapsed();
        self.update_at(examples, finished, secs)
    }

    /// [`Progress::update`] `secs` seconds after the start.
    fn update_at(&mut self, examples: &[HalluExample], finished: usize, secs: f64) -> String {
        self.articles += 1;
        self.examples += examples.len();
        self.hallucinated += examples.iter().filter(|e| e.label == 1).count();
        let finished = finished.max(self.articles);
        let left = self.total.saturating_sub(self.done_before + finished);
        let (_, eta) = crate::progress::rate_at(secs, finished, left);
        let (rate, _) = crate::progress::rate_at(secs, self.examples, 0);
        let pct = if self.examples > 0 { 100.0 * self.hallucinated as f64 / self.examples as f64 } else { 0.0 };
        format!(
            "[{}/{}] {} examples this run ({pct:.1}% hallucinated), {rate:.2} examples/s, ETA {}",
            self.done_before + self.articles,
            self.total,
            self.examples,
            crate::progress::hms(eta)
        )
    }
}

/// Writes `synth-config.json` into `dir`, or checks that a resumed run uses the same settings.
pub fn record_config(dir: &Path, cfg: &SynthConfig, extra: &serde_json::Value) -> Result<()> {
    let path = dir.join("synth-config.json");
    let mut v = serde_json::to_value(cfg)?;
    if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    std::fs::create_dir_all(dir)?;
    let text = serde_json::to_string_pretty(&v)?;
    if let Some(old) = crate::io::pin_settings(&path, &text, |t| Ok(serde_json::from_str::<serde_json::Value>(t)?))? {
        let same = |k: &str| old.get(k) == v.get(k);
        for k in ["templates", "sentences", "max_entities", "extra_tokens", "seed"] {
            if !same(k) {
                bail!(
                    "{}: this directory was synthesized with {k} = {}, not {}; resume with the same settings or use another --out",
                    path.display(),
                    old.get(k).cloned().unwrap_or_default(),
                    v.get(k).cloned().unwrap_or_default()
                );
            }
        }
    }
    Ok(())
}

/// The whole pipeline over already-read articles: skips finished ones, works on up to `lanes` articles at once
/// (lanes of one [`Batch`], whose decoding steps share forward passes), writes shards as it goes, prints progress
/// to `log`, returns the final manifest.
///
/// Lanes finish in any order; a finished article waits until every article before it is written, so the store
/// receives the articles in input order and the shards hold the rows of a one-lane run, in the same order. An
/// error in an article is reported when its turn to be written comes (the articles before it are stored, as in
/// a one-lane run).
pub fn run(
    synth: &Synthesizer<'_>,
    articles: &[Article],
    store: &mut HalluStore,
    lanes: usize,
    log: &mut dyn FnMut(&str),
) -> Result<Manifest> {
    let todo: Vec<&Article> = articles.iter().filter(|a| !store.is_done(&a.id)).collect();
    let mut progress = Progress::new(articles.len(), articles.len() - todo.len());
    if todo.len() < articles.len() {
        log(&format!("resuming: {} of {} articles already done", articles.len() - todo.len(), articles.len()));
    }
    let batch = Batch::new(synth.lm, lanes.min(todo.len()).max(1));
    let mut queue = todo.into_iter().enumerate();
    let mut order = InOrder::default();
    batch.run(
        |lane| {
            let (i, a) = queue.next()?;
            let mut decoder = batch.lane(lane);
            Some(Box::pin(async move { (i, a, synth.article_with(&mut decoder, a).await) }))
        },
        |(i, a, ex)| {
            order.push(i, (a, ex), |(a, ex): (&Article, Result<Vec<HalluExample>>), finished| {
                let ex = ex.with_context(|| format!("article {} ({})", a.id, a.title))?;
                let line = progress.update(&ex, finished);
                store.add_article(&a.id, ex)?;
                log(&line);
                Ok(())
            })
        },
    )?;
    if batch.lanes() > 1 {
        log(&batch.summary("sequences"));
    }
    store.flush()?;
    Ok(store.manifest().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entities::EntityLabel;

    fn article(text: &str) -> Article {
        Article { id: "7".into(), url: String::new(), title: "Ada Lovelace".into(), text: text.into() }
    }

    #[test]
    fn progress_line_by_hand() {
        let ex = |label| HalluExample { label, ..Default::default() };
        // Resumed after 2 of 10 articles. The first new one (3 examples, 1 hallucinated) is written 12 s in, when
        // 4 have finished on lanes (three wait for it): 3 s each, 10 - 2 - 4 = 4 to go -> ETA 12 s; 3 examples
        // in 12 s -> 0.25 examples/s.
        let mut p = Progress::new(10, 2);
        let line = p.update_at(&[ex(1), ex(0), ex(0)], 4, 12.0);
        assert_eq!(line, "[3/10] 3 examples this run (33.3% hallucinated), 0.25 examples/s, ETA 0m 12s");
        // the three that waited are written at once (nothing new has finished), then a fifth article without
        // examples, 20 s in: 4 s each, 3 to go -> 12 s; 6 examples in 20 s
        for _ in 0..3 {
            assert!(p.update_at(&[ex(1)], 4, 12.0).ends_with("ETA 0m 12s"));
        }
        let line = p.update_at(&[], 5, 20.0);
        assert_eq!(line, "[7/10] 6 examples this run (66.7% hallucinated), 0.30 examples/s, ETA 0m 12s");
    }

    #[test]
    fn opening_and_truncation_offsets() {
        // title line, blank line, three sentences
        let a = article("Ada Lovelace\n\nAda Lovelace was born in 1815 in London. She worked with Charles Babbage. She died in 1852.");
        // body starts at byte 14; sentence 1 ends after "London." (14 + 40 = 54)
        assert_eq!(&a.text[..opening_end(&a, 1)], "Ada Lovelace\n\nAda Lovelace was born in 1815 in London.");
        assert_eq!(opening_end(&a, 0), a.text.len());
        assert_eq!(opening_end(&a, 9), a.text.len());
        // the entity "1815" starts at char 14 + 25 = 39 ("Ada Lovelace was born in " is 25 chars)
        let e = Entity { start: 39, end: 43, text: "1815".into(), label: EntityLabel::Date };
        assert_eq!(&a.text[39..43], "1815");
        assert_eq!(truncated_body(&a, &e), "Ada Lovelace was born in ");
        // non-ASCII before the entity: char offsets, not bytes
        let b = article("Ada Lovelace\n\nAda née Byron was born in 1815.");
        let start = b.text.chars().position(|c| c == '1').unwrap();
        let e = Entity { start, end: start + 4, text: "1815".into(), label: EntityLabel::Date };
        assert_eq!(truncated_body(&b, &e), "Ada née Byron was born in ");
    }

    #[test]
    fn truncation_points_skip_rules_opening_and_sampling() {
        let a = article(
            "Ada Lovelace\n\nAda Lovelace was born in 1815 in London. She worked with Charles Babbage in 1833. \
             In 1852 she died. She had 3 children.",
        );
        let x = crate::entities::CombinedExtractor::basic();
        let cfg = SynthConfig { sentences: 2, ..SynthConfig::default() };
        let pts: Vec<String> = truncation_points(&a, &x, &cfg).into_iter().map(|e| e.text).collect();
        // title-line and title-word entities and sentence-initial "In 1852" are out; sentence 4 is past the opening
        assert!(pts.contains(&"1815".to_string()), "{pts:?}");
        assert!(pts.contains(&"London".to_string()), "{pts:?}");
        assert!(pts.contains(&"Charles Babbage".to_string()), "{pts:?}");
        assert!(!pts.iter().any(|p| p.contains("Lovelace")), "{pts:?}");
        assert!(!pts.iter().any(|p| p == "3"), "{pts:?}");
        let all = truncation_points(&a, &x, &cfg);
        let capped = truncation_points(&a, &x, &SynthConfig { max_entities: 2, ..cfg.clone() });
        assert_eq!(capped.len(), 2);
        assert!(capped.windows(2).all(|w| w[0].start < w[1].start), "text order");
        assert!(capped.iter().all(|e| all.contains(e)));
        // same seed, same sample; the sample depends on the article id, not on the run
        assert_eq!(capped, truncation_points(&a, &x, &SynthConfig { max_entities: 2, ..cfg.clone() }));
    }

    #[test]
    fn entity_token_span() {
        let step = |t: &str| TokenStep { text: t.into(), ..TokenStep::default() };
        // continuation " 18" "15" " in" " London": entity "1815" occupies bytes 1..5
        let steps = [step(" 18"), step("15"), step(" in"), step(" London")];
        assert_eq!(tokens_overlapping(&steps, 1, 5), vec![0, 1]);
        assert_eq!(tokens_overlapping(&steps, 9, 16), vec![3]);
        assert_eq!(tokens_overlapping(&steps, 1, 1), Vec::<usize>::new());
    }

    #[test]
    fn prompt_ends_with_trimmed_truncation() {
        let tok =
            crate::model::Tokenizer::from_file(&crate::require_data!("models/smollm2-135m-instruct/tokenizer.json"))
                .unwrap();
        let p = Template::Mind.prompt(&tok, "Ada Lovelace", "Ada Lovelace was born in ");
        assert!(
            p.contains("<|im_start|>user\nTell me something about Ada Lovelace.<|im_end|>\n<|im_start|>assistant\n")
        );
        assert!(p.ends_with("\nAda Lovelace was born in"), "{p:?}");
        let r = Template::Radio.prompt(&tok, "Ada Lovelace", "Ada was");
        assert!(r.contains(
            "Wikipedia article titled Ada Lovelace. Please continue the passage from where the sentence ends."
        ));
    }
}
