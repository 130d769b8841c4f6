//! What a chart shows, as plain data (a figure of panels of series), and its drawing onto any
//! plotters backend. The chart builders fill these types; only this module talks to plotters.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{tick_label, Axis};

/// The font family registered from the bundled font (and named in the SVG).
pub const FONT: &str = "sans-serif";
/// Pixels per panel, width and height.
pub const PANEL: (u32, u32) = (620, 420);
/// Height of the figure's title band.
const TITLE_H: u32 = 44;

/// Series colours by report (Tableau 10).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The share of a panel's plot height that a legend of `entries` lines takes.
pub fn legend_share(entries: usize) -> f64 {
    (entries as f64 * 17.0 + 16.0) / (PANEL.1 as f64 - 120.0)
}

/// One chart file: a title over a grid of panels.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File name without extension.
    pub name: &'static str,
    /// Title across the top.
    pub title: String,
    /// Panels per row.
    pub cols: usize,
    /// The panels, row by row.
    pub panels: Vec<Panel>,
}

impl Figure {
    /// Size in pixels.
    pub fn size(&self) -> (u32, u32) {
        let cols = self.cols.max(1);
        let rows = self.panels.len().div_ceil(cols).max(1);
        (PANEL.0 * cols as u32, PANEL.1 * rows as u32 + TITLE_H)
    }
}

/// One plot: axes, series and optional point labels.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Caption above the plot.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// Horizontal axis description, with unit.
    pub x_desc: String,
    /// Vertical axis description, with unit.
    pub y_desc: String,
    /// What is drawn.
    pub series: Vec<Series>,
    /// Text placed beside points (e.g. the load level), in the colour given.
    pub labels: Vec<PointLabel>,
    /// Where the legend goes; `None` draws none.
    pub legend: Option<SeriesLabelPosition>,
    /// Shown in the middle of an empty panel.
    pub empty_note: String,
}

/// A text beside a point.
#[derive(Debug, Clone)]
pub struct PointLabel {
    /// Data coordinates.
    pub at: (f64, f64),
    /// The text.
    pub text: String,
    /// Its colour.
    pub color: RGBColor,
}

/// One line, set of markers or filled outline.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend entry; `None` keeps it out of the legend.
    pub label: Option<String>,
    /// Colour.
    pub color: RGBColor,
    /// How it is drawn.
    pub style: Style,
    /// Data points in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Style {
    /// A line.
    Line,
    /// A line with a marker at each point.
    Markers(Marker),
    /// Markers only (a scatter).
    Points(Marker),
    /// A closed outline (a histogram's steps) filled translucently.
    Filled,
}

/// A point marker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Marker {
    /// Filled circle.
    Circle,
    /// Filled triangle.
    Triangle,
    /// Diagonal cross.
    Cross,
}

type DrawResult<T> = Result<T, String>;

/// Draws `fig` onto `root` (already sized to `fig.size()`).
pub fn draw<DB: DrawingBackend>(fig: &Figure, root: &DrawingArea<DB, Shift>) -> DrawResult<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let body = root.titled(&fig.title, (FONT, 22).into_font().color(&BLACK)).map_err(err)?;
    let cols = fig.cols.max(1);
    let rows = fig.panels.len().div_ceil(cols).max(1);
    for (panel, area) in fig.panels.iter().zip(body.split_evenly((rows, cols))) {
        draw_panel(panel, &area)?;
    }
    root.present().map_err(err)
}

fn draw_panel<DB: DrawingBackend>(p: &Panel, area: &DrawingArea<DB, Shift>) -> DrawResult<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, (FONT, 17))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(68)
        .build_cartesian_2d(p.x.clone(), p.y.clone())
        .map_err(err)?;
    let fmt = |v: &f64| tick_label(*v);
    chart
        .configure_mesh()
        .x_desc(&p.x_desc)
        .y_desc(&p.y_desc)
        .x_label_formatter(&fmt)
        .y_label_formatter(&fmt)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()
        .map_err(err)?;

    if p.series.iter().all(|s| s.points.is_empty()) {
        let (w, h) = area.dim_in_pixel();
        let style = (FONT, 15).into_font().color(&RGBColor(110, 110, 110));
        let style = style.pos(Pos::new(HPos::Center, VPos::Center));
        area.draw_text(&p.empty_note, &style, (w as i32 / 2, h as i32 / 2)).map_err(err)?;
        return Ok(());
    }

    for s in p.series.iter().filter(|s| !s.points.is_empty()) {
        let color = s.color;
        let line = color.stroke_width(2);
        let anno = match s.style {
            Style::Line => chart.draw_series(LineSeries::new(s.points.iter().copied(), line)).map_err(err)?,
            Style::Filled => {
                let fill = color.mix(0.22).filled();
                chart.draw_series(std::iter::once(Polygon::new(s.points.clone(), fill))).map_err(err)?;
                chart.draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(1))).map_err(err)?
            }
            Style::Markers(m) | Style::Points(m) => {
                if matches!(s.style, Style::Markers(_)) {
                    chart.draw_series(LineSeries::new(s.points.iter().copied(), line)).map_err(err)?;
                }
                let fill = color.filled();
                let pts = s.points.iter().copied();
                match m {
                    Marker::Circle => chart.draw_series(pts.map(|c| Circle::new(c, 4, fill))),
                    Marker::Triangle => chart.draw_series(pts.map(|c| TriangleMarker::new(c, 6, fill))),
                    Marker::Cross => chart.draw_series(pts.map(|c| Cross::new(c, 5, color.stroke_width(2)))),
                }
                .map_err(err)?
            }
        };
        if let Some(label) = &s.label {
            // The sample before the legend entry: the line with its marker, or a filled box.
            let line = move || PathElement::new(vec![(0, 0), (20, 0)], color.stroke_width(2));
            let anno = anno.label(label);
            match s.style {
                Style::Line => anno.legend(move |(x, y)| EmptyElement::at((x, y)) + line()),
                Style::Filled => anno.legend(move |(x, y)| {
                    EmptyElement::at((x, y)) + Rectangle::new([(0, -5), (20, 5)], color.mix(0.4).filled())
                }),
                Style::Points(Marker::Circle) => {
                    anno.legend(move |(x, y)| EmptyElement::at((x, y)) + Circle::new((10, 0), 4, color.filled()))
                }
                Style::Points(Marker::Triangle) => anno
                    .legend(move |(x, y)| EmptyElement::at((x, y)) + TriangleMarker::new((10, 0), 6, color.filled())),
                Style::Points(Marker::Cross) => {
                    anno.legend(move |(x, y)| EmptyElement::at((x, y)) + Cross::new((10, 0), 5, color.stroke_width(2)))
                }
                Style::Markers(Marker::Circle) => anno
                    .legend(move |(x, y)| EmptyElement::at((x, y)) + line() + Circle::new((10, 0), 4, color.filled())),
                Style::Markers(Marker::Triangle) => anno.legend(move |(x, y)| {
                    EmptyElement::at((x, y)) + line() + TriangleMarker::new((10, 0), 6, color.filled())
                }),
                Style::Markers(Marker::Cross) => anno.legend(move |(x, y)| {
                    EmptyElement::at((x, y)) + line() + Cross::new((10, 0), 5, color.stroke_width(2))
                }),
            };
        }
    }

    let font = (FONT, 12).into_font();
    chart
        .draw_series(p.labels.iter().map(|l| {
            let style = font.clone().color(&l.color);
            EmptyElement::at(l.at) + Text::new(l.text.clone(), (6, -16), style)
        }))
        .map_err(err)?;

    if let Some(pos) = &p.legend {
        if p.series.iter().any(|s| s.label.is_some() && !s.points.is_empty()) {
            chart
                .configure_series_labels()
                .position(pos.clone())
                .label_font((FONT, 13))
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(180, 180, 180))
                .draw()
                .map_err(err)?;
        }
    }
    Ok(())
}
