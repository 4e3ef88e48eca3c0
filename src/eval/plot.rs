//! The quality-against-retrievals plot (SVG, drawn with plotters): each controller's settings as a line of
//! points ordered by retrievals per question, controllers run once as single points, and the Pareto front of all
//! points as a dashed grey line. Reference series (the oracle context, which is not a controller) are drawn as
//! hollow marks and left out of the front. `ragtime sweep` writes it as `pareto.svg`; `ragtime report --html` embeds it.

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::pareto::{front, Point};

/// One controller's points, labelled.
pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
    /// Drawn hollow, not part of the front.
    pub reference: bool,
}

impl Series {
    /// A series named `name`; the `oracle` series is a reference.
    pub fn new(name: &str) -> Self {
        Series { name: name.to_string(), points: Vec::new(), reference: name == "oracle" }
    }
}

/// Groups `(name, point)` pairs into series, in order of first appearance.
pub fn group(points: impl IntoIterator<Item = (String, Point)>) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for (name, p) in points {
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(p),
            None => {
                let mut s = Series::new(&name);
                s.points.push(p);
                series.push(s);
            }
        }
    }
    series
}

/// Colour-blind-safe colours (Okabe & Ito 2008), cycled.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

/// The plot as an SVG document. `y_desc` names the quality axis (F1 or accuracy).
pub fn pareto_svg(title: &str, y_desc: &str, series: &[Series]) -> Result<String> {
    let finite = |p: &Point| p.cost.is_finite() && p.value.is_finite();
    let all: Vec<Point> = series.iter().flat_map(|s| s.points.iter().copied()).filter(finite).collect();
    let controllers: Vec<Point> =
        series.iter().filter(|s| !s.reference).flat_map(|s| s.points.iter().copied()).filter(finite).collect();
    let x_max = all.iter().map(|p| p.cost).fold(0.0f64, f64::max);
    let x_max = if x_max <= 0.0 { 1.0 } else { x_max * 1.08 };
    let (y_lo, y_hi) =
        all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.value), hi.max(p.value)));
    let (y_lo, y_hi) = if y_lo.is_finite() {
        let pad = ((y_hi - y_lo) * 0.1).max(0.01);
        ((y_lo - pad).max(0.0), y_hi + pad)
    } else {
        (0.0, 1.0)
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (820, 540)).into_drawing_area();
        let err = |e: &dyn std::fmt::Debug| anyhow!("drawing the plot: {e:?}");
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, y_lo..y_hi)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("retrievals per question")
            .y_desc(y_desc)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| err(&e))?;
        let front_pts: Vec<(f64, f64)> =
            front(&controllers).iter().map(|&i| (controllers[i].cost, controllers[i].value)).collect();
        if front_pts.len() > 1 {
            chart
                .draw_series(DashedLineSeries::new(front_pts, 6, 4, RGBColor(150, 150, 150).stroke_width(2)))
                .map_err(|e| err(&e))?
                .label("Pareto front")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(150, 150, 150).stroke_width(2)));
        }
        for (i, s) in series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let mut pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| p.cost.is_finite() && p.value.is_finite())
                .map(|p| (p.cost, p.value))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if pts.len() > 1 {
                chart.draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2))).map_err(|e| err(&e))?;
            }
            let style = if s.reference { colour.stroke_width(2) } else { colour.filled() };
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, style)))
                .map_err(|e| err(&e))?
                .label(s.name.as_str())
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, style));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .position(SeriesLabelPosition::LowerRight)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_series_and_the_front() {
        let p = |cost, value| Point { cost, value };
        let s = group([
            ("rind".to_string(), p(0.5, 0.2)),
            ("single & co".to_string(), p(1.0, 0.25)),
            ("rind".to_string(), p(2.0, 0.3)),
        ]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].points.len(), 2);
        let svg = pareto_svg("F1 <against> retrievals", "F1", &s).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("\nrind\n") && svg.contains("single &amp; co") && svg.contains("Pareto front"));
        assert!(svg.contains("F1 &lt;against&gt; retrievals"));
        assert_eq!(svg.matches("<circle").count(), 3 + 2, "three points and two legend marks");
        // the oracle is drawn hollow and is not on the front, though it is the best point
        let mut with_oracle = s;
        with_oracle.push(Series { points: vec![p(1.0, 0.9)], ..Series::new("oracle") });
        let svg = pareto_svg("t", "F1", &with_oracle).unwrap();
        assert!(svg.contains("oracle"));
        let hollow =
            svg.split("<circle").skip(1).filter(|c| c[..c.find('>').unwrap()].contains("fill=\"none\"")).count();
        assert_eq!(hollow, 2, "the oracle's mark and its legend mark");
        // nothing to draw is still a valid (empty) plot
        assert!(pareto_svg("empty", "F1", &[]).unwrap().contains("</svg>"));
    }
}
