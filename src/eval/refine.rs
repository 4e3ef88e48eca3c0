//! Refining a sweep toward budgets (`ragtime sweep --refine N`): after the grid, each budget gets up to N more
//! settings, each halfway between the two measured settings whose retrievals per question lie on either side of
//! the budget, until one comes within a tolerance of it.
//!
//! A grid alone leaves gaps where the rate moves fast: a detector whose scores crowd against 1 fired 1.97 times
//! per question at one threshold and 0.33 at the next, so "budget 1" was read at 0.33. Bisection needs nothing
//! but that the rate is monotone in the threshold between two settings, which holds for every controller here
//! (RIND's theta, ETC's alpha, the detector's threshold: higher, fewer retrievals; FLARE's theta: higher, more;
//! the fixed-length interval), and it finds either direction from the measurements themselves.
//!
//! The midpoint is taken where the threshold's effect is spread evenly: in log-odds for values in (0, 1) (a
//! probability threshold near 1, where 0.9999 and 0.99999 are as far apart as 0.9 and 0.99), in logarithms for
//! other positive values, linearly otherwise; rounded to the fewest significant digits (of `1 - p` near 1) that
//! keep it strictly inside the bracket, so a run directory reads `mlp@rule=threshold:0.99997`, not seventeen
//! digits. Values are the swept key's own: a float, an integer, or a string whose part after the last `:` is a
//! number (`threshold:0.999`); other strings (`radio`) are left out of the search.

use super::sweep::{CalibratedPoint, SweepRecord};
use crate::detector::mlp::log_odds;

/// A swept value read as a number, with what it takes to write another value of its kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Numeric {
    /// The string before the number, `threshold:` (with its colon); `None` for a TOML number.
    pub prefix: Option<String>,
    pub x: f64,
    pub integer: bool,
}

impl Numeric {
    /// `0.35`, `32` or `"threshold:0.999"` as numbers; `None` for anything else (`"radio"`, a boolean).
    pub fn of(v: &toml::Value) -> Option<Numeric> {
        match v {
            toml::Value::Float(x) if x.is_finite() => Some(Numeric { prefix: None, x: *x, integer: false }),
            toml::Value::Integer(i) => Some(Numeric { prefix: None, x: *i as f64, integer: true }),
            toml::Value::String(s) => {
                let (head, num) = s.rsplit_once(':')?;
                let x: f64 = num.trim().parse().ok().filter(|x: &f64| x.is_finite())?;
                Some(Numeric { prefix: Some(format!("{head}:")), x, integer: false })
            }
            _ => None,
        }
    }

    /// Whether two values are of one kind and so can bracket a midpoint.
    fn same_kind(&self, o: &Numeric) -> bool {
        self.prefix == o.prefix && self.integer == o.integer
    }

    /// The value of this kind at `x`, written as `text` (already rounded).
    fn with(&self, text: &str) -> toml::Value {
        match &self.prefix {
            Some(p) => toml::Value::String(format!("{p}{text}")),
            None if self.integer => toml::Value::Integer(text.parse().unwrap_or(0)),
            None => toml::Value::Float(text.parse().unwrap_or(0.0)),
        }
    }
}

/// What the search does next for one controller and budget.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// A measured setting is within the tolerance: this record's index.
    Met(usize),
    /// Measure this value next.
    Probe(toml::Value),
    /// No two adjacent settings lie on either side of the budget: every measured rate is above it, or every one
    /// below (the grid does not reach it), with the nearest rate.
    Outside { nearest: f64 },
    /// The bracket is two adjacent integers (or floats no digit can split): nothing lies between.
    NoRoom { below: f64, above: f64 },
    /// The controller has fewer than two numeric settings of one kind.
    NoGrid,
}

/// The next step toward `budget` for `controller` from the records measured so far.
pub fn next(records: &[SweepRecord], controller: &str, budget: f64, tolerance: f64) -> Next {
    let mut pts: Vec<(usize, Numeric, f64)> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.controller == controller && r.key.is_some())
        .filter_map(|(i, r)| Some((i, Numeric::of(r.value.as_ref()?)?, r.retrievals_per_question)))
        .filter(|(_, _, rate)| rate.is_finite())
        .collect();
    // one kind: that of the first numeric setting (a grid mixing `threshold:` values with `radio` keeps the former)
    if let Some(first) = pts.first().map(|p| p.1.clone()) {
        pts.retain(|p| p.1.same_kind(&first));
    }
    if pts.len() < 2 {
        return Next::NoGrid;
    }
    // the nearest within tolerance, the first among equals
    let within = pts
        .iter()
        .filter(|p| within_tolerance(p.2, budget, tolerance))
        .min_by(|a, b| (a.2 - budget).abs().total_cmp(&(b.2 - budget).abs()).then(a.0.cmp(&b.0)));
    if let Some(p) = within {
        return Next::Met(p.0);
    }
    pts.sort_by(|a, b| a.1.x.total_cmp(&b.1.x));
    // adjacent pairs whose rates lie on either side; where noise makes several, the one nearest the budget
    let bracket = pts.windows(2).filter(|w| (w[0].2 - budget).signum() != (w[1].2 - budget).signum()).min_by(|a, b| {
        let span = |w: &[(usize, Numeric, f64)]| (w[0].2 - budget).abs() + (w[1].2 - budget).abs();
        span(a).total_cmp(&span(b))
    });
    let Some(w) = bracket else {
        let nearest = pts.iter().map(|p| p.2).min_by(|a, b| (a - budget).abs().total_cmp(&(b - budget).abs()));
        return Next::Outside { nearest: nearest.unwrap_or(f64::NAN) };
    };
    let (lo, hi) = (&w[0].1, &w[1].1);
    match midpoint(lo.x, hi.x, lo.integer) {
        Some(text) => Next::Probe(lo.with(&text)),
        None => Next::NoRoom { below: lo.x, above: hi.x },
    }
}

/// Whether a measured rate lies within `tolerance` of `budget` (to 1e-9, as `pick` compares distances, so 1.1 is
/// within 0.1 of 1.0 despite binary rounding).
fn within_tolerance(rate: f64, budget: f64, tolerance: f64) -> bool {
    (rate - budget).abs() <= tolerance + 1e-9
}

/// Why a picked point lies more than `tolerance` from its budget, and what would bring one nearer; `None` when it
/// lies within. `sweep --pick` writes the nearest setting whatever its distance, so a grid that never reaches a
/// budget would otherwise pass unnoticed: "budget 1" read at 0.33 retrievals per question.
pub fn off_budget(records: &[SweepRecord], p: &CalibratedPoint, tolerance: f64) -> Option<String> {
    if within_tolerance(p.retrievals_per_question, p.budget, tolerance) {
        return None;
    }
    let gap = (p.retrievals_per_question - p.budget).abs();
    let why = match next(records, &p.trigger, p.budget, tolerance) {
        Next::Outside { .. } => format!(
            "every setting swept gives {} retrievals/question than {}; widen --grid to bracket it",
            if p.retrievals_per_question > p.budget { "more" } else { "fewer" },
            p.budget
        ),
        Next::Probe(v) => {
            format!("two settings swept bracket it; --refine N measures between them (next: {}={v})", p.key)
        }
        Next::NoRoom { below, above } => {
            format!("nothing of its kind lies between {below} and {above}, the settings that bracket it")
        }
        Next::Met(_) | Next::NoGrid => "no setting swept comes nearer".to_string(),
    };
    Some(format!(
        "{} on {} at budget {}: the nearest setting, {}, gives {:.2} retrievals/question, {:.2} from the budget \
         (--tolerance {tolerance}): {why}",
        p.trigger,
        p.dataset,
        p.budget,
        p.override_spec(),
        p.retrievals_per_question,
        gap
    ))
}

/// The midpoint of `lo < hi` in the scale their values call for, written with the fewest digits that keep it
/// strictly between them; `None` when nothing of their kind lies between.
pub fn midpoint(lo: f64, hi: f64, integer: bool) -> Option<String> {
    if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
        return None;
    }
    if integer {
        if hi - lo < 2.0 {
            return None;
        }
        let m = if lo > 0.0 { (lo * hi).sqrt() } else { (lo + hi) / 2.0 };
        // the nearest integer strictly inside
        return Some(format!("{}", m.round().clamp(lo + 1.0, hi - 1.0)));
    }
    let in_unit = lo > 0.0 && hi < 1.0;
    let m = if in_unit {
        let z = (log_odds(lo) + log_odds(hi)) / 2.0;
        1.0 / (1.0 + (-z).exp())
    } else if lo > 0.0 {
        (lo * hi).sqrt()
    } else {
        (lo + hi) / 2.0
    };
    for digits in 1..=15 {
        let x = if in_unit && m > 0.5 { 1.0 - round_sig(1.0 - m, digits) } else { round_sig(m, digits) };
        // written as it will be read back: the shortest text for the rounded value
        let text = shortest(x);
        let back: f64 = text.parse().ok()?;
        if back > lo && back < hi {
            return Some(text);
        }
    }
    None
}

/// `x` rounded to `digits` significant digits.
fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let e = x.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits - 1 - e);
    (x * scale).round() / scale
}

/// `x` as decimal text, cut to 15 significant digits where the shortest text that reads back as `x` has more:
/// `1 - 0.07` is 0.9299999999999999 in binary, and prints as `0.93`.
fn shortest(x: f64) -> String {
    let s = format!("{x}");
    if s.len() <= 17 {
        return s;
    }
    let e = if x == 0.0 { 0 } else { x.abs().log10().floor() as i32 };
    let decimals = (14 - e).max(0) as usize;
    let t = format!("{x:.decimals$}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(value: toml::Value, rate: f64) -> SweepRecord {
        SweepRecord {
            controller: "mlp".into(),
            key: Some("trigger.rule".into()),
            value: Some(value),
            run: String::new(),
            questions: 30,
            em: 0.0,
            f1: 0.0,
            accuracy: None,
            retrievals_per_question: rate,
            supporting_hit_rate: None,
            generated_tokens_per_question: 0.0,
            seconds_per_question: 0.0,
            seconds: 0.0,
        }
    }
    fn s(v: &str) -> toml::Value {
        toml::Value::String(v.into())
    }

    #[test]
    fn values_read_as_numbers() {
        let n = Numeric::of(&s("threshold:0.999")).unwrap();
        assert_eq!((n.prefix.as_deref(), n.x, n.integer), (Some("threshold:"), 0.999, false));
        assert_eq!(Numeric::of(&toml::Value::Integer(32)).unwrap().x, 32.0);
        assert!(Numeric::of(&toml::Value::Integer(32)).unwrap().integer);
        assert_eq!(Numeric::of(&toml::Value::Float(0.35)).unwrap().prefix, None);
        assert!(Numeric::of(&s("radio")).is_none());
        assert!(Numeric::of(&s("threshold:nan")).is_none());
        assert!(Numeric::of(&toml::Value::Boolean(true)).is_none());
    }

    /// Midpoints worked by hand. Log-odds: logit(0.9) = ln 9, logit(0.99) = ln 99, their mean ln sqrt(891) =
    /// ln 29.85, p = 29.85 / 30.85 = 0.96759; one digit of 1 - p (0.03) gives 0.97, inside. Near 1: 1 - 1e-6
    /// and 1 - 1e-9 have odds of about 1e6 and 1e9, their geometric mean 3.16e7, 1 - p = 3.16e-8, one digit:
    /// 0.99999997. Logs: sqrt(1.5 * 3.0) = 2.12, one digit 2 (inside). Integers: sqrt(16 * 64) = 32; 31 and 32
    /// have none between. Linear across zero: (-1 + 3) / 2 = 1.
    #[test]
    fn midpoints_by_hand() {
        assert_eq!(midpoint(0.9, 0.99, false).as_deref(), Some("0.97"));
        assert_eq!(midpoint(0.999999, 0.999999999, false).as_deref(), Some("0.99999997"));
        assert_eq!(midpoint(1.5, 3.0, false).as_deref(), Some("2"));
        assert_eq!(midpoint(16.0, 64.0, true).as_deref(), Some("32"));
        assert_eq!(midpoint(31.0, 32.0, true), None);
        assert_eq!(midpoint(-1.0, 3.0, false).as_deref(), Some("1"));
        assert_eq!(midpoint(0.03, 0.06, false).as_deref(), Some("0.04"));
        assert_eq!(midpoint(0.5, 0.5, false), None);
        // a bracket one digit cannot split takes two: 0.97 and 0.98 have odds 32.3 and 49, their geometric mean
        // 39.8, so 1 - p = 0.0245: one digit (0.02) gives 0.98, the bracket's end; two (0.025) give 0.975
        assert_eq!(midpoint(0.97, 0.98, false).as_deref(), Some("0.975"));
        // 1 - 0.07 is 0.9299999999999999 in binary: odds 9 and 19 have the geometric mean 13.08, 1 - p = 0.071,
        // one digit 0.07, written 0.93
        assert_eq!(midpoint(0.9, 0.95, false).as_deref(), Some("0.93"));
    }

    /// Rates measured at thresholds 0.99 (3.1/question), 0.999 (1.9), 0.9999 (0.3): budget 1 lies between 0.999
    /// and 0.9999, whose log-odds midpoint is 1 - 3.16e-4, one digit 0.9997; budget 2 is within 0.1 of 1.9
    /// (met); budget 5 is above every rate (outside, nearest 3.1). `radio` is not a number and is left out.
    #[test]
    fn the_next_probe_bisects_the_bracket() {
        let recs = vec![
            rec(s("threshold:0.99"), 3.1),
            rec(s("radio"), 1.0),
            rec(s("threshold:0.999"), 1.9),
            rec(s("threshold:0.9999"), 0.3),
        ];
        assert_eq!(next(&recs, "mlp", 1.0, 0.1), Next::Probe(s("threshold:0.9997")));
        assert_eq!(next(&recs, "mlp", 2.0, 0.1), Next::Met(2));
        assert_eq!(next(&recs, "mlp", 5.0, 0.1), Next::Outside { nearest: 3.1 });
        assert_eq!(next(&recs, "rind", 1.0, 0.1), Next::NoGrid);
        // the other direction (FLARE: higher theta, more retrievals) brackets as well
        let flare: Vec<SweepRecord> = [(0.2, 0.4), (0.6, 2.6)]
            .iter()
            .map(|&(v, r)| SweepRecord { controller: "flare".into(), ..rec(toml::Value::Float(v), r) })
            .collect();
        // logit midpoint of 0.2 and 0.6: odds 0.25 and 1.5, sqrt 0.612, p = 0.380, one digit 0.4
        assert_eq!(next(&flare, "flare", 1.0, 0.1), Next::Probe(toml::Value::Float(0.4)));
        // integers with nothing between
        let fl: Vec<SweepRecord> = [(31, 0.4), (32, 2.6)]
            .iter()
            .map(|&(v, r)| SweepRecord { controller: "fixed".into(), ..rec(toml::Value::Integer(v), r) })
            .collect();
        assert_eq!(next(&fl, "fixed", 1.0, 0.1), Next::NoRoom { below: 31.0, above: 32.0 });
    }

    /// The picks of the grid above, each worked by hand: budget 2 is met (1.9 within 0.1); budget 1's nearest
    /// setting (0.9999, 0.3) is 0.7 away and the grid brackets it (next probe 0.9997); budget 5's nearest (0.99,
    /// 3.1) is 1.9 away and every setting gives fewer retrievals.
    #[test]
    fn a_pick_far_from_its_budget_says_why() {
        let recs = vec![rec(s("threshold:0.99"), 3.1), rec(s("threshold:0.999"), 1.9), rec(s("threshold:0.9999"), 0.3)];
        let picks = super::super::sweep::pick(&recs, &[1.0, 2.0, 5.0], "hotpotqa", "valid");
        let notes: Vec<Option<String>> = picks.iter().map(|p| off_budget(&recs, p, 0.1)).collect();
        assert_eq!(notes[1], None);
        let one = notes[0].as_deref().unwrap();
        assert!(one.contains("trigger.rule=\"threshold:0.9999\", gives 0.30 retrievals/question, 0.70 from"), "{one}");
        assert!(one.contains("--refine N measures between them (next: trigger.rule=\"threshold:0.9997\")"), "{one}");
        let five = notes[2].as_deref().unwrap();
        assert!(five.contains("gives 3.10 retrievals/question, 1.90 from the budget"), "{five}");
        assert!(five.contains("every setting swept gives fewer retrievals/question than 5; widen --grid"), "{five}");
        // a looser tolerance takes budget 1 as near enough
        assert_eq!(off_budget(&recs, &picks[0], 1.0), None);
    }

    /// A search run to the end on a made-up monotone rate, rate(t) = 30 (1 - t)^(1/4): from a grid of two
    /// thresholds five orders of magnitude apart in 1 - t (rates 1.69 and 0.09), each probe lies strictly inside
    /// the grid and the search meets budget 1 within 0.1 (at 1 - t near 1.2e-6) in at most 8 probes.
    #[test]
    fn a_search_converges_on_a_monotone_rate() {
        let rate = |t: f64| 30.0 * (1.0 - t).powf(0.25);
        let mut recs: Vec<SweepRecord> =
            [0.99999, 0.9999999999].iter().map(|&t| rec(s(&format!("threshold:{t}")), rate(t))).collect();
        let mut probes = 0;
        loop {
            match next(&recs, "mlp", 1.0, 0.1) {
                Next::Met(i) => {
                    assert!((recs[i].retrievals_per_question - 1.0).abs() <= 0.1);
                    break;
                }
                Next::Probe(v) => {
                    let t = Numeric::of(&v).unwrap().x;
                    assert!(t > 0.99999 && t < 0.9999999999, "{t}");
                    recs.push(rec(v, rate(t)));
                    probes += 1;
                    assert!(probes <= 8, "{recs:?}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(probes >= 1);
    }
}
