//! Integer products of many input rows at once (a prefill chunk, many lanes) on Intel AMX (`--int8-dot`, every
//! tiled copy: int8 without offsets, Q8_0, Q5_0, Q6_K, and nibbles, Q4_0, Q4_1, Q4_K), the same numbers as the
//! AVX-512 VNNI tile kernels.
//!
//! One `tdpbsud` multiplies a tile of 16 input rows by 16 weight rows over a scale group (16 or 32 columns) in
//! 32-bit integers: 4,096 or 8,192 multiply-adds where a VNNI instruction does 64. The weights need no copy of
//! their own: a group of a tiled int8 copy (`super::tiles`: per 4 columns, 16 rows of 4 bytes) is already the
//! "VNNI layout" AMX reads its second operand in (`Q` rows of 64 bytes), stored as `w + 128` (unsigned, as
//! `tdpbsud` takes it); a nibble group is unpacked to bytes in that order, two weight tiles at a time. The
//! quantized inputs are its first operand, laid out so that a tile's 16 rows of a group are consecutive bytes
//! ([`Inputs`]). Each group's 16 x 16 integer sums then go through the tile kernels' own arithmetic per input row
//! (`- 128 sum x` for int8, one conversion, the scale product `s_w s_x`, one FMA into the even or odd groups'
//! sum, and for nibbles one FMA more for the offset): an integer sum is exact in any order, so every result is bit
//! for bit what `super::x86::tiles_int8_avx512` or `tiles_int8_u4_avx512` (and `super::tiles::tiles_portable`)
//! gives for that row, and a row's result does not depend on whether it came in a prefill chunk or a decoding
//! pass.
//!
//! Linux lends the tile registers to a process only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`); where the
//! CPU has no AMX-INT8 or the request fails, [`available`] is false and products keep the other kernels.

use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::q8::{Int8Rows, BLOCK};
use super::{Layout, QMatrix, TILE};

/// Whether the CPU has AMX (tiles, int8) and the AVX-512 the results are finished with, and Linux lent this
/// process the tile registers (asked once).
pub(super) fn available() -> bool {
    static AMX: OnceLock<bool> = OnceLock::new();
    *AMX.get_or_init(|| {
        if super::int8::int8_width() != 8 {
            return false;
        }
        // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8 (leaf 7 exists: the CPU has AVX-512)
        #[allow(unused_unsafe)]
        // SAFETY: CPUID is available on every x86-64 CPU.
        let edx = unsafe { __cpuid_count(7, 0) }.edx;
        if edx >> 24 & 1 == 0 || edx >> 25 & 1 == 0 {
            return false;
        }
        request_tiles()
    })
}

/// Asks Linux for the tile data state (XTILEDATA, state component 18) for this process.
#[cfg(target_os = "linux")]
fn request_tiles() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with this request only changes which state components the process may use.
    unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn request_tiles() -> bool {
    false
}

/// The 64-byte tile configuration (palette 1): `tmm0..4` four 16 x 16 int32 sums, `tmm4..6` two tiles of 16
/// input rows of `4 * q` bytes, `tmm6..8` two tiles of `q` rows of 64 weight bytes (16 weight rows x 4 columns).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn new(q: usize) -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        // bytes 16..48: bytes per row of each tile (u16); 48..64: rows of each tile
        let shapes = [(64u16, 16u8); 4].into_iter().chain([(4 * q as u16, 16); 2]).chain([(64, q as u8); 2]);
        for (t, (colsb, rows)) in shapes.enumerate() {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            c[48 + t] = rows;
        }
        TileConfig(c)
    }
}

/// Input rows per pass over the weights: their int8 rows stay in the core's cache while the weights stream.
const CHUNK: usize = 256;

/// A product's inputs as the kernel reads them: the quantized rows in the order their tiles are loaded, and per
/// input row and scale group (`[rows, groups]` each) the input block's scale and, for int8 weights (stored as
/// `w + 128`), `-128 sum x` over the group, for nibbles the block's `scale * sum q` (what the group's offset is
/// multiplied by).
pub(super) struct Inputs {
    /// the quantized inputs in the order tiles are read, `[rows / 16][groups][16 rows][group]`: a tile's 16
    /// rows of a group in consecutive bytes
    tiles: Vec<i8>,
    scale: Vec<f32>,
    corr: Vec<i32>,
    sum: Vec<f32>,
}

impl Inputs {
    /// `x` (whole tiles of 16 rows) laid out for products with `m`.
    pub(super) fn new(x: &Int8Rows, m: &QMatrix) -> Inputs {
        let (cols, glen) = (m.cols, m.scale_cols());
        let (halves, blocks, groups) = (cols / 16, cols / BLOCK, cols / glen);
        let n = x.sum16.len() / halves;
        let mut t = Inputs {
            tiles: vec![0; n * cols],
            scale: Vec::with_capacity(n * groups),
            corr: Vec::new(),
            sum: Vec::new(),
        };
        for (j, row) in x.q.chunks_exact(cols).enumerate() {
            for (g, src) in row.chunks_exact(glen).enumerate() {
                let at = ((j / 16 * groups + g) * 16 + j % 16) * glen;
                t.tiles[at..at + glen].copy_from_slice(src);
            }
        }
        for j in 0..n {
            for g in 0..groups {
                let b = j * blocks + g * glen / BLOCK;
                t.scale.push(x.scale[b]);
                match m.layout {
                    Layout::I8 => {
                        t.corr.push(-128 * x.sum16[j * halves + g * glen / 16..][..glen / 16].iter().sum::<i32>())
                    }
                    Layout::U4 => t.sum.push(x.sum[b]),
                }
            }
        }
        t
    }
}

/// Rows `row0..row0 + rows` (`row0` a tile's first) of `W x_j` for the first `n` input rows of `inputs`, written
/// to `y` (`[n, m.rows]`), from a tiled copy with `4 * Q` columns per scale: int8, or with `U4` nibbles, each
/// pair of weight tiles first unpacked to bytes in the int8 tiles' order. Per scale group, two tiles of 16
/// inputs times two tiles of 16 weight rows in four `tdpbsud`; the next group's are on their way while the
/// vector unit finishes this one's. Inputs go in chunks of [`CHUNK`] rows, each a pass over the weights.
///
/// # Safety
/// [`available`] must be true, `m` a tiled copy with `4 * Q` columns per scale, [`Layout::U4`] if and only if
/// `U4` (then `Q` = 8), `row0 + rows <= m.rows`, `inputs` made for `m` from `n.next_multiple_of(16)` rows, and
/// `y` valid for `n * m.rows` writes, with no one else writing rows `row0..row0 + rows` of it.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn tiles_int8_amx<const Q: usize, const U4: bool>(
    m: &QMatrix,
    row0: usize,
    rows: usize,
    inputs: &Inputs,
    n: usize,
    y: *mut f32,
) {
    let (cols, glen) = (m.cols, 4 * Q);
    let groups = cols / glen;
    let (qp, sp, op, xq) = (m.q.as_ptr(), m.scale.as_ptr(), m.offset.as_ptr(), inputs.tiles.as_ptr());
    let (corr, xscale, xsum) = (inputs.corr.as_ptr(), inputs.scale.as_ptr(), inputs.sum.as_ptr());
    // nibbles: two weight tiles unpacked, `[2][groups][8 registers][16 rows][4 bytes]`
    let mut unpacked = if U4 { vec![0u8; 2 * TILE * cols] } else { Vec::new() };
    let nib = _mm512_set1_epi8(0x0F);
    let config = TileConfig::new(Q);
    // SAFETY (here and below): the configuration is a valid palette-1 layout; every tile load stays inside
    // `inputs.tiles` (16 x `glen` bytes of an input tile's group `g`) or a tile's weights (`Q` x 64 bytes of group
    // `g`, in the copy or in `unpacked`), every store inside `sums`.
    asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
    // per group in flight (two), the four 16 x 16 sums: [input tile][weight tile]
    #[repr(C, align(64))]
    struct Sums([[[[i32; TILE]; 16]; 4]; 2]);
    let mut sums = Sums([[[[0; TILE]; 16]; 4]; 2]);
    let (tiles, in_blocks) = (rows.div_ceil(TILE), n.div_ceil(16));
    for first_block in (0..in_blocks).step_by(CHUNK / 16) {
        let chunk_blocks = (CHUNK / 16).min(in_blocks - first_block);
        for t in (0..tiles).step_by(2) {
            // a last odd tile (or input block) is multiplied twice and written once
            let tk = [t, (t + 1).min(tiles - 1)];
            let st = tk.map(|t| sp.add((row0 / TILE + t) * TILE * groups));
            let ot = tk.map(|t| op.wrapping_add((row0 / TILE + t) * TILE * groups));
            let wt = if U4 {
                // per group, 4 x 64 bytes: low nibbles columns `4r..4r + 4`, high ones `16 + 4r..` (super::tiles)
                for (k, &t) in tk.iter().enumerate() {
                    let src = qp.add((row0 / TILE + t) * TILE * cols / 2);
                    let dst = unpacked.as_mut_ptr().add(k * TILE * cols);
                    for g in 0..groups {
                        for r in 0..4 {
                            let b = _mm512_loadu_si512(src.add((g * 4 + r) * 64) as *const __m512i);
                            _mm512_storeu_si512(dst.add((g * 8 + r) * 64) as *mut __m512i, _mm512_and_si512(b, nib));
                            let high = _mm512_and_si512(_mm512_srli_epi16(b, 4), nib);
                            _mm512_storeu_si512(dst.add((g * 8 + r + 4) * 64) as *mut __m512i, high);
                        }
                    }
                }
                [0, 1].map(|k| unpacked.as_ptr().add(k * TILE * cols))
            } else {
                tk.map(|t| qp.add((row0 / TILE + t) * TILE * cols))
            };
            for b in (first_block..first_block + chunk_blocks).step_by(2) {
                let jb = [b, (b + 1).min(first_block + chunk_blocks - 1)];
                let xb = jb.map(|b| xq.add(b * 16 * cols));
                let multiply = |g: usize, sums: &mut Sums| {
                    let out = sums.0[g % 2].as_mut_ptr();
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        "tileloadd tmm4, [{x0} + {xstride} * 1]",
                        "tileloadd tmm6, [{w0} + {stride} * 1]",
                        "tdpbsud tmm0, tmm4, tmm6",
                        "tileloadd tmm7, [{w1} + {stride} * 1]",
                        "tdpbsud tmm1, tmm4, tmm7",
                        "tileloadd tmm5, [{x1} + {xstride} * 1]",
                        "tdpbsud tmm2, tmm5, tmm6",
                        "tdpbsud tmm3, tmm5, tmm7",
                        "tilestored [{s} + {stride} * 1], tmm0",
                        "tilestored [{s} + {stride} * 1 + 1024], tmm1",
                        "tilestored [{s} + {stride} * 1 + 2048], tmm2",
                        "tilestored [{s} + {stride} * 1 + 3072], tmm3",
                        x0 = in(reg) xb[0].add(g * 16 * glen),
                        x1 = in(reg) xb[1].add(g * 16 * glen),
                        xstride = in(reg) glen,
                        w0 = in(reg) wt[0].add(g * Q * 64),
                        w1 = in(reg) wt[1].add(g * Q * 64),
                        stride = in(reg) 64usize,
                        s = in(reg) out,
                        options(nostack),
                    );
                };
                // per input tile, weight tile and input row: the even and odd groups' sums (added at the end)
                let mut acc = [[[[_mm512_setzero_ps(); 2]; 16]; 2]; 2];
                multiply(0, &mut sums);
                for g in 0..groups {
                    if g + 1 < groups {
                        multiply(g + 1, &mut sums);
                    }
                    for (a, acc_a) in acc.iter_mut().enumerate() {
                        for (k, acc_ak) in acc_a.iter_mut().enumerate() {
                            let ws = _mm512_loadu_ps(st[k].add(g * TILE));
                            let os = if U4 { _mm512_loadu_ps(ot[k].add(g * TILE)) } else { ws };
                            let part = &sums.0[g % 2][2 * a + k];
                            for (i, row) in acc_ak.iter_mut().enumerate() {
                                let at = (jb[a] * 16 + i) * groups + g;
                                let mut d = _mm512_load_si512(part[i].as_ptr() as *const __m512i);
                                if !U4 {
                                    d = _mm512_add_epi32(d, _mm512_set1_epi32(*corr.add(at)));
                                }
                                let s = _mm512_mul_ps(ws, _mm512_set1_ps(*xscale.add(at)));
                                row[g % 2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, row[g % 2]);
                                if U4 {
                                    row[g % 2] = _mm512_fmadd_ps(os, _mm512_set1_ps(*xsum.add(at)), row[g % 2]);
                                }
                            }
                        }
                    }
                }
                for (a, acc_a) in acc.iter().enumerate().take(if jb[1] == jb[0] { 1 } else { 2 }) {
                    for (k, acc_ak) in acc_a.iter().enumerate().take(if tk[1] == tk[0] { 1 } else { 2 }) {
                        let valid = TILE.min(rows - tk[k] * TILE);
                        for (i, row) in acc_ak.iter().enumerate().take(n.saturating_sub(jb[a] * 16)) {
                            let mut v = [0f32; TILE];
                            _mm512_storeu_ps(v.as_mut_ptr(), _mm512_add_ps(row[0], row[1]));
                            let at = y.add((jb[a] * 16 + i) * m.rows + row0 + tk[k] * TILE);
                            std::ptr::copy_nonoverlapping(v.as_ptr(), at, valid);
                        }
                    }
                }
            }
        }
    }
    asm!("tilerelease", options(nostack, nomem));
}
