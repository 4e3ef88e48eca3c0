//! MIND's detector network: `Dropout(p) -> Linear -> ReLU -> ... -> Linear(., 2)`.
//!
//! MIND (Su et al., 2024) uses dropout 0.2 on the input, then 256 -> 128 -> 64 hidden units with ReLU and a
//! 2-way output (logits; class 1 = hallucinated). [`MlpConfig::mind`] is that network; the hidden sizes and the
//! dropout are configurable. Dropout is active only on an autodiff backend (training) and is the identity in
//! eval mode.
//!
//! [`MlpWeights`] is the same network as plain `f32` arrays, for inference without burn (the trigger runs it
//! once per generated token) and for the safetensors checkpoint. Weights follow burn's `Linear` layout:
//! `weight` is `[d_in, d_out]` row-major and `y = x W + b` (PyTorch stores the transpose).

use burn::module::{Module, Param};
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig, Relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use serde::{Deserialize, Serialize};

/// Shape of the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlpConfig {
    /// Input width (the concatenated features).
    pub input: usize,
    /// Hidden layer widths, input side first.
    pub hidden_layers: Vec<usize>,
    /// Dropout probability on the input.
    pub dropout: f64,
}

impl MlpConfig {
    /// MIND's network for `input` features: dropout 0.2, 256 -> 128 -> 64 -> 2.
    pub fn mind(input: usize) -> Self {
        MlpConfig { input, hidden_layers: vec![256, 128, 64], dropout: 0.2 }
    }

    /// Widths of every layer boundary: `[input, hidden..., 2]`.
    pub fn widths(&self) -> Vec<usize> {
        let mut w = vec![self.input];
        w.extend(&self.hidden_layers);
        w.push(2);
        w
    }

    pub fn init<B: Backend>(&self, device: &B::Device) -> Mlp<B> {
        let w = self.widths();
        Mlp {
            dropout: DropoutConfig::new(self.dropout).init(),
            layers: w.windows(2).map(|p| LinearConfig::new(p[0], p[1]).init(device)).collect(),
            relu: Relu::new(),
        }
    }
}

/// The detector network (burn module).
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    dropout: Dropout,
    layers: Vec<Linear<B>>,
    relu: Relu,
}

impl<B: Backend> Mlp<B> {
    /// `[batch, input]` -> logits `[batch, 2]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let mut x = self.dropout.forward(x);
        let n = self.layers.len();
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i + 1 < n {
                x = self.relu.forward(x);
            }
        }
        x
    }

    /// Copies the weights out as plain arrays.
    pub fn weights(&self) -> MlpWeights {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let [d_in, d_out] = l.weight.val().dims();
                let weight = l.weight.val().into_data().convert::<f32>().to_vec::<f32>().expect("f32 weights");
                let bias = match &l.bias {
                    Some(b) => b.val().into_data().convert::<f32>().to_vec::<f32>().expect("f32 bias"),
                    None => vec![0.0; d_out],
                };
                LinearWeights { d_in, d_out, weight, bias }
            })
            .collect();
        MlpWeights { layers }
    }
}

/// One linear layer as plain arrays: `y = x W + b`, `W` is `[d_in, d_out]` row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearWeights {
    pub d_in: usize,
    pub d_out: usize,
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

/// The network as plain arrays (eval mode: no dropout).
#[derive(Debug, Clone, PartialEq)]
pub struct MlpWeights {
    pub layers: Vec<LinearWeights>,
}

/// `1 / (1 + e^-m)`: the probability of log-odds `m` (two-way softmax; `-m` is exact, so this is bit for bit
/// `1 / (1 + e^(l0 - l1))`).
pub fn sigmoid(m: f32) -> f32 {
    1.0 / (1.0 + (-m).exp())
}

/// `ln(p / (1 - p))`, the inverse of [`sigmoid`] in f64 (where thresholds such as `1 - 1e-9` keep their
/// resolution): -inf at 0 and +inf at 1, so `threshold:0` fires on every finite margin and `threshold:1` never.
pub fn log_odds(p: f64) -> f64 {
    p.ln() - (1.0 - p).ln()
}

impl MlpWeights {
    pub fn input(&self) -> usize {
        self.layers.first().map_or(0, |l| l.d_in)
    }

    /// Logits for one input row (ReLU between layers, none after the last).
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut h = x.to_vec();
        let n = self.layers.len();
        for (i, l) in self.layers.iter().enumerate() {
            assert_eq!(h.len(), l.d_in, "layer {i} expects {} inputs, got {}", l.d_in, h.len());
            let mut y = l.bias.clone();
            for (k, &xk) in h.iter().enumerate() {
                if xk == 0.0 {
                    continue;
                }
                let row = &l.weight[k * l.d_out..(k + 1) * l.d_out];
                for (yj, &w) in y.iter_mut().zip(row) {
                    *yj += xk * w;
                }
            }
            if i + 1 < n {
                for v in &mut y {
                    *v = v.max(0.0);
                }
            }
            h = y;
        }
        h
    }

    /// Probability of class 1 (hallucinated): softmax of the two logits, `sigmoid(`[`MlpWeights::margin`]`)`.
    pub fn prob(&self, x: &[f32]) -> f32 {
        sigmoid(self.margin(x))
    }

    /// `logit_1 - logit_0`, the log-odds of class 1: the probability's full resolution where it rounds to 1.0 in
    /// f32 (any margin above about 17).
    pub fn margin(&self, x: &[f32]) -> f32 {
        let l = self.forward(x);
        l[1] - l[0]
    }

    /// Builds the burn module with these weights (for GPU inference or further training).
    pub fn to_module<B: Backend>(&self, dropout: f64, device: &B::Device) -> Mlp<B> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let mut lin = LinearConfig::new(l.d_in, l.d_out).init::<B>(device);
                lin.weight =
                    Param::from_tensor(Tensor::from_data(TensorData::new(l.weight.clone(), [l.d_in, l.d_out]), device));
                lin.bias =
                    Some(Param::from_tensor(Tensor::from_data(TensorData::new(l.bias.clone(), [l.d_out]), device)));
                lin
            })
            .collect();
        Mlp { dropout: DropoutConfig::new(dropout).init(), layers, relu: Relu::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    #[test]
    fn plain_forward_hand_worked() {
        // 2 -> 2 -> 2. Hidden: x W1 + b1 with W1 = [[1, -1], [2, 0]], b1 = [0, 0.5].
        // x = [1, 1]: pre = [1 + 2, -1 + 0] + [0, 0.5] = [3, -0.5] -> relu [3, 0].
        // Out: W2 = [[1, 0], [0, 1]] (identity), b2 = [0, 1] -> logits [3, 1]; p1 = 1 / (1 + e^2).
        let w = MlpWeights {
            layers: vec![
                LinearWeights { d_in: 2, d_out: 2, weight: vec![1.0, -1.0, 2.0, 0.0], bias: vec![0.0, 0.5] },
                LinearWeights { d_in: 2, d_out: 2, weight: vec![1.0, 0.0, 0.0, 1.0], bias: vec![0.0, 1.0] },
            ],
        };
        assert_eq!(w.forward(&[1.0, 1.0]), vec![3.0, 1.0]);
        assert!((w.prob(&[1.0, 1.0]) - 1.0 / (1.0 + 2f32.exp())).abs() < 1e-7);
        assert_eq!(w.margin(&[1.0, 1.0]), -2.0, "logit_1 - logit_0");
    }

    #[test]
    fn module_and_plain_weights_agree() {
        let device = Default::default();
        let cfg = MlpConfig { input: 5, hidden_layers: vec![7, 3], dropout: 0.2 };
        let m = cfg.init::<Flex>(&device);
        let w = m.weights();
        assert_eq!(w.layers.iter().map(|l| (l.d_in, l.d_out)).collect::<Vec<_>>(), vec![(5, 7), (7, 3), (3, 2)]);
        let xs: Vec<f32> = (0..15).map(|i| (i as f32 * 0.37).sin()).collect();
        let out = m.forward(Tensor::from_data(TensorData::new(xs.clone(), [3, 5]), &device));
        let out = out.into_data().to_vec::<f32>().unwrap();
        for r in 0..3 {
            let plain = w.forward(&xs[r * 5..(r + 1) * 5]);
            for j in 0..2 {
                assert!((plain[j] - out[r * 2 + j]).abs() < 1e-5, "row {r}: {plain:?} vs {out:?}");
            }
        }
        // and back into a module
        let m2 = w.to_module::<Flex>(0.2, &device);
        assert_eq!(m2.weights(), w);
    }
}
