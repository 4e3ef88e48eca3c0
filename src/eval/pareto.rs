//! Operating points of a controller: quality against cost (F1 against retrievals per question), the Pareto
//! front of a set of such points, and the point nearest a retrieval budget.
//!
//! A point *dominates* another when it costs no more and scores no less, and is strictly better in one of the
//! two. The front is the set of points no other point dominates, ordered by cost; it is what a controller can
//! offer at each budget. `ragtime sweep` draws every controller's points with the front of all of them.

/// One setting of a controller, as measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Retrievals per question.
    pub cost: f64,
    /// F1 (or accuracy).
    pub value: f64,
}

/// Whether `a` dominates `b`.
pub fn dominates(a: Point, b: Point) -> bool {
    a.cost <= b.cost && a.value >= b.value && (a.cost < b.cost || a.value > b.value)
}

/// Indices of the points that no other point dominates, by increasing cost (ties of equal points: the first).
pub fn front(points: &[Point]) -> Vec<usize> {
    let mut idx: Vec<usize> =
        (0..points.len()).filter(|&i| points[i].cost.is_finite() && points[i].value.is_finite()).collect();
    // cost ascending, then value descending: a point is on the front iff it beats the best value seen so far
    idx.sort_by(|&i, &j| {
        points[i].cost.total_cmp(&points[j].cost).then(points[j].value.total_cmp(&points[i].value)).then(i.cmp(&j))
    });
    let mut out = Vec::new();
    let mut best = f64::NEG_INFINITY;
    for i in idx {
        if points[i].value > best {
            best = points[i].value;
            out.push(i);
        }
    }
    out
}

/// The point whose cost is nearest `budget` (to 1e-9); among equally near ones the higher value, then the lower cost,
/// then the first. `None` for no (finite) points.
pub fn nearest(points: &[Point], budget: f64) -> Option<usize> {
    (0..points.len()).filter(|&i| points[i].cost.is_finite() && points[i].value.is_finite()).min_by(|&i, &j| {
        let (a, b) = (points[i], points[j]);
        // distances compared to 1e-9, so 0.9 and 1.1 are equally near 1.0 despite binary rounding
        let dist = |p: Point| ((p.cost - budget).abs() * 1e9).round();
        dist(a).total_cmp(&dist(b)).then(b.value.total_cmp(&a.value)).then(a.cost.total_cmp(&b.cost)).then(i.cmp(&j))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[(f64, f64)]) -> Vec<Point> {
        v.iter().map(|&(cost, value)| Point { cost, value }).collect()
    }

    /// A hand-made set (cost, value):
    ///   0 (0.0, 0.10)  on the front: nothing is cheaper
    ///   1 (0.5, 0.10)  dominated by 0 (costs more, no better)
    ///   2 (1.0, 0.20)  on the front
    ///   3 (1.2, 0.18)  dominated by 2
    ///   4 (2.0, 0.25)  on the front
    ///   5 (2.0, 0.22)  dominated by 4 (same cost, lower value)
    ///   6 (3.5, 0.24)  dominated by 4
    ///   7 (4.0, 0.30)  on the front
    #[test]
    fn front_of_a_hand_made_set() {
        let p = pts(&[
            (0.0, 0.10),
            (0.5, 0.10),
            (1.0, 0.20),
            (1.2, 0.18),
            (2.0, 0.25),
            (2.0, 0.22),
            (3.5, 0.24),
            (4.0, 0.30),
        ]);
        assert_eq!(front(&p), vec![0, 2, 4, 7]);
        for (i, &a) in p.iter().enumerate() {
            let dominated = p.iter().any(|&b| dominates(b, a));
            assert_eq!(!dominated, front(&p).contains(&i), "point {i}");
        }
    }

    #[test]
    fn front_ignores_non_finite_and_keeps_one_of_equal_points() {
        let p = pts(&[(1.0, 0.2), (f64::NAN, 0.9), (1.0, 0.2), (0.5, f64::INFINITY)]);
        assert_eq!(front(&p), vec![0]);
        assert!(front(&[]).is_empty());
    }

    /// Budgets 0.5, 1, 2, 3 over costs 0.3, 0.9, 1.1, 2.6, 3.4: 0.5 -> 0.3 (0.2 away, nearer than 0.9's 0.4);
    /// 1 -> 0.9 and 1.1 are both 0.1 away, the higher value wins (1.1 with 0.25); 2 -> 2.6 (0.6, against 1.1's
    /// 0.9); 3 -> 2.6 and 3.4 both 0.4 away, equal values, the cheaper wins.
    #[test]
    fn nearest_picks_by_distance_then_value_then_cost() {
        let p = pts(&[(0.3, 0.10), (0.9, 0.20), (1.1, 0.25), (2.6, 0.30), (3.4, 0.30)]);
        let picks: Vec<usize> = [0.5, 1.0, 2.0, 3.0].iter().map(|&b| nearest(&p, b).unwrap()).collect();
        assert_eq!(picks, vec![0, 2, 3, 3]);
        assert_eq!(nearest(&[], 1.0), None);
    }
}
