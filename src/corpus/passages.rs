//! One passage stream over every corpus layout `ragtime index` reads, with DPR-style splitting of
//! articles into passages of N words that keep their article's title.
//!
//! Layouts (detected per file from its first non-blank line, or forced with [`CorpusFormat`]):
//! - DPR `psgs_w100.tsv` ([`super::dpr`]): rows are passages already and are not split again;
//! - JSON lines ([`super::jsonl`]): generic `{id, title, text}`, WikiExtractor `--json`, FlashRAG
//!   `{id, contents}`;
//! - WikiExtractor `<doc id=.. title=..>` blocks ([`super::wikiextractor`]). In this form a malformed
//!   block always stops the read (there is no line to skip to safely).
//!
//! Files are read in [`super::list_files`] order, so the stream is the same on every run, which is
//! what lets an interrupted `ragtime index` resume by skipping the passages it already committed.

use std::io::BufRead;
use std::path::Path;

use anyhow::{bail, Context, Result};

pub use super::OnBadLine;
use super::{dpr, jsonl, list_files, open_text, wikiextractor};

/// Corpus file layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CorpusFormat {
    /// DPR `id\ttext\ttitle`.
    Dpr,
    /// JSON lines (generic, WikiExtractor `--json`, FlashRAG).
    Jsonl,
    /// WikiExtractor `<doc>` blocks.
    Wikidoc,
}

impl std::str::FromStr for CorpusFormat {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "dpr" | "tsv" => Ok(Self::Dpr),
            "jsonl" | "json" => Ok(Self::Jsonl),
            "wikidoc" | "doc" => Ok(Self::Wikidoc),
            _ => Err(format!("unknown corpus format {s:?} (expected dpr, jsonl or wikidoc)")),
        }
    }
}

/// Guess a file's layout from its first non-blank line.
pub fn detect_format(file: &Path) -> Result<CorpusFormat> {
    let reader = open_text(file)?;
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: cannot read line", file.display(), i + 1))?;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if t.starts_with('{') {
            return Ok(CorpusFormat::Jsonl);
        }
        if t.starts_with("<doc") {
            return Ok(CorpusFormat::Wikidoc);
        }
        if line.split('\t').count() == 3 {
            return Ok(CorpusFormat::Dpr);
        }
        bail!(
            "{}:{}: cannot tell the corpus layout: expected a DPR `id<TAB>text<TAB>title` row, a JSON line or a \
             WikiExtractor <doc> header (force one with --format)",
            file.display(),
            i + 1
        );
    }
    bail!("{}: file is empty", file.display())
}

/// A passage as it goes into the index.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusPassage {
    pub id: String,
    pub title: String,
    pub text: String,
}

/// How to read a corpus.
#[derive(Debug, Clone, Copy)]
pub struct CorpusOptions {
    /// `None`: detect per file.
    pub format: Option<CorpusFormat>,
    /// Words per passage when splitting articles (DPR: 100). 0 = do not split.
    pub passage_words: usize,
    pub on_bad: OnBadLine,
}

/// Split `text` into passages of `n` whitespace-separated words (the last one shorter), words
/// re-joined by single spaces, as DPR built `psgs_w100.tsv`. `n == 0` keeps the text whole.
pub fn split_words(text: &str, n: usize) -> Vec<String> {
    if n == 0 {
        let t = text.split_whitespace().collect::<Vec<_>>().join(" ");
        return if t.is_empty() { vec![] } else { vec![t] };
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    words.chunks(n).map(|c| c.join(" ")).collect()
}

/// Split one document into passages. A document that fits in one passage keeps its id; a longer one
/// gets ids `{id}_0`, `{id}_1`, ... (DPR numbered its passages globally; ids here stay traceable to
/// the article instead).
pub fn split_document(id: &str, title: &str, body: &str, n: usize) -> Vec<CorpusPassage> {
    let chunks = split_words(body, n);
    let single = chunks.len() == 1;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, text)| CorpusPassage {
            id: if single { id.to_string() } else { format!("{id}_{i}") },
            title: title.to_string(),
            text,
        })
        .collect()
}

/// Stream every passage of the corpus at `path` (file or folder tree) to `f`; `f` returns `Ok(false)`
/// to stop. Skipped lines are added to `skipped`.
pub fn for_each_passage(
    path: &Path,
    opts: CorpusOptions,
    skipped: &mut u64,
    mut f: impl FnMut(CorpusPassage) -> Result<bool>,
) -> Result<()> {
    for_each_passage_at(path, opts, skipped, |p, _| f(p))
}

/// How far a pass over a corpus has read: bytes of its files read (compressed bytes for `.bz2`), of their size
/// on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CorpusPosition {
    pub bytes_read: u64,
    pub bytes_total: u64,
}

impl CorpusPosition {
    /// The progress line's tail: `"30% read, 0m 35s left"`, the time left at the rate this process has
    /// read since `from` (the position at which its own work began, so that passages a resumed job passes over
    /// do not count as speed) over `elapsed` seconds.
    pub fn describe(&self, from: u64, elapsed: f64) -> String {
        let total = self.bytes_total.max(1);
        let read = self.bytes_read.min(total);
        let (_, left) = crate::progress::rate_at(elapsed, read.saturating_sub(from) as usize, (total - read) as usize);
        let share = 100.0 * read as f64 / total as f64;
        if read > from {
            format!("{share:.0}% read, {} left", crate::progress::hms(left))
        } else {
            format!("{share:.0}% read")
        }
    }
}

/// Where and when this process's own work on a corpus began (its first passage that a resumed job does not pass
/// over as done), so that the time left is read at its own rate ([`CorpusPosition::describe`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnStart(Option<(u64, std::time::Instant)>);

impl OwnStart {
    /// Records `at`, now, as the start; later calls keep the first.
    pub fn mark(&mut self, at: CorpusPosition) {
        self.0.get_or_insert((at.bytes_read, std::time::Instant::now()));
    }

    /// [`CorpusPosition::describe`] of `at` from the start (before it, the share read and no time left).
    pub fn describe(&self, at: CorpusPosition) -> String {
        match self.0 {
            Some((from, t)) => at.describe(from, t.elapsed().as_secs_f64()),
            None => at.describe(at.bytes_read, 0.0),
        }
    }
}

/// [`for_each_passage`], handing `f` with each passage how far the pass has read ([`CorpusPosition`]: the
/// sizes of the files before it, and the bytes of its own file its reader has taken, which run up to a read
/// buffer ahead of the passage).
pub fn for_each_passage_at(
    path: &Path,
    opts: CorpusOptions,
    skipped: &mut u64,
    mut f: impl FnMut(CorpusPassage, CorpusPosition) -> Result<bool>,
) -> Result<()> {
    let files = list_files(path)?;
    if files.is_empty() {
        bail!("{}: no corpus files found", path.display());
    }
    let sizes = files
        .iter()
        .map(|p| Ok(std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?.len()))
        .collect::<Result<Vec<u64>>>()?;
    let bytes_total = sizes.iter().sum();
    let n = opts.passage_words;
    let mut before = 0u64;
    for (file, size) in files.iter().zip(&sizes) {
        let at = |o: &wikiextractor::Origin| CorpusPosition { bytes_read: before + o.offset.min(*size), bytes_total };
        let format = match opts.format {
            Some(f) => f,
            None => detect_format(file)?,
        };
        let go_on = match format {
            CorpusFormat::Dpr => dpr::for_each_row(file, opts.on_bad, skipped, |r, o| {
                f(CorpusPassage { id: r.id, title: r.title, text: r.text }, at(o))
            })?,
            CorpusFormat::Jsonl => jsonl::for_each_doc(file, opts.on_bad, skipped, |d, o| {
                for p in split_document(&d.id, &d.title, d.body(), n) {
                    if !f(p, at(o))? {
                        return Ok(false);
                    }
                }
                Ok(true)
            })?,
            CorpusFormat::Wikidoc => {
                let mut go_on = true;
                wikiextractor::for_each_article(file, |a, o| {
                    for p in split_document(&a.id, &a.title, a.body(), n) {
                        if !f(p, at(o))? {
                            go_on = false;
                            return Ok(false);
                        }
                    }
                    Ok(true)
                })?;
                go_on
            }
        };
        if !go_on {
            break;
        }
        before += size;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_into_n_word_passages_keeping_title() {
        assert_eq!(split_words("a b  c\nd e", 2), vec!["a b", "c d", "e"]);
        assert_eq!(split_words("  ", 2), Vec::<String>::new());
        assert_eq!(split_words("a  b", 0), vec!["a b"]);
        let ps = split_document("7", "T", "w1 w2 w3", 2);
        assert_eq!(ps.len(), 2);
        assert_eq!((ps[0].id.as_str(), ps[0].title.as_str(), ps[0].text.as_str()), ("7_0", "T", "w1 w2"));
        assert_eq!((ps[1].id.as_str(), ps[1].text.as_str()), ("7_1", "w3"));
        assert_eq!(split_document("8", "T", "short", 100)[0].id, "8");
    }

    #[test]
    fn position_describes_share_and_time_left_by_hand() {
        let at = CorpusPosition { bytes_read: 300, bytes_total: 1000 };
        // 200 bytes of this process's own in 10 s: 20 bytes/s, 700 left -> 35 s
        assert_eq!(at.describe(100, 10.0), "30% read, 0m 35s left");
        assert_eq!(at.describe(300, 10.0), "30% read", "no rate before this process has read anything");
        assert_eq!(CorpusPosition { bytes_read: 1200, bytes_total: 1000 }.describe(0, 5.0), "100% read, 0m 00s left");
        assert_eq!(CorpusPosition::default().describe(0, 1.0), "0% read", "an empty corpus");
        // OwnStart: the share alone before this process's first own passage, then the time left from the first mark
        let mut own = OwnStart::default();
        assert_eq!(own.describe(at), "30% read");
        own.mark(CorpusPosition { bytes_read: 100, bytes_total: 1000 });
        own.mark(at);
        assert_eq!(own.0.map(|(b, _)| b), Some(100), "a later mark keeps the first");
        assert!(own.describe(at).starts_with("30% read, "), "{}", own.describe(at));
    }

    /// The positions a pass hands out rise to the corpus's size on disk, file after file; a `.bz2` file counts
    /// its compressed bytes (the size on disk), not the text it holds.
    #[test]
    fn positions_rise_to_the_corpus_size_on_disk() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let rows: String = (0..3000).map(|i| format!("{i}\tpassage number {i} of the corpus\tT{i}\n")).collect();
        std::fs::write(root.join("a.tsv"), format!("id\ttext\ttitle\n{rows}")).unwrap();
        let docs: String =
            (0..2000).map(|i| format!("{{\"id\":\"d{i}\",\"title\":\"D\",\"text\":\"doc {i} words\"}}\n")).collect();
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
        bz.write_all(docs.as_bytes()).unwrap();
        std::fs::write(root.join("b.jsonl.bz2"), bz.finish().unwrap()).unwrap();
        let sizes: Vec<u64> =
            ["a.tsv", "b.jsonl.bz2"].iter().map(|f| std::fs::metadata(root.join(f)).unwrap().len()).collect();
        assert!(sizes[1] < docs.len() as u64 / 4, "compressed");
        let opts = CorpusOptions { format: None, passage_words: 100, on_bad: OnBadLine::Stop };
        let mut seen: Vec<(String, CorpusPosition)> = Vec::new();
        for_each_passage_at(root, opts, &mut 0, |p, at| {
            seen.push((p.id, at));
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen.len(), 5000);
        let total = sizes[0] + sizes[1];
        assert!(seen.iter().all(|(_, at)| at.bytes_total == total));
        assert!(seen.windows(2).all(|w| w[0].1.bytes_read <= w[1].1.bytes_read), "positions never go back");
        let first_b = seen.iter().position(|(id, _)| id.starts_with('d')).unwrap();
        assert!(seen[first_b - 1].1.bytes_read <= sizes[0], "the first file's positions stay within its size");
        assert!(seen[0].1.bytes_read < sizes[0], "the first passage is read before the whole file");
        assert!(seen[first_b].1.bytes_read > sizes[0], "the second file's start past the first file");
        assert_eq!(seen[4999].1.bytes_read, total, "the last passage: every byte read");
    }

    #[test]
    fn reads_every_layout_in_one_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("AA")).unwrap();
        std::fs::write(
            root.join("AA/wiki_00"),
            "{\"id\":\"1\",\"url\":\"u\",\"title\":\"Ada\",\"text\":\"Ada\\n\\none two three\"}\n",
        )
        .unwrap();
        std::fs::write(root.join("AA/wiki_01"), "<doc id=\"2\" url=\"u\" title=\"Bob\">\nBob\n\nfour five\n</doc>\n")
            .unwrap();
        std::fs::write(root.join("b.tsv"), "id\ttext\ttitle\n9\tsix seven eight\tCy\n").unwrap();
        let mut got = Vec::new();
        let opts = CorpusOptions { format: None, passage_words: 2, on_bad: OnBadLine::Stop };
        for_each_passage(root, opts, &mut 0, |p| {
            got.push(format!("{}|{}|{}", p.id, p.title, p.text));
            Ok(true)
        })
        .unwrap();
        // DPR rows are not re-split.
        assert_eq!(got, vec!["1_0|Ada|one two", "1_1|Ada|three", "2|Bob|four five", "9|Cy|six seven eight"]);
        std::fs::write(root.join("c.txt"), "just words\n").unwrap();
        let err = for_each_passage(root, opts, &mut 0, |_| Ok(true)).unwrap_err();
        assert!(format!("{err:#}").contains("c.txt:1: cannot tell"), "{err:#}");
    }
}
