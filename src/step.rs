//! What the decoder exposes for every token it generates. Controllers (triggers, query formers, the
//! hallucination detector) read only this, never the model itself.

/// One generated token and the model internals captured while it was decoded.
#[derive(Debug, Clone, Default)]
pub struct TokenStep {
    /// Position of this token in the whole sequence (prompt included), 0-based.
    pub pos: usize,
    /// Token id.
    pub id: u32,
    /// Decoded text of the token alone (may start with a space).
    pub text: String,
    /// Entropy (natural log, full vocabulary) of the distribution this token was drawn from,
    /// i.e. the softmax of the logits at position `pos - 1`.
    pub entropy: f32,
    /// Probability of this token under that distribution.
    pub prob: f32,
    /// Last layer attention probabilities of query `pos` over keys `0..=pos`, one row per head
    /// (`attn[h].len() == pos + 1`). Produced when this token was fed to the model.
    pub attn: Vec<Vec<f32>>,
    /// Last layer hidden state after the final norm at `pos` (empty when not captured).
    pub hidden_final: Vec<f32>,
    /// Mean over decoder layers of the layer outputs at `pos` (MIND's feature; empty when not captured).
    pub hidden_mean: Vec<f32>,
}

impl TokenStep {
    /// Attention this token pays to key position `key`, averaged over heads.
    pub fn attn_mean(&self, key: usize) -> f32 {
        if self.attn.is_empty() {
            return 0.0;
        }
        self.attn.iter().map(|row| row.get(key).copied().unwrap_or(0.0)).sum::<f32>() / self.attn.len() as f32
    }
}
