//! The ggml block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) read into [`super::QMatrix`]'s
//! integer weights with one `(scale, offset)` pair per group, weight by weight as candle de-quantizes them.

use candle_core::quantized::GgmlDType;
use half::f16;

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// What the ggml blocks hold, in our layout.
pub(super) struct Decoded {
    pub(super) q: Vec<u8>,
    pub(super) scale: Vec<f32>,
    pub(super) offset: Vec<f32>,
}

/// Block size (weights) and byte size of the formats we can hold losslessly.
pub(super) fn block_layout(dtype: GgmlDType) -> Option<(usize, usize)> {
    Some(match dtype {
        GgmlDType::Q4_0 => (32, 18),
        GgmlDType::Q4_1 => (32, 20),
        GgmlDType::Q5_0 => (32, 22),
        GgmlDType::Q5_1 => (32, 24),
        GgmlDType::Q8_0 => (32, 34),
        GgmlDType::Q4K => (256, 144),
        GgmlDType::Q5K => (256, 176),
        GgmlDType::Q6K => (256, 210),
        _ => return None,
    })
}

/// Whether [`super::QMatrix::from_ggml`] accepts this format.
pub fn supported(dtype: GgmlDType) -> bool {
    block_layout(dtype).is_some()
}

/// The K-quant 6-bit scale and min of sub-block `j` (llama.cpp's `get_scale_min_k4`).
fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Decodes one block, following candle's `to_float` for the format weight by weight.
pub(super) fn decode_block(dtype: GgmlDType, b: &[u8], out: &mut Decoded) {
    let (q, scale, offset) = (&mut out.q, &mut out.scale, &mut out.offset);
    match dtype {
        GgmlDType::Q4_0 | GgmlDType::Q4_1 => {
            // U4: the nibble bytes are already in our order. Q4_0's `(q - 8) d` is `q d + (-8 d)`: both exact.
            let d = f16_at(b, 0);
            let (m, qs) = if dtype == GgmlDType::Q4_1 { (f16_at(b, 2), &b[4..20]) } else { (-8.0 * d, &b[2..18]) };
            q.extend_from_slice(qs);
            scale.push(d);
            offset.push(m);
        }
        GgmlDType::Q5_0 | GgmlDType::Q5_1 => {
            let d = f16_at(b, 0);
            let (m, rest) = if dtype == GgmlDType::Q5_1 { (f16_at(b, 2), &b[4..]) } else { (0.0, &b[2..]) };
            let qh = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let qs = &rest[4..20];
            let bias = if dtype == GgmlDType::Q5_0 { 16 } else { 0 };
            let mut vals = [0u8; 32];
            for j in 0..16 {
                let xh0 = (((qh >> j) << 4) & 0x10) as u8;
                let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
                vals[j] = (((qs[j] & 0x0F) | xh0) as i8 - bias) as u8;
                vals[j + 16] = (((qs[j] >> 4) | xh1) as i8 - bias) as u8;
            }
            q.extend_from_slice(&vals);
            scale.extend_from_slice(&[d, d]);
            offset.extend_from_slice(&[m, m]);
        }
        GgmlDType::Q8_0 => {
            let d = f16_at(b, 0);
            q.extend_from_slice(&b[2..34]);
            scale.extend_from_slice(&[d, d]);
            offset.extend_from_slice(&[0.0, 0.0]);
        }
        GgmlDType::Q4K => {
            // U4. Each 32 bytes of `qs` hold 64 weights: sub-block 2j in the low nibbles, 2j+1 in the high ones;
            // we repack each sub-block of 32 as 16 nibble pairs (weight i low, weight i + 16 high).
            let d = f16_at(b, 0);
            let dmin = f16_at(b, 2);
            let scales = &b[4..16];
            let qs = &b[16..144];
            for j in 0..4 {
                let qs = &qs[32 * j..32 * j + 32];
                for half in 0..2 {
                    let (sc, m) = scale_min_k4(2 * j + half, scales);
                    let nib = |v: u8| if half == 0 { v & 0x0F } else { v >> 4 };
                    q.extend((0..16).map(|i| nib(qs[i]) | (nib(qs[i + 16]) << 4)));
                    scale.push(d * sc as f32);
                    offset.push(-(dmin * m as f32));
                }
            }
        }
        GgmlDType::Q5K => {
            let d = f16_at(b, 0);
            let dmin = f16_at(b, 2);
            let scales = &b[4..16];
            let (qh, qs) = (&b[16..48], &b[48..176]);
            let (mut u1, mut u2) = (1u8, 2u8);
            for (s, j) in (0..256).step_by(64).enumerate() {
                let qs = &qs[j / 2..j / 2 + 32];
                for half in 0..2 {
                    let (sc, m) = scale_min_k4(2 * s + half, scales);
                    let (d1, m1) = (d * sc as f32, dmin * m as f32);
                    let u = if half == 0 { u1 } else { u2 };
                    for l in 0..32 {
                        let nib = if half == 0 { qs[l] & 0x0F } else { qs[l] >> 4 };
                        q.push(nib + if qh[l] & u != 0 { 16 } else { 0 });
                    }
                    scale.extend_from_slice(&[d1, d1]);
                    offset.extend_from_slice(&[-m1, -m1]);
                }
                u1 <<= 2;
                u2 <<= 2;
            }
        }
        GgmlDType::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = f16_at(b, 208);
            let mut vals = [0u8; 256];
            for n in (0..256).step_by(128) {
                let idx = n / 128;
                let (ql, qh) = (&ql[64 * idx..], &qh[32 * idx..]);
                for l in 0..32 {
                    vals[n + l] = (((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32) as u8;
                    vals[n + l + 32] = (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32) as u8;
                    vals[n + l + 64] = (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32) as u8;
                    vals[n + l + 96] = (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32) as u8;
                }
            }
            q.extend_from_slice(&vals);
            // group g (16 weights) uses scales[g]: candle computes `d * sc as f32 * q as f32`
            for &s in sc {
                scale.push(d * (s as i8) as f32);
                offset.push(0.0);
            }
        }
        _ => unreachable!("checked by block_layout"),
    }
}
