//! Rate and time left of a long job, for its progress lines (`eval`, `sweep`, `synth hallucination`, `synth
//! autorag`, `train autorag`). `index`, its dense build and `embed` do not know their item count ahead: they
//! take the time left from the share of the input's bytes read (`corpus::passages::CorpusPosition`).
//!
//! Everything here is on the wall clock since the process started: lanes answer several questions at once, so
//! the sum of each item's own time is not the job's rate, and a resumed job's rate is this process's, not the
//! first one's. Items on lanes count when they finish, not when they are written: they are written in input
//! order (`rag::batch::InOrder`), and one slow item holds back the many that finish after it.

use std::time::Instant;

/// Wall-clock rate of one process over the items it has finished.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Clock { start: Instant::now() }
    }

    /// Seconds since [`Clock::new`].
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// `(items per second, seconds left)` after `done` items of this process with `left` still to do.
    pub fn rate(&self, done: usize, left: usize) -> (f64, f64) {
        rate_at(self.elapsed(), done, left)
    }
}

/// `(items per second, seconds left)` after `done` items in `elapsed` seconds with `left` to do; both 0 before the
/// first item (no rate yet).
pub fn rate_at(elapsed: f64, done: usize, left: usize) -> (f64, f64) {
    if done == 0 || elapsed <= 0.0 {
        return (0.0, 0.0);
    }
    let per_item = elapsed / done as f64;
    (1.0 / per_item, per_item * left as f64)
}

/// A duration for a progress line, rounded to the second: `0m 07s`, `12m 46s`, `3h 07m` (from an hour on, minutes).
pub fn hms(secs: f64) -> String {
    let s = if secs.is_finite() && secs > 0.0 { secs.round() as u64 } else { 0 };
    if s < 3600 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        let m = (s + 30) / 60; // to the nearest minute
        format!("{}h {:02}m", m / 60, m % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_time_left_by_hand() {
        // 3 items in 30 s: 0.1 items/s, 10 s each, 4 left -> 40 s
        let (r, left) = rate_at(30.0, 3, 4);
        assert!((r - 0.1).abs() < 1e-12 && (left - 40.0).abs() < 1e-9, "{r} {left}");
        assert_eq!(rate_at(30.0, 0, 4), (0.0, 0.0), "no rate before the first item");
        assert_eq!(rate_at(0.0, 2, 4), (0.0, 0.0));
        assert_eq!(rate_at(12.0, 4, 0).1, 0.0, "nothing left");
    }

    #[test]
    fn durations_read_as_minutes_then_hours() {
        assert_eq!(hms(0.0), "0m 00s");
        assert_eq!(hms(1.5), "0m 02s");
        assert_eq!(hms(766.0), "12m 46s");
        assert_eq!(hms(3599.4), "59m 59s");
        assert_eq!(hms(3600.0), "1h 00m");
        assert_eq!(hms(11_220.0), "3h 07m");
        assert_eq!(hms(11_249.0), "3h 07m");
        assert_eq!(hms(11_250.0), "3h 08m", "30 s round up");
        assert_eq!(hms(-3.0), "0m 00s");
        assert_eq!(hms(f64::NAN), "0m 00s");
        assert_eq!(hms(f64::INFINITY), "0m 00s");
    }
}
