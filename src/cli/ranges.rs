//! Value parsers for numeric flags: each flag states its range in `--help` and a value outside it (or NaN, an
//! infinity, a negative count) is a usage error naming the flag, before any file is read or model loaded. The
//! bounds keep allocations derived from a flag (top-k lists, KV caches for `--batch` lanes) to what a machine has.

/// A whole number in `LO..=HI`.
pub fn int<const LO: usize, const HI: usize>(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|_| format!("'{s}' is not a whole number (expected {LO}..={HI})"))?;
    if (LO..=HI).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is out of range (expected {LO}..={HI})"))
    }
}

/// A comma-free list element for `Vec<usize>` flags: a whole number in `LO..=HI`.
pub fn int_list_item<const LO: usize, const HI: usize>(s: &str) -> Result<usize, String> {
    int::<LO, HI>(s)
}

fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("'{s}' is not a number"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{v} is not a finite number"))
    }
}

/// A finite number above 0 (learning rates).
pub fn positive(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{v} must be above 0"))
    }
}

/// A finite number at or above 0 (weight decay, temperatures, clipping norms).
pub fn non_negative(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("{v} must be 0 or more"))
    }
}

/// A range of rates `LO..HI`: two finite numbers at or above 0, LO not above HI (`report --mean-over`).
pub fn rate_range(s: &str) -> Result<(f64, f64), String> {
    let (lo, hi) = s.split_once("..").ok_or_else(|| format!("'{s}' is not a range LO..HI (e.g. 1.2..1.9)"))?;
    let (lo, hi) = (non_negative(lo)?, non_negative(hi)?);
    if lo <= hi {
        Ok((lo, hi))
    } else {
        Err(format!("{s}: {lo} is above {hi} (expected LO..HI, LO not above HI)"))
    }
}

/// A finite number in `[0, 1)` (dropout, fractions of a set).
pub fn fraction(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} must be in [0, 1)"))
    }
}

/// A finite number in `(0, 1]` (nucleus sampling's top-p).
pub fn probability(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("{v} must be in (0, 1]"))
    }
}

/// [`non_negative`] as f32.
pub fn non_negative_f32(s: &str) -> Result<f32, String> {
    non_negative(s).map(|v| v as f32)
}

/// [`probability`] as f32.
pub fn probability_f32(s: &str) -> Result<f32, String> {
    probability(s).map(|v| v as f32)
}

/// A finite f32 in `[-1, 1]` (cosine thresholds).
pub fn cosine_f32(s: &str) -> Result<f32, String> {
    let v = finite(s)?;
    if (-1.0..=1.0).contains(&v) {
        Ok(v as f32)
    } else {
        Err(format!("{v} must be in [-1, 1]"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(int::<1, 10>("3"), Ok(3));
        assert!(int::<1, 10>("0").unwrap_err().contains("out of range (expected 1..=10)"));
        assert!(int::<1, 10>("4294967296").unwrap_err().contains("out of range"));
        assert!(int::<1, 10>("-1").unwrap_err().contains("not a whole number"));
        assert!(positive("nan").unwrap_err().contains("not a finite number"));
        assert!(positive("0").is_err() && positive("1e-5").is_ok());
        assert!(non_negative("-0.1").is_err() && non_negative("0").is_ok() && non_negative("inf").is_err());
        assert!(fraction("1").is_err() && fraction("0.2").is_ok());
        assert!(probability("0").is_err() && probability("1").is_ok());
        assert!(cosine_f32("1.5").is_err() && cosine_f32("-0.3").is_ok());
        assert_eq!(rate_range("1.2..1.9"), Ok((1.2, 1.9)));
        assert_eq!(rate_range("1..1"), Ok((1.0, 1.0)));
        assert!(rate_range("1.9..1.2").unwrap_err().contains("1.9 is above 1.2"));
        assert!(rate_range("1.2-1.9").unwrap_err().contains("not a range LO..HI"));
        assert!(rate_range("-1..2").unwrap_err().contains("must be 0 or more"));
        assert!(rate_range("1..nan").unwrap_err().contains("not a finite number"));
    }
}
