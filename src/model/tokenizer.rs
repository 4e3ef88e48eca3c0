//! Tokenizers: Hugging Face `tokenizer.json`, or one built from a GGUF file's own vocabulary and merges, plus the
//! chat layout (ChatML or Llama 3's, [`ChatFormat`]) and per-token byte strings (so streamed text never splits a
//! UTF-8 character).

use std::collections::HashSet;
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::gguf::GgufFile;

/// A chat turn.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// The conversation layout a model was trained on, read from its chat template (`tokenizer_config.json`'s
/// `chat_template`, a GGUF's `tokenizer.chat_template`). ragtime runs no Jinja: it writes the layouts it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChatFormat {
    /// `<|im_start|>role\ncontent<|im_end|>\n` (SmolLM2, Qwen2.5), with the template's default system prompt;
    /// also where a model ships no template.
    #[default]
    ChatMl,
    /// Llama 3: `<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>`, each content trimmed.
    /// `dated_system`: the templates of Llama 3.1 and later open with a system block, `Cutting Knowledge Date:
    /// December 2023\nToday Date: 26 Jul 2024\n\n` and then the system message (empty where there is none);
    /// 3.2's template dates it the day it renders, ragtime keeps 3.1's fixed date so a prompt is the same any day.
    Llama3 { dated_system: bool },
}

impl ChatFormat {
    /// The layout a Jinja chat template writes, or `None` for one ragtime does not know.
    pub fn of_template(template: &str) -> Option<ChatFormat> {
        if template.contains("<|start_header_id|>") {
            Some(ChatFormat::Llama3 { dated_system: template.contains("Cutting Knowledge Date") })
        } else if template.contains("<|im_start|>") {
            Some(ChatFormat::ChatMl)
        } else {
            None
        }
    }
}

/// Token ids and the character span `(start, end)` of each.
pub type IdsWithOffsets = (Vec<u32>, Vec<(usize, usize)>);

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Message { role: role.to_string(), content: content.into() }
    }
}

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Bytes each token stands for (byte-level BPE undone; special tokens as their text).
    token_bytes: Vec<Vec<u8>>,
    special: HashSet<u32>,
    /// Ids that end a generation (EOS, `<|im_end|>`, `<|endoftext|>`).
    pub stop_ids: Vec<u32>,
    pub bos_id: Option<u32>,
    /// Prepend BOS when encoding a prompt (Llama 2/3 do; SmolLM2 and Qwen2 do not).
    pub add_bos: bool,
    /// System prompt the model's template inserts when none is given.
    pub default_system: Option<String>,
    /// The conversation layout [`Tokenizer::apply_chat_template`] writes.
    pub chat: ChatFormat,
    /// The model's own chat template (Jinja), where it has one: an export of a Llama 3 model ships it again.
    pub chat_template: Option<String>,
    pub source: String,
}

/// GPT-2's byte-to-unicode table, inverted: the printable char a byte-level BPE vocab uses for each byte.
fn byte_decoder() -> std::collections::HashMap<char, u8> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.into_iter().zip(cs).map(|(b, c)| (char::from_u32(c).unwrap(), b as u8)).collect()
}

fn is_byte_level(json: &serde_json::Value) -> bool {
    let s = json.to_string();
    s.contains("\"ByteLevel\"")
}

impl Tokenizer {
    /// Reads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("{}: cannot read tokenizer", path.display()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let inner = tokenizers::Tokenizer::from_bytes(text.as_bytes())
            .map_err(|e| anyhow::anyhow!("{}: not a valid tokenizer.json ({e})", path.display()))?;
        let mut tok = Self::assemble(inner, &json, path.display().to_string())?;
        // a post-processor that puts a special token before every text is how Llama 2 and 3's tokenizer.json add
        // BOS (encoding here runs without the post-processor, so the flag says it)
        if let Some(bos) = leading_special(&json).and_then(|t| tok.token_id(&t)) {
            tok.add_bos = true;
            tok.bos_id = Some(bos);
        }
        // tokenizer_config.json beside it says whether BOS is added and which token ends a turn.
        if let Some(dir) = path.parent() {
            let cfg = dir.join("tokenizer_config.json");
            if let Ok(t) = std::fs::read_to_string(&cfg) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&t) {
                    if let Some(b) = v.get("add_bos_token").and_then(|x| x.as_bool()) {
                        tok.add_bos = b;
                    }
                    if let Some(tpl) = v.get("chat_template").and_then(|x| x.as_str()) {
                        tok.adopt_template(tpl);
                    }
                }
            }
        }
        Ok(tok)
    }

    /// Builds the tokenizer stored in a GGUF file (`tokenizer.ggml.*`).
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        Self::from_gguf_json(g, &Self::gguf_json(g)?)
    }

    /// [`Tokenizer::from_gguf`] from the file's [`Tokenizer::gguf_json`] document, for a caller that also keeps
    /// the document.
    pub fn from_gguf_json(g: &GgufFile, json: &serde_json::Value) -> Result<Self> {
        let file = g.path().display().to_string();
        let inner = tokenizers::Tokenizer::from_bytes(json.to_string().as_bytes())
            .map_err(|e| anyhow::anyhow!("{file}: cannot build a tokenizer from the GGUF vocabulary ({e})"))?;
        let mut tok = Self::assemble(inner, json, format!("{file} (GGUF vocabulary)"))?;
        tok.bos_id = g.meta_u64("tokenizer.ggml.bos_token_id").map(|x| x as u32);
        tok.add_bos = g.meta_bool("tokenizer.ggml.add_bos_token").unwrap_or(false);
        for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
            if let Some(id) = g.meta_u64(key) {
                if !tok.stop_ids.contains(&(id as u32)) {
                    tok.stop_ids.push(id as u32);
                }
            }
        }
        if let Some(tpl) = g.meta_str("tokenizer.chat_template") {
            tok.adopt_template(&tpl);
        }
        Ok(tok)
    }

    /// Takes the layout, the default system prompt and the text of a model's chat template. A template in a
    /// layout ragtime does not know gets a warning: chat prompts are then written in ChatML.
    pub fn adopt_template(&mut self, template: &str) {
        self.default_system = default_system_from_template(template);
        self.chat = ChatFormat::of_template(template).unwrap_or_else(|| {
            eprintln!(
                "warning: {}: the chat template is neither ChatML nor Llama 3's; chat prompts (synth, autorag, \
                 generate --chat) are written in ChatML",
                self.source
            );
            ChatFormat::ChatMl
        });
        self.chat_template = Some(template.to_string());
    }

    /// The system prompt the GGUF's chat template (`tokenizer.chat_template`) inserts by default, if any.
    pub fn gguf_default_system(g: &GgufFile) -> Option<String> {
        default_system_from_template(&g.meta_str("tokenizer.chat_template")?)
    }

    /// The GGUF file's tokenizer (`tokenizer.ggml.*`) as a Hugging Face `tokenizer.json` document: byte-level
    /// BPE with the pre-tokenizer its `tokenizer.ggml.pre` names.
    pub fn gguf_json(g: &GgufFile) -> Result<serde_json::Value> {
        let file = g.path().display().to_string();
        let model = g.meta_str("tokenizer.ggml.model").unwrap_or_default();
        if model != "gpt2" {
            bail!("{file}: GGUF tokenizer model '{model}' is not supported (byte-level BPE 'gpt2' is); pass --tokenizer tokenizer.json");
        }
        let tokens = g
            .meta_strings("tokenizer.ggml.tokens")
            .with_context(|| format!("{file}: GGUF has no tokenizer.ggml.tokens"))?;
        let merges = g
            .meta_strings("tokenizer.ggml.merges")
            .with_context(|| format!("{file}: GGUF has no tokenizer.ggml.merges"))?;
        let types = g.meta_i32s("tokenizer.ggml.token_type").unwrap_or_else(|| vec![1; tokens.len()]);
        let pre = g.meta_str("tokenizer.ggml.pre").unwrap_or_else(|| "default".into());
        let vocab: serde_json::Map<String, serde_json::Value> =
            tokens.iter().enumerate().map(|(i, t)| (t.clone(), serde_json::json!(i))).collect();
        let added: Vec<serde_json::Value> = tokens
            .iter()
            .enumerate()
            .filter(|(i, _)| matches!(types.get(*i), Some(3) | Some(4)))
            .map(|(i, t)| {
                serde_json::json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                                    "normalized": false, "special": types[i] == 3})
            })
            .collect();
        let byte_level = |use_regex: bool, trim: bool| serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": trim, "use_regex": use_regex});
        let split = |pattern: &str| serde_json::json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false});
        let (normalizer, pre_tokenizer) = match pre.as_str() {
            "smollm" => (
                serde_json::Value::Null,
                serde_json::json!({"type": "Sequence", "pretokenizers": [
                    {"type": "Digits", "individual_digits": true}, byte_level(true, true)]}),
            ),
            "qwen2" => (
                serde_json::json!({"type": "NFC"}),
                serde_json::json!({"type": "Sequence", "pretokenizers": [
                    split(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                    byte_level(false, false)]}),
            ),
            "llama-bpe" | "llama3" => (
                serde_json::Value::Null,
                serde_json::json!({"type": "Sequence", "pretokenizers": [
                    split(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                    byte_level(false, true)]}),
            ),
            // GPT-2's own pre-tokenizer is the byte-level one with its regex
            "default" | "gpt2" => (serde_json::Value::Null, byte_level(true, true)),
            // another regex (DeepSeek's, StarCoder's, Mistral's tekken, ...) would split text differently: the
            // model would read other tokens than it was trained on
            other => bail!(
                "{file}: GGUF pre-tokenizer '{other}' (tokenizer.ggml.pre) is not one ragtime builds (default, gpt2, \
                 llama-bpe, qwen2, smollm); pass --tokenizer PATH/tokenizer.json"
            ),
        };
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": added,
            "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": merges},
        });
        Ok(json)
    }

    fn assemble(inner: tokenizers::Tokenizer, json: &serde_json::Value, source: String) -> Result<Self> {
        let vocab_size = inner.get_vocab_size(true);
        let decoder = byte_decoder();
        let byte_level = is_byte_level(json);
        let mut special = HashSet::new();
        if let Some(added) = json.get("added_tokens").and_then(|a| a.as_array()) {
            for t in added {
                if let Some(id) = t.get("id").and_then(|x| x.as_u64()) {
                    special.insert(id as u32);
                }
            }
        }
        let mut token_bytes = Vec::with_capacity(vocab_size);
        for id in 0..vocab_size as u32 {
            let piece = inner.id_to_token(id).unwrap_or_default();
            let bytes = if special.contains(&id) {
                piece.into_bytes()
            } else if byte_level {
                piece.chars().map(|c| decoder.get(&c).copied().unwrap_or(b'?')).collect()
            } else if let Some(hex) = piece.strip_prefix("<0x").and_then(|s| s.strip_suffix('>')) {
                vec![u8::from_str_radix(hex, 16).unwrap_or(b'?')]
            } else {
                piece.replace('\u{2581}', " ").into_bytes()
            };
            token_bytes.push(bytes);
        }
        let mut stop_ids = Vec::new();
        for s in ["<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|end_of_text|>"] {
            if let Some(id) = inner.token_to_id(s) {
                stop_ids.push(id);
            }
        }
        Ok(Tokenizer {
            inner,
            token_bytes,
            special,
            stop_ids,
            bos_id: None,
            add_bos: false,
            default_system: None,
            chat: ChatFormat::ChatMl,
            chat_template: None,
            source,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// Encodes text; special-token strings in it (`<|im_start|>`) become their ids. Adds BOS if the model wants it
    /// and `bos` is true.
    pub fn encode(&self, text: &str, bos: bool) -> Result<Vec<u32>> {
        let enc =
            self.inner.encode(text, false).map_err(|e| anyhow::anyhow!("{}: cannot encode text ({e})", self.source))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if bos && self.add_bos {
            if let Some(b) = self.bos_id {
                ids.push(b);
            }
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Character offsets (start, end) of each token of `text` (no BOS).
    pub fn encode_with_offsets(&self, text: &str) -> Result<IdsWithOffsets> {
        let enc =
            self.inner.encode(text, false).map_err(|e| anyhow::anyhow!("{}: cannot encode text ({e})", self.source))?;
        Ok((enc.get_ids().to_vec(), enc.get_offsets().to_vec()))
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&i| self.token_bytes(i).iter().copied()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The bytes token `id` stands for.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map(|v| v.as_slice()).unwrap_or(&[])
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.special.contains(&id)
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn is_stop(&self, id: u32) -> bool {
        self.stop_ids.contains(&id)
    }

    /// The conversation in the model's layout ([`ChatFormat`]), ending with the assistant header when
    /// `add_generation_prompt`. ChatML: the model's default system prompt when the messages have none. Llama 3:
    /// as the model's template renders it without tools; BOS only where encoding does not add it.
    pub fn apply_chat_template(&self, messages: &[Message], add_generation_prompt: bool) -> String {
        match self.chat {
            ChatFormat::ChatMl => self.chatml(messages, add_generation_prompt),
            ChatFormat::Llama3 { dated_system } => self.llama3(messages, add_generation_prompt, dated_system),
        }
    }

    fn chatml(&self, messages: &[Message], add_generation_prompt: bool) -> String {
        let mut out = String::new();
        if messages.first().is_none_or(|m| m.role != "system") {
            if let Some(sys) = &self.default_system {
                out.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
            }
        }
        for m in messages {
            out.push_str(&format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content));
        }
        if add_generation_prompt {
            out.push_str("<|im_start|>assistant\n");
        }
        out
    }

    fn llama3(&self, messages: &[Message], add_generation_prompt: bool, dated_system: bool) -> String {
        let turn =
            |role: &str, content: &str| format!("<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>");
        let mut out = String::new();
        if !self.add_bos {
            out.push_str("<|begin_of_text|>");
        }
        let mut rest = messages;
        if dated_system {
            let system = match messages.first() {
                Some(m) if m.role == "system" => {
                    rest = &messages[1..];
                    m.content.trim()
                }
                _ => "",
            };
            let dated = format!("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n{system}");
            out.push_str(&turn("system", &dated));
        }
        for m in rest {
            out.push_str(&turn(&m.role, m.content.trim()));
        }
        if add_generation_prompt {
            out.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
        }
        out
    }
}

/// The special token a tokenizer.json's post-processor puts before every single text (`TemplateProcessing`, alone
/// or in a `Sequence`), where it puts one there and nothing after the text (a BOS, not an encoder's `[CLS] .. [SEP]`).
fn leading_special(json: &serde_json::Value) -> Option<String> {
    let post = json.get("post_processor")?;
    let template = match post.get("type")?.as_str()? {
        "TemplateProcessing" => post,
        "Sequence" => post
            .get("processors")?
            .as_array()?
            .iter()
            .find(|p| p.get("type").and_then(|t| t.as_str()) == Some("TemplateProcessing"))?,
        _ => return None,
    };
    let single = template.get("single")?.as_array()?;
    let [first, rest @ ..] = single.as_slice() else { return None };
    if rest.iter().any(|p| p.get("SpecialToken").is_some()) {
        return None;
    }
    first.get("SpecialToken")?.get("id")?.as_str().map(str::to_string)
}

/// The system prompt a Jinja chat template inserts when the conversation has none (SmolLM2's and Qwen2.5's
/// templates hard-code one). We do not run Jinja; we read the literal.
fn default_system_from_template(tpl: &str) -> Option<String> {
    let tpl = tpl.replace("\\n", "\n");
    let marker = "<|im_start|>system\n";
    let mut search = tpl.as_str();
    while let Some(i) = search.find(marker) {
        let rest = &search[i + marker.len()..];
        if let Some(end) = rest.find("<|im_end|>") {
            let lit = &rest[..end];
            if !lit.contains('{') && !lit.contains('\'') && !lit.is_empty() {
                return Some(lit.to_string());
            }
        }
        search = rest;
    }
    None
}

/// Turns token bytes into text without ever splitting a UTF-8 character: bytes of an incomplete character are
/// held until the next token completes it.
#[derive(Debug, Default, Clone)]
pub struct TextStream {
    pending: Vec<u8>,
}

impl TextStream {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) => {
                if e.error_len().is_some() {
                    // invalid sequence, not merely incomplete: emit lossily
                    self.pending.len()
                } else {
                    e.valid_up_to()
                }
            }
        };
        let out = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        out
    }

    pub fn clear(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_stream_holds_incomplete_chars() {
        let mut s = TextStream::default();
        let e = "é".as_bytes(); // 2 bytes
        assert_eq!(s.push(&e[..1]), "");
        assert_eq!(s.push(&e[1..]), "é");
        assert_eq!(s.push(b" ok"), " ok");
    }

    /// A GGUF's vocabulary written as tokenizer.json (what `train autorag` ships when the model has no
    /// tokenizer.json) reads back as the tokenizer built from the GGUF, and both equal the model's own
    /// tokenizer.json on chat text, digits and non-ASCII.
    #[test]
    fn gguf_vocabulary_written_as_tokenizer_json_reads_back_the_same() {
        let gguf = crate::require_checkpoint!("smollm2-135m-instruct-q4_1.gguf");
        let Some(hf) = crate::testing::require("models/smollm2-135m-instruct/tokenizer.json") else { return };
        let g = GgufFile::open(&gguf).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let written = dir.path().join("tokenizer.json");
        std::fs::write(&written, Tokenizer::gguf_json(&g).unwrap().to_string()).unwrap();
        let (from_file, from_gguf, hf) = (
            Tokenizer::from_file(&written).unwrap(),
            Tokenizer::from_gguf(&g).unwrap(),
            Tokenizer::from_file(&hf).unwrap(),
        );
        assert_eq!(from_file.vocab_size(), hf.vocab_size());
        for text in ["<|im_start|>user\nWho wrote Faust in 1808?<|im_end|>\n", "Zürich's  café, 12345 km", "a\n\n b"]
        {
            let ids = hf.encode(text, false).unwrap();
            assert_eq!(from_file.encode(text, false).unwrap(), ids, "{text:?}");
            assert_eq!(from_gguf.encode(text, false).unwrap(), ids, "{text:?}");
            assert_eq!(from_file.decode(&ids), hf.decode(&ids));
        }
    }

    #[test]
    fn default_system_is_read_from_template() {
        let tpl = "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}";
        assert_eq!(
            default_system_from_template(tpl).unwrap(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
        );
    }

    /// Llama 2 and 3's tokenizer.json add BOS in a post-processor; tokenizer_config.json's `add_bos_token` still
    /// has the last word. SmolLM2's file (no post-processor) stays without.
    #[test]
    fn bos_from_the_post_processor() {
        let Some(p) = crate::testing::require("models/smollm2-135m-instruct/tokenizer.json") else { return };
        let plain = Tokenizer::from_file(&p).unwrap();
        assert!(!plain.add_bos);
        let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let bos = serde_json::json!({"SpecialToken": {"id": "<|im_start|>", "type_id": 0}});
        let a = serde_json::json!({"Sequence": {"id": "A", "type_id": 0}});
        let eos = serde_json::json!({"SpecialToken": {"id": "<|im_end|>", "type_id": 0}});
        let template = |single: serde_json::Value| serde_json::json!({"type": "TemplateProcessing", "single": single, "pair": [], "special_tokens": {}});
        let im_start = plain.token_id("<|im_start|>").unwrap();
        for (post, with_config, want) in [
            (template(serde_json::json!([bos, a])), None, Some(im_start)),
            (
                serde_json::json!({"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": false,
                    "trim_offsets": true, "use_regex": true}, template(serde_json::json!([bos, a]))]}),
                None,
                Some(im_start),
            ),
            (template(serde_json::json!([bos, a, eos])), None, None),
            (template(serde_json::json!([bos, a])), Some(r#"{"add_bos_token": false}"#), None),
        ] {
            json["post_processor"] = post;
            let tj = dir.path().join("tokenizer.json");
            std::fs::write(&tj, json.to_string()).unwrap();
            let config = dir.path().join("tokenizer_config.json");
            match with_config {
                Some(c) => std::fs::write(&config, c).unwrap(),
                None => {
                    let _ = std::fs::remove_file(&config);
                }
            }
            let tok = Tokenizer::from_file(&tj).unwrap();
            let ids = tok.encode("Hi", true).unwrap();
            assert_eq!(ids.first().copied().filter(|_| tok.add_bos), want, "{}", json["post_processor"]);
            assert_eq!(&ids[ids.len() - 1..], &plain.encode("Hi", true).unwrap()[..]);
        }
    }

    #[test]
    fn chat_format_is_read_from_template() {
        let l30 = "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' %}";
        let l31 = "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}";
        assert_eq!(ChatFormat::of_template(l30), Some(ChatFormat::Llama3 { dated_system: false }));
        assert_eq!(ChatFormat::of_template(l31), Some(ChatFormat::Llama3 { dated_system: true }));
        assert_eq!(ChatFormat::of_template("{{ '<|im_start|>' + message['role'] }}"), Some(ChatFormat::ChatMl));
        assert_eq!(ChatFormat::of_template("{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"), None);
    }

    /// Llama 3's layouts as transformers' `apply_chat_template` renders Llama 3's template (3.0) and Llama 3.1's
    /// (no tools, its default date), `bos_token` `<|begin_of_text|>`: a user question with the generation prompt,
    /// and a system, user and assistant turn with spaces to trim. Where encoding adds BOS the text leaves it out.
    #[test]
    fn llama3_layouts_match_transformers() {
        let Some(p) = crate::testing::require("models/smollm2-135m-instruct/tokenizer.json") else { return };
        let mut tok = Tokenizer::from_file(&p).unwrap();
        let ask = [Message::new("user", "What is the capital of France?")];
        let turns = [
            Message::new("system", "  Answer briefly. "),
            Message::new("user", " Who wrote Hamlet? "),
            Message::new("assistant", "Shakespeare.\n"),
        ];
        let dated = "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
        for (dated_system, want_ask, want_turns) in [
            (
                false,
                "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n".to_string(),
                "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nAnswer briefly.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho wrote Hamlet?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nShakespeare.<|eot_id|>".to_string(),
            ),
            (
                true,
                format!("<|begin_of_text|>{dated}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
                format!("<|begin_of_text|>{dated}Answer briefly.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho wrote Hamlet?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nShakespeare.<|eot_id|>"),
            ),
        ] {
            tok.chat = ChatFormat::Llama3 { dated_system };
            tok.add_bos = false;
            assert_eq!(tok.apply_chat_template(&ask, true), want_ask);
            assert_eq!(tok.apply_chat_template(&turns, false), want_turns);
            tok.add_bos = true;
            assert_eq!(tok.apply_chat_template(&ask, true), want_ask.trim_start_matches("<|begin_of_text|>"));
            // the prompt of a turn is a prefix of the conversation with it (what training's masks rely on)
            let prompt = tok.apply_chat_template(&turns[..2], true);
            assert!(tok.apply_chat_template(&turns, false).starts_with(&prompt), "{prompt}");
        }
    }
}
