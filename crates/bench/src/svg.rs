//! Small SVG charts of benchmark figures, written by hand: two axes with round ticks, and
//! either lines with markers (one per series) or a histogram's bars. Enough for the plots in
//! BENCHMARKS.md without a plotting library in the dependency tree.

use std::fmt::Write as _;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 48.0;
const BOTTOM: f64 = 64.0;
/// The caption's line height, and the most characters on one of its lines.
const CAPTION_LINE: f64 = 13.0;
const CAPTION_CHARS: usize = 118;
/// Line colours, one per series in order (repeated past the last).
const COLOURS: [&str; 5] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

/// A chart's words: its title, its axes' labels and a caption under it.
#[derive(Debug, Clone, Copy)]
pub struct Labels<'a> {
    /// Shown at the top.
    pub title: &'a str,
    /// Under the horizontal axis.
    pub x: &'a str,
    /// Beside the vertical axis.
    pub y: &'a str,
    /// A line of small text at the bottom: how the figures were made.
    pub caption: &'a str,
}

/// One line of a [`line_chart`]: a name for the legend and its points, in drawing order.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend's entry.
    pub name: String,
    /// `(x, y)` points; non-finite ones are skipped.
    pub points: Vec<(f64, f64)>,
}

/// One bar of a [`histogram`]: the half-open range `[lo, hi)` and how many values fell in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    /// Lower bound.
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// Values in the range.
    pub count: u64,
}

/// An SVG document of `series` as lines with a marker at each point, both axes from 0.
pub fn line_chart(labels: Labels<'_>, series: &[Series]) -> String {
    let finite = |&&(x, y): &&(f64, f64)| x.is_finite() && y.is_finite();
    let all = || series.iter().flat_map(|s| s.points.iter().filter(finite));
    let x_max = all().map(|p| p.0).fold(0.0, f64::max);
    let y_max = all().map(|p| p.1).fold(0.0, f64::max);
    let (mut out, x, y) = frame(labels, x_max, y_max);
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = s
            .points
            .iter()
            .filter(finite)
            .map(|&(px, py)| format!("{:.1},{:.1}", x.at(px), y.at(py)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        for p in &points {
            let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(
                out,
                r#"<circle cx="{cx}" cy="{cy}" r="3.5" fill="{colour}"/>"#
            );
        }
        let ly = TOP + 14.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + 14.0,
            LEFT + 38.0,
            LEFT + 44.0,
            ly + 4.0,
            escape(&s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// An SVG document of a histogram: one bar per bin, the vertical axis counting values.
pub fn histogram(labels: Labels<'_>, bins: &[Bin]) -> String {
    let x_max = bins.iter().map(|b| b.hi).fold(0.0, f64::max);
    let y_max = bins.iter().map(|b| b.count as f64).fold(0.0, f64::max);
    let (mut out, x, y) = frame(labels, x_max, y_max);
    for b in bins.iter().filter(|b| b.count > 0) {
        let (x0, x1) = (x.at(b.lo), x.at(b.hi));
        let top = y.at(b.count as f64);
        let _ = writeln!(
            out,
            r##"<rect x="{x0:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="#1f77b4" stroke="#fff" stroke-width="0.5"/>"##,
            (x1 - x0).max(0.5),
            y.at(0.0) - top
        );
    }
    out.push_str("</svg>\n");
    out
}

/// `values` counted into `bins` equal bins from 0 to their maximum (none when empty).
pub fn bin_values(values: &[f64], bins: usize) -> Vec<Bin> {
    let max = values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    if bins == 0 || max <= 0.0 {
        return Vec::new();
    }
    let width = max / bins as f64;
    let mut out: Vec<Bin> = (0..bins)
        .map(|i| Bin {
            lo: width * i as f64,
            hi: width * (i + 1) as f64,
            count: 0,
        })
        .collect();
    for v in values.iter().filter(|v| v.is_finite() && **v >= 0.0) {
        // The maximum itself goes into the last bin.
        let i = ((v / width) as usize).min(bins - 1);
        out[i].count += 1;
    }
    out
}

/// Maps values on one axis to SVG coordinates.
struct Axis {
    max: f64,
    from: f64,
    to: f64,
}

impl Axis {
    fn at(&self, v: f64) -> f64 {
        self.from + (self.to - self.from) * (v / self.max)
    }
}

/// The document's head, title, caption and both axes with their ticks and grid lines.
fn frame(labels: Labels<'_>, x_max: f64, y_max: f64) -> (String, Axis, Axis) {
    let (x_step, x_top) = ticks(x_max);
    let (y_step, y_top) = ticks(y_max);
    let x = Axis {
        max: x_top,
        from: LEFT,
        to: WIDTH - RIGHT,
    };
    let y = Axis {
        max: y_top,
        from: HEIGHT - BOTTOM,
        to: TOP,
    };
    let caption = wrap(labels.caption, CAPTION_CHARS);
    // The plot keeps its size; a caption of several lines makes the document taller.
    let height = HEIGHT + CAPTION_LINE * caption.len().saturating_sub(1) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/><text x="{:.1}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        escape(labels.title)
    );
    let mut v = 0.0;
    while v <= x_top + x_step / 2.0 {
        let px = x.at(v);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            HEIGHT - BOTTOM,
            HEIGHT - BOTTOM + 16.0,
            number(v)
        );
        v += x_step;
    }
    let mut v = 0.0;
    while v <= y_top + y_step / 2.0 {
        let py = y.at(v);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            number(v)
        );
        v += y_step;
    }
    let _ = writeln!(
        out,
        r#"<polyline fill="none" stroke="black" points="{LEFT},{TOP} {LEFT},{:.1} {:.1},{:.1}"/>"#,
        HEIGHT - BOTTOM,
        WIDTH - RIGHT,
        HEIGHT - BOTTOM
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - BOTTOM + 34.0,
        escape(labels.x)
    );
    let mid = (TOP + HEIGHT - BOTTOM) / 2.0;
    let _ = writeln!(
        out,
        r#"<text x="18" y="{mid:.1}" text-anchor="middle" transform="rotate(-90 18 {mid:.1})">{}</text>"#,
        escape(labels.y)
    );
    for (i, line) in caption.iter().enumerate() {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="#555">{}</text>"##,
            WIDTH / 2.0,
            HEIGHT - 8.0 + CAPTION_LINE * i as f64,
            escape(line)
        );
    }
    (out, x, y)
}

/// `text` in lines of at most `width` characters, broken at spaces (a longer word keeps its
/// own line); none for an empty text.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// A round tick step (1, 2 or 5 times a power of ten) giving at most about six ticks up to
/// `max`, and the axis' top: `max` rounded up to a step (1 when there is nothing to show).
fn ticks(max: f64) -> (f64, f64) {
    if !max.is_finite() || max <= 0.0 {
        return (0.2, 1.0);
    }
    let rough = max / 5.0;
    let power = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * power);
    (step, (max / step).ceil() * step)
}

/// A tick's label: no trailing zeros, thousands as `k`.
fn number(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{}k", number(v / 1000.0))
    } else if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// `text` with the characters XML gives a meaning escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABELS: Labels<'static> = Labels {
        title: "CPU & watchers",
        x: "watchers",
        y: "% <core>",
        caption: "bench fanout",
    };

    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        assert_eq!(ticks(100.0), (20.0, 100.0));
        assert_eq!(ticks(97.0), (20.0, 100.0));
        assert_eq!(ticks(2000.0), (500.0, 2000.0));
        assert_eq!(ticks(4.62), (1.0, 5.0));
        assert_eq!(ticks(0.0), (0.2, 1.0));
        assert_eq!(ticks(f64::NAN), (0.2, 1.0));
        let (step, top) = ticks(123.4);
        assert!(top >= 123.4 && top - step < 123.4, "{step} {top}");
    }

    #[test]
    fn captions_wrap_at_spaces() {
        assert_eq!(wrap("a bb ccc dd", 6), vec!["a bb", "ccc dd"]);
        assert_eq!(wrap("abcdefgh x", 4), vec!["abcdefgh", "x"]);
        assert!(wrap("  ", 10).is_empty());
        let long = "word ".repeat(60);
        let svg = line_chart(
            Labels {
                caption: &long,
                ..LABELS
            },
            &[],
        );
        // 300 characters in lines of at most 118: three lines, the document two lines taller.
        assert_eq!(svg.matches("font-size=\"10\"").count(), 3);
        assert!(svg.contains(&format!("height=\"{}\"", HEIGHT + 2.0 * CAPTION_LINE)));
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(number(0.2), "0.2");
        assert_eq!(number(1000.0), "1000");
        assert_eq!(number(20_000.0), "20k");
    }

    #[test]
    fn values_fall_into_equal_bins() {
        let bins = bin_values(&[0.0, 1.0, 2.5, 4.0, f64::NAN], 4);
        assert_eq!(bins.len(), 4);
        assert_eq!(
            bins.iter().map(|b| b.count).collect::<Vec<_>>(),
            vec![1, 1, 1, 1]
        );
        assert_eq!((bins[3].lo, bins[3].hi), (3.0, 4.0));
        assert!(bin_values(&[], 4).is_empty());
        assert!(bin_values(&[1.0], 0).is_empty());
    }

    #[test]
    fn a_line_chart_has_each_series_and_escaped_text() {
        let svg = line_chart(
            LABELS,
            &[
                Series {
                    name: "http1".into(),
                    points: vec![(100.0, 5.0), (1000.0, 50.0), (f64::NAN, 1.0)],
                },
                Series {
                    name: "h2".into(),
                    points: vec![(100.0, 3.0)],
                },
            ],
        );
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline fill=\"none\" stroke=\"#").count(), 2);
        // Two finite points of the first series and one of the second.
        assert_eq!(svg.matches("<circle ").count(), 3);
        assert!(svg.contains("CPU &amp; watchers") && svg.contains("% &lt;core&gt;"));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn a_histogram_draws_a_bar_per_nonempty_bin() {
        let bins = bin_values(&[1.0, 1.5, 9.0], 3);
        let svg = histogram(LABELS, &bins);
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert!(!svg.contains("NaN"));
    }
}
