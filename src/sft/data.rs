//! Dialogues to token ids with a loss mask, length-grouped batches with right padding.
//!
//! A dialogue `x_0, y_0, ..., x_T, y_T` is rendered with the model's chat template exactly as Auto-RAG inference
//! (`autorag::infer`, without few-shot exemplars) feeds it: system = Auto-RAG's `SYSTEM_PROMPT`, user = `x_t`,
//! assistant = `y_t` (both through [`crate::autorag::prompts::dialogue_messages`]). Tokenization goes segment by segment, cut exactly where
//! generation starts and stops at inference: everything up to and including `<|im_start|>assistant\n` is one
//! segment (no loss), the assistant content plus `<|im_end|>` is the next (loss), and so on. The model's own
//! tokens at inference are therefore exactly the tokens it is trained on, and the mask needs no offset
//! arithmetic. The concatenated segments are checked to equal the full rendered conversation.

use std::path::Path;

use anyhow::{bail, ensure, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sha2::{Digest, Sha256};

use crate::autorag::dialogue::Dialogue;
use crate::autorag::prompts::dialogue_queries;
use crate::model::{Message, Tokenizer};

/// One tokenized dialogue.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub id: String,
    pub ids: Vec<u32>,
    /// `loss[j]`: token `j` is a target (predicted from positions `..j`); true only on the model's turns.
    pub loss: Vec<bool>,
}

impl Example {
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    /// Number of target tokens (position 0 can never be one: nothing predicts it).
    pub fn targets(&self) -> usize {
        self.loss.iter().skip(1).filter(|&&l| l).count()
    }
    /// Keeps the first `max_len` tokens.
    pub fn truncate(&mut self, max_len: usize) {
        self.ids.truncate(max_len);
        self.loss.truncate(max_len);
    }
}

/// Reads `dialogues.jsonl` (one [`Dialogue`] per line; blank lines skipped). Errors name the file and line.
pub fn read_dialogues(path: &Path) -> Result<Vec<Dialogue>> {
    let rows = crate::io::read_jsonl::<Dialogue>(path, "Dialogue")?.strict()?;
    let mut out = Vec::new();
    for (line, d) in rows {
        if d.turns.is_empty() {
            bail!("{}:{}: dialogue '{}' has no turns", path.display(), line, d.id);
        }
        out.push(d);
    }
    ensure!(!out.is_empty(), "{}: no dialogues", path.display());
    Ok(out)
}

/// `dialogues` without repeats: a dialogue of a question that issued the same queries (SQuAD-normalised) as an
/// earlier dialogue of that question is dropped, as `synth autorag`'s rejection sampling drops a
/// `duplicate_dialogue` within one run. Dialogue sets of several synthesis runs over the same questions (e.g.
/// another `--seed`) are read in order and then this applied: the count dropped is returned beside.
pub fn distinct_dialogues(dialogues: Vec<Dialogue>) -> (Vec<Dialogue>, usize) {
    let mut seen: std::collections::HashSet<(String, Vec<String>)> = std::collections::HashSet::new();
    let n = dialogues.len();
    let kept: Vec<Dialogue> = dialogues
        .into_iter()
        .filter(|d| seen.insert((d.id.clone(), crate::autorag::dialogue::query_key(&dialogue_queries(&d.turns)))))
        .collect();
    let dropped = n - kept.len();
    (kept, dropped)
}

/// The first `n` dialogues of `dialogues` (in file order: the synthesis order), the cut moved on past the
/// dialogues of the same question (the same id, adjacent as `synth autorag` writes them): nested subsets for a
/// learning curve.
pub fn first_dialogues(mut dialogues: Vec<Dialogue>, n: usize) -> Vec<Dialogue> {
    let mut end = n.min(dialogues.len());
    while end > 0 && end < dialogues.len() && dialogues[end].id == dialogues[end - 1].id {
        end += 1;
    }
    dialogues.truncate(end);
    dialogues
}

/// Messages before the first user turn: Auto-RAG's system prompt.
const LEAD: usize = 1;

/// The chat messages of a dialogue: system = Auto-RAG's `SYSTEM_PROMPT`, then user = `x_t`, assistant = `y_t`;
/// the same function Auto-RAG inference renders its prompts with, so a fine-tuned model is trained on the
/// exact text it will be fed.
pub fn messages(d: &Dialogue) -> Vec<Message> {
    let m = crate::autorag::prompts::dialogue_messages(Some(crate::autorag::prompts::SYSTEM_PROMPT), &[], &d.turns);
    debug_assert_eq!(m.len(), LEAD + 2 * d.turns.len(), "every training turn has an output");
    m
}

/// Renders and tokenizes a dialogue; only the assistant contents and their end-of-turn token carry loss.
pub fn render(tok: &Tokenizer, d: &Dialogue) -> Result<Example> {
    let msgs = messages(d);
    let end = "<|im_end|>";
    let mut ids = Vec::new();
    let mut loss = Vec::new();
    if tok.add_bos {
        if let Some(b) = tok.bos_id {
            ids.push(b);
            loss.push(false);
        }
    }
    let push = |text: &str, is_loss: bool, ids: &mut Vec<u32>, loss: &mut Vec<bool>| -> Result<()> {
        let seg = tok.encode(text, false)?;
        loss.extend(std::iter::repeat_n(is_loss, seg.len()));
        ids.extend(seg);
        Ok(())
    };
    let mut done = String::new(); // text rendered so far
    for (t, turn) in d.turns.iter().enumerate() {
        // Prompt for turn t: everything through the assistant header.
        let prompt = tok.apply_chat_template(&msgs[..LEAD + 2 * t + 1], true);
        let Some(new) = prompt.strip_prefix(done.as_str()) else {
            bail!(
                "dialogue '{}': the chat template is not incremental (turn {t} does not extend turn {})",
                d.id,
                t.saturating_sub(1)
            );
        };
        push(new, false, &mut ids, &mut loss)?;
        let target = format!("{}{end}", turn.output);
        push(&target, true, &mut ids, &mut loss)?;
        let full = tok.apply_chat_template(&msgs[..LEAD + 2 * t + 2], false);
        let tail = full.strip_prefix(prompt.as_str()).and_then(|r| r.strip_prefix(target.as_str()));
        let Some(tail) = tail else {
            bail!("dialogue '{}': the chat template does not end an assistant turn with {end} (not ChatML?)", d.id);
        };
        push(tail, false, &mut ids, &mut loss)?;
        done = full;
    }
    Ok(Example { id: d.id.clone(), ids, loss })
}

/// Deterministic train/valid split: dialogues sorted by SHA-256 of their id; the first `ceil(fraction * n)`
/// (at least one when `fraction > 0` and `n >= 2`) are validation, the cut moved past dialogues that share the
/// last one's id (several dialogues of one question, `synth autorag --keep`), so a question's dialogues are all
/// on one side. Independent of file order and seed.
pub fn split_valid(ids: &[&str], fraction: f64) -> (Vec<usize>, Vec<usize>) {
    let mut order: Vec<(Vec<u8>, usize)> =
        ids.iter().enumerate().map(|(i, id)| (Sha256::digest(id.as_bytes()).to_vec(), i)).collect();
    order.sort();
    let n = ids.len();
    let mut nv = (fraction * n as f64).ceil() as usize;
    if fraction > 0.0 && n >= 2 {
        nv = nv.clamp(1, n - 1);
        // the first cut at or after nv between two ids, else the last before it (0: one id only, no split)
        let between = |k: &usize| order[*k - 1].0 != order[*k].0;
        nv = (nv..n).find(between).or_else(|| (1..nv).rev().find(between)).unwrap_or(0);
    } else {
        nv = 0;
    }
    let mut valid: Vec<usize> = order[..nv].iter().map(|x| x.1).collect();
    let mut train: Vec<usize> = order[nv..].iter().map(|x| x.1).collect();
    valid.sort();
    train.sort();
    (train, valid)
}

/// The batches of one epoch, as indices into `lengths`: shuffled with `(seed, epoch)`, grouped into windows of
/// `batch * 16`, sorted by length inside each window (so batches have similar lengths and little padding),
/// cut into batches, and the batch order shuffled again. Deterministic in `(seed, epoch)`.
pub fn epoch_batches(lengths: &[usize], batch: usize, seed: u64, epoch: usize) -> Vec<Vec<usize>> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(epoch as u64));
    let mut idx: Vec<usize> = (0..lengths.len()).collect();
    idx.shuffle(&mut rng);
    let mut batches = Vec::new();
    for window in idx.chunks(batch * 16) {
        let mut w = window.to_vec();
        w.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
        batches.extend(w.chunks(batch).map(|c| c.to_vec()));
    }
    batches.shuffle(&mut rng);
    batches
}

/// Batches for evaluation: sorted by length, no shuffling.
pub fn eval_batches(lengths: &[usize], batch: usize) -> Vec<Vec<usize>> {
    let mut idx: Vec<usize> = (0..lengths.len()).collect();
    idx.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    idx.chunks(batch).map(|c| c.to_vec()).collect()
}

/// A right-padded batch: `ids` is `[b, t]` row-major; `positions[k]` is the flat index `row * t + j` of the
/// position whose output predicts `targets[k]` (= the token at `j + 1`). Pads are never targets, and with causal
/// attention pads at the end of a row never influence its real tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub ids: Vec<i32>,
    pub b: usize,
    pub t: usize,
    pub positions: Vec<i64>,
    pub targets: Vec<i64>,
    /// The first `real` entries of `positions`/`targets` are the batch's targets; the rest (only in a
    /// [`Batch::padded`] batch) fill the list to a fixed length and carry no loss.
    pub real: usize,
    /// Real (non-pad) tokens in the batch.
    pub tokens: usize,
    /// Packed rows ([`make_packed_batch`]): the dialogue each cell belongs to (`b * t`, pads [`PAD_SEQ`]); `None`:
    /// one dialogue per row.
    pub seq: Option<Vec<u32>>,
}

/// The sequence number of pad cells in a packed batch.
pub const PAD_SEQ: u32 = u32::MAX;

/// How training and validation shape their batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shapes {
    /// As long as the longest row, with as many rows and targets as the batch has.
    Tight,
    /// Padded to a few fixed shapes ([`Batch::padded`]), so that a device which compiles a kernel for every new
    /// shape (CUDA through CubeCL) compiles each once.
    Static { rows: usize, max_len: usize },
}

impl Shapes {
    pub fn apply(self, batch: Batch, pad_id: u32) -> Batch {
        match self {
            Shapes::Tight => batch,
            Shapes::Static { rows, max_len } => batch.padded(rows, max_len, pad_id),
        }
    }
}

/// `n` rounded up to a power of two, at least 64, and at most `cap` (unless `n` itself is larger).
pub fn bucket(n: usize, cap: usize) -> usize {
    n.max(64).next_power_of_two().min(cap).max(n)
}

impl Batch {
    /// The same batch at a fixed shape: its rows rounded up to a power of two, at most `rows` (all-pad rows added
    /// below; never fewer than it has), the length rounded up to [`bucket`]`(t, max_len)`, and the target list to
    /// [`bucket`]`(targets, rows * length)`, the added entries pointing at position 0 with target 0 and outside
    /// `real`. The loss ([`super::loss::nll_sum`]) weights them 0, so it and its gradients are those of the unpadded
    /// batch, up to the order of float additions. With `max_len` dialogues and `rows` rows there are at most
    /// `log2(max_len / 64) + 1` lengths, `log2(rows) + 1` row counts (a full micro-batch has `rows`; fewer come
    /// at an epoch's end, and from packing, where an update's rows rarely fill its last micro-batch), and as many
    /// target counts per shape.
    pub fn padded(&self, rows: usize, max_len: usize, pad_id: u32) -> Batch {
        let (b, t) = (self.b.next_power_of_two().min(rows).max(self.b), bucket(self.t, max_len));
        let ids = self.widen(&self.ids, b, t, pad_id as i32);
        let mut positions: Vec<i64> = self.positions[..self.real]
            .iter()
            .map(|&p| (p as usize / self.t * t + p as usize % self.t) as i64)
            .collect();
        let mut targets = self.targets[..self.real].to_vec();
        let n = bucket(self.real, b * t);
        positions.resize(n, 0);
        targets.resize(n, 0);
        let seq = self.seq.as_ref().map(|seq| self.widen(seq, b, t, PAD_SEQ));
        Batch { ids, b, t, positions, targets, real: self.real, tokens: self.tokens, seq }
    }

    /// A per-cell `[self.b, self.t]` vector laid out as `[b, t]` (rows and length at least this batch's), the added
    /// cells `fill`.
    fn widen<T: Copy>(&self, cells: &[T], b: usize, t: usize, fill: T) -> Vec<T> {
        let mut out = vec![fill; b * t];
        for r in 0..self.b {
            out[r * t..r * t + self.t].copy_from_slice(&cells[r * self.t..(r + 1) * self.t]);
        }
        out
    }
}

/// Packs dialogues (`idx`, with `lengths[i]` tokens each) into rows of at most `row_len` tokens: first fit, longest
/// first (ties in the order given), a dialogue longer than `row_len` alone in a row. Returns the rows' dialogues.
pub fn pack_rows(lengths: &[usize], idx: &[usize], row_len: usize) -> Vec<Vec<usize>> {
    let mut order = idx.to_vec();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    let mut rows: Vec<(usize, Vec<usize>)> = Vec::new();
    for i in order {
        match rows.iter_mut().find(|(used, _)| used + lengths[i] <= row_len) {
            Some((used, row)) => {
                *used += lengths[i];
                row.push(i);
            }
            None => rows.push((lengths[i], vec![i])),
        }
    }
    rows.into_iter().map(|(_, row)| row).collect()
}

/// A batch of packed rows: row `r` holds `rows[r]`'s dialogues one after another, then pads; each dialogue starts
/// again at position 0 and attends only to itself ([`crate::model::llama::Packed`]), so its loss terms are those it
/// has alone in a row. Targets are listed row by row, dialogue by dialogue.
pub fn make_packed_batch(rows: &[Vec<&Example>], pad_id: u32) -> Batch {
    let b = rows.len();
    let t = rows.iter().map(|r| r.iter().map(|e| e.len()).sum::<usize>()).max().unwrap_or(0);
    let mut ids = vec![pad_id as i32; b * t];
    let mut seq = vec![PAD_SEQ; b * t];
    let (mut positions, mut targets, mut tokens, mut n) = (Vec::new(), Vec::new(), 0, 0u32);
    for (r, row) in rows.iter().enumerate() {
        let mut at = r * t;
        for e in row {
            for (j, &id) in e.ids.iter().enumerate() {
                ids[at + j] = id as i32;
                seq[at + j] = n;
                if j > 0 && e.loss[j] {
                    positions.push((at + j - 1) as i64);
                    targets.push(id as i64);
                }
            }
            at += e.len();
            tokens += e.len();
            n += 1;
        }
    }
    let real = targets.len();
    Batch { ids, b, t, positions, targets, real, tokens, seq: Some(seq) }
}

/// A right-padded batch, one dialogue per row: the packed layout with a dialogue to a row, where every dialogue
/// starts at its row's first cell, without the sequence numbers (plain causal attention).
pub fn make_batch(examples: &[&Example], pad_id: u32) -> Batch {
    let rows: Vec<Vec<&Example>> = examples.iter().map(|&e| vec![e]).collect();
    Batch { seq: None, ..make_packed_batch(&rows, pad_id) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autorag::dialogue::Turn;
    use std::collections::HashSet;

    fn smollm_tokenizer() -> Option<Tokenizer> {
        Some(Tokenizer::from_file(&crate::testing::require("models/smollm2-135m-instruct/tokenizer.json")?).unwrap())
    }

    fn dialogue() -> Dialogue {
        Dialogue {
            id: "q1".into(),
            dataset: "hotpotqa".into(),
            question: "Who directed the film?".into(),
            answers: vec!["Jane Doe".into()],
            turns: vec![
                Turn {
                    input: "Who directed the film?".into(),
                    output: "Analysis: I need the director.\nRetrieval Query: film director".into(),
                },
                Turn {
                    input: "Retrieved Document_1: The film was directed by Jane Doe. ".into(),
                    output: " Jane Doe directed it.\nFinal Answer: Jane Doe".into(),
                },
            ],
            iterations: 1,
            final_answer: "Jane Doe".into(),
        }
    }

    #[test]
    fn render_masks_exactly_the_assistant_turns() {
        let Some(mut tok) = smollm_tokenizer() else { return };
        let d = dialogue();
        let ex = render(&tok, &d).unwrap();
        assert_eq!(ex.ids.len(), ex.loss.len());
        // The whole sequence is the chat-template rendering of the conversation, led by Auto-RAG's system
        // prompt, not the model's default one (which inference never shows a fine-tuned model).
        let full = tok.apply_chat_template(&messages(&d), false);
        assert_eq!(tok.decode(&ex.ids), full);
        let sys =
            format!("<|im_start|>system\n{}<|im_end|>\n<|im_start|>user\n", crate::autorag::prompts::SYSTEM_PROMPT);
        assert!(full.starts_with(&sys), "Auto-RAG system prompt expected: {full}");
        tok.default_system = Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face".into());
        assert_eq!(render(&tok, &d).unwrap(), ex, "a template default must not change the rendering");
        // The loss tokens are exactly the assistant contents, each followed by <|im_end|>.
        let loss_ids: Vec<u32> = ex.ids.iter().zip(&ex.loss).filter(|(_, &l)| l).map(|(&i, _)| i).collect();
        let want: String = d.turns.iter().map(|t| format!("{}<|im_end|>", t.output)).collect();
        assert_eq!(tok.decode(&loss_ids), want);
        // Contiguous runs of loss tokens: one per assistant turn, each ending with <|im_end|>.
        let im_end = tok.token_id("<|im_end|>").unwrap();
        let mut runs = Vec::new();
        let mut cur: Vec<u32> = Vec::new();
        for (&i, &l) in ex.ids.iter().zip(&ex.loss) {
            if l {
                cur.push(i);
            } else if !cur.is_empty() {
                runs.push(std::mem::take(&mut cur));
            }
        }
        assert_eq!(runs.len(), 2);
        for (r, t) in runs.iter().zip(&d.turns) {
            assert_eq!(*r.last().unwrap(), im_end);
            assert_eq!(tok.decode(&r[..r.len() - 1]), t.output);
        }
        // The user's documents and the question never carry loss.
        let user_ids: Vec<u32> = ex.ids.iter().zip(&ex.loss).filter(|(_, &l)| !l).map(|(&i, _)| i).collect();
        assert!(tok.decode(&user_ids).contains("Retrieved Document_1"));
        // The assistant's tokens are those generation would produce after the prompt: the prompt of turn 0
        // encodes to exactly the ids before the first loss token.
        let prompt = tok.apply_chat_template(&messages(&d)[..LEAD + 1], true);
        let first = ex.loss.iter().position(|&l| l).unwrap();
        assert_eq!(tok.encode(&prompt, true).unwrap(), ex.ids[..first]);
    }

    #[test]
    fn batch_is_right_padded_and_targets_skip_pads() {
        let a = Example { id: "a".into(), ids: vec![5, 6, 7, 8], loss: vec![false, false, true, true] };
        let b = Example { id: "b".into(), ids: vec![9, 10], loss: vec![false, true] };
        let batch = make_batch(&[&a, &b], 0);
        assert_eq!((batch.b, batch.t), (2, 4));
        assert_eq!(batch.ids, vec![5, 6, 7, 8, 9, 10, 0, 0]);
        // a: token 7 predicted at position 1, token 8 at 2; b: token 10 at row 1 position 0 -> flat 4.
        assert_eq!(batch.positions, vec![1, 2, 4]);
        assert_eq!(batch.targets, vec![7, 8, 10]);
        assert_eq!((batch.tokens, batch.real), (6, 3));
        assert_eq!(a.targets() + b.targets(), batch.targets.len());
    }

    #[test]
    fn rows_are_packed_first_fit_longest_first() {
        // lengths 5, 3, 4, 2, 6 into rows of 8, longest first: 6 opens row 0, 5 row 1, 4 row 2 (fits neither),
        // 3 joins row 1 (5 + 3 = 8), 2 joins row 0 (6 + 2 = 8)
        let lengths = [5, 3, 4, 2, 6];
        assert_eq!(pack_rows(&lengths, &[0, 1, 2, 3, 4], 8), vec![vec![4, 3], vec![0, 1], vec![2]]);
        // only the given dialogues; equal lengths keep the given order; one longer than a row sits alone
        assert_eq!(pack_rows(&lengths, &[1, 0], 8), vec![vec![0, 1]]);
        assert_eq!(pack_rows(&[3, 3, 3], &[2, 0, 1], 6), vec![vec![2, 0], vec![1]]);
        assert_eq!(pack_rows(&[9, 2], &[0, 1], 8), vec![vec![0], vec![1]]);
        assert!(pack_rows(&lengths, &[], 8).is_empty());
    }

    #[test]
    fn packed_rows_hold_each_dialogue_from_its_own_first_token() {
        let a = Example { id: "a".into(), ids: vec![5, 6, 7, 8], loss: vec![false, false, true, true] };
        let b = Example { id: "b".into(), ids: vec![9, 10], loss: vec![false, true] };
        let c = Example { id: "c".into(), ids: vec![11, 12, 13], loss: vec![false, true, false] };
        let batch = make_packed_batch(&[vec![&a, &b], vec![&c]], 0);
        assert_eq!((batch.b, batch.t), (2, 6));
        assert_eq!(batch.ids, vec![5, 6, 7, 8, 9, 10, 11, 12, 13, 0, 0, 0]);
        assert_eq!(batch.seq, Some(vec![0, 0, 0, 0, 1, 1, 2, 2, 2, PAD_SEQ, PAD_SEQ, PAD_SEQ]));
        // a: 7 at 1, 8 at 2; b (from cell 4): 10 at 4; c (row 1, from cell 6): 12 at 6. b's first token, 9, is
        // no target: nothing before it in its dialogue predicts it.
        assert_eq!(batch.positions, vec![1, 2, 4, 6]);
        assert_eq!(batch.targets, vec![7, 8, 10, 12]);
        assert_eq!((batch.tokens, batch.real), (9, 4));
        // padded to a fixed shape (2 rows stay 2 under a cap of 8; the length to 64): the added cells are pads of no
        // sequence, the targets at the same tokens
        let p = batch.padded(8, 100, 0);
        assert_eq!((p.b, p.t), (2, 64));
        let seq = p.seq.as_ref().unwrap();
        assert_eq!(&seq[..6], &[0, 0, 0, 0, 1, 1]);
        assert_eq!(&seq[64..67], &[2, 2, 2]);
        assert_eq!(seq.iter().filter(|&&s| s != PAD_SEQ).count(), 9);
        for k in 0..p.real {
            assert_eq!(p.ids[p.positions[k] as usize + 1] as i64, p.targets[k]);
        }
        assert_eq!(make_batch(&[&a, &b], 0).seq, None);
    }

    #[test]
    fn padded_batches_keep_every_target_at_its_token() {
        assert_eq!((bucket(1, 1024), bucket(64, 1024), bucket(65, 1024), bucket(700, 1000)), (64, 64, 128, 1000));
        assert_eq!(bucket(0, 8), 8, "capped");
        assert_eq!(bucket(9, 8), 9, "never below n");
        let a = Example { id: "a".into(), ids: vec![5, 6, 7, 8], loss: vec![false, false, true, true] };
        let b = Example { id: "b".into(), ids: vec![9, 10], loss: vec![false, true] };
        let tight = make_batch(&[&a, &b, &b], 0);
        let p = tight.padded(8, 100, 0);
        // 3 rows rounded up to 4 (at most 8) of bucket(4, 100) = 64 tokens; targets padded to bucket(4, 256) = 64
        assert_eq!((p.b, p.t, p.real, p.tokens), (4, 64, 4, 8));
        assert_eq!((p.positions.len(), p.targets.len()), (64, 64));
        // a's targets at row 0 positions 1, 2; b's at rows 1 and 2 position 0 -> flat 64, 128
        assert_eq!(&p.positions[..4], &[1, 2, 64, 128]);
        assert_eq!(&p.targets[..4], &[7, 8, 10, 10]);
        assert!(p.positions[4..].iter().all(|&x| x == 0) && p.targets[4..].iter().all(|&x| x == 0));
        for (&pos, &tgt) in p.positions[..p.real].iter().zip(&p.targets) {
            // the token after each target position is the target
            assert_eq!(p.ids[pos as usize + 1] as i64, tgt);
        }
        assert_eq!(&p.ids[..4], &[5, 6, 7, 8]);
        assert_eq!(&p.ids[64..66], &[9, 10]);
        assert_eq!(p.ids.iter().filter(|&&x| x != 0).count(), 8);
        // rows: a power of two up to the cap (3 -> 3 under a cap of 3, 2 -> 2, 5 -> 6 under 6), never fewer
        assert_eq!(tight.padded(3, 100, 0).b, 3);
        assert_eq!(make_batch(&[&a, &b], 0).padded(8, 100, 0).b, 2);
        assert_eq!(make_batch(&[&a, &b, &b, &a, &a], 0).padded(6, 100, 0).b, 6);
        assert_eq!(tight.padded(2, 100, 0).b, 3);
        // Tight leaves a batch as it is; padding twice changes nothing more
        assert_eq!(Shapes::Tight.apply(tight.clone(), 0), tight);
        assert_eq!(Shapes::Static { rows: 8, max_len: 100 }.apply(p.clone(), 0), p);
    }

    #[test]
    fn epoch_batches_cover_everything_once_and_are_deterministic() {
        let lengths: Vec<usize> = (0..103).map(|i| (i * 37) % 91 + 1).collect();
        let e0 = epoch_batches(&lengths, 4, 1, 0);
        assert_eq!(e0, epoch_batches(&lengths, 4, 1, 0));
        assert_ne!(e0, epoch_batches(&lengths, 4, 1, 1));
        let mut all: Vec<usize> = e0.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(all, (0..103).collect::<Vec<_>>());
        // grouped by length: inside a batch lengths are sorted descending
        for b in &e0 {
            assert!(b.windows(2).all(|w| lengths[w[0]] >= lengths[w[1]]));
        }
    }

    #[test]
    fn split_is_stable_and_disjoint() {
        let ids: Vec<String> = (0..50).map(|i| format!("id{i}")).collect();
        let refs: Vec<&str> = ids.iter().map(|s| s.as_str()).collect();
        let (t, v) = split_valid(&refs, 0.1);
        assert_eq!(v.len(), 5);
        assert_eq!(t.len() + v.len(), 50);
        assert!(v.iter().all(|i| !t.contains(i)));
        // the same ids in another order fall in the same split
        let mut rev = refs.clone();
        rev.reverse();
        let (_, v2) = split_valid(&rev, 0.1);
        let mut a: Vec<&str> = v.iter().map(|&i| refs[i]).collect();
        let mut b: Vec<&str> = v2.iter().map(|&i| rev[i]).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
        assert_eq!(split_valid(&refs[..2], 0.01).1.len(), 1);
        // first_dialogues: a question's dialogues are not split
        let d = |id: &str| Dialogue { id: id.into(), ..dialogue() };
        let ds = vec![d("a"), d("b"), d("b"), d("c")];
        let ids = |v: Vec<Dialogue>| v.into_iter().map(|x| x.id).collect::<Vec<_>>();
        assert_eq!(ids(first_dialogues(ds.clone(), 1)), ["a"]);
        assert_eq!(ids(first_dialogues(ds.clone(), 2)), ["a", "b", "b"]);
        assert_eq!(ids(first_dialogues(ds.clone(), 9)), ["a", "b", "b", "c"]);
        assert!(first_dialogues(ds, 0).is_empty());
        // distinct_dialogues: a repeat is the same question with the same queries up to SQuAD normalisation
        let asking = |id: &str, qs: &[&str], answer: &str| {
            let mut turns: Vec<Turn> = qs
                .iter()
                .enumerate()
                .map(|(t, q)| Turn {
                    input: format!("x{t}"),
                    output: crate::autorag::prompts::model_output(t, "r", crate::autorag::prompts::Next::Query(q)),
                })
                .collect();
            let last =
                crate::autorag::prompts::model_output(qs.len(), "r", crate::autorag::prompts::Next::Answer(answer));
            turns.push(Turn { input: "docs".into(), output: last });
            Dialogue { id: id.into(), turns, iterations: qs.len(), ..dialogue() }
        };
        assert_eq!(
            dialogue_queries(&asking("a", &["Who is X?", "X's birthplace"], "Y").turns),
            ["Who is X?", "X's birthplace"]
        );
        assert!(dialogue_queries(&asking("a", &[], "Y").turns).is_empty());
        assert_eq!(dialogue_queries(&dialogue().turns), ["film director"], "any label ending in 'Query:'");
        let runs = vec![
            asking("a", &["Who is X?"], "Y"),
            asking("b", &["Who is X?"], "Y"),
            asking("a", &["who is x"], "Z"), // a's queries again (another answer text): dropped
            asking("a", &["Who is X?", "where"], "Y"),
            asking("a", &[], "Y"),
            asking("a", &[], "yes"), // no queries again: dropped
        ];
        let (kept, dropped) = distinct_dialogues(runs.clone());
        assert_eq!(dropped, 2);
        assert_eq!(kept, [runs[0].clone(), runs[1].clone(), runs[3].clone(), runs[4].clone()]);
        // several dialogues of one question stay on one side: each id three times, cut after whole questions
        let tripled: Vec<&str> = refs.iter().flat_map(|r| [*r; 3]).collect();
        let (t, v) = split_valid(&tripled, 0.1);
        assert_eq!(v.len(), 15, "ceil(0.1 * 150) = 15 = 5 questions");
        let (vt, vv): (HashSet<&str>, HashSet<&str>) =
            (t.iter().map(|&i| tripled[i]).collect(), v.iter().map(|&i| tripled[i]).collect());
        assert!(vt.is_disjoint(&vv) && vv.len() == 5);
        let (t, v) = split_valid(&tripled, 0.11);
        assert_eq!((v.len(), t.len()), (18, 132), "ceil(16.5) = 17 moved on to the question's end");
        assert_eq!(split_valid(&["a", "a", "a"], 0.5), (vec![0, 1, 2], vec![]), "one question: no split");
        // 0.9 of 3 asks for 2 (at most n - 1): moved on past a question's end, or back when none follows
        let abb = ["a", "b", "b"];
        let (t, v) = split_valid(&abb, 0.9);
        assert!(!t.is_empty() && !v.is_empty() && t.iter().all(|&i| v.iter().all(|&j| abb[i] != abb[j])));
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dialogues.jsonl");
        let good = serde_json::to_string(&dialogue()).unwrap();
        std::fs::write(&p, format!("{good}\n\n{{\"id\": \"x\"}}\n")).unwrap();
        let err = format!("{:#}", read_dialogues(&p).unwrap_err());
        assert!(err.contains("dialogues.jsonl:3"), "{err}");
        let err = format!("{:#}", read_dialogues(&dir.path().join("missing.jsonl")).unwrap_err());
        assert!(err.contains("missing.jsonl"), "{err}");
        std::fs::write(&p, format!("{good}\n")).unwrap();
        assert_eq!(read_dialogues(&p).unwrap().len(), 1);
    }
}
