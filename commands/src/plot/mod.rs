//! Charts (plotters, PNG and SVG) that bench and tune share: figures of panels with series, their
//! axes, and writing them to files. Text uses a bundled DejaVu Sans subset, so no system fonts are
//! needed.

pub mod axis;
pub mod figure;
mod text;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;
use plotters::prelude::{BitMapBackend, IntoDrawingArea, SVGBackend};
use plotters::style::FontStyle;

use self::figure::{Figure, FONT};
use crate::output::{finish_writer, AtomicFile};
use crate::InputError;

/// DejaVu Sans cut down to Latin-1 (see `plot/font/LICENSE`).
static FONT_TTF: &[u8] = include_bytes!("font/DejaVuSans-subset.ttf");

/// Draws `figures` into `dir` (created when missing) as PNG and SVG; returns the files written.
pub fn write_figures(figures: &[Figure], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    register_font()?;
    if dir.exists() && !dir.is_dir() {
        return Err(InputError(format!("{}: not a directory", dir.display())).into());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for fig in figures {
        written.extend(write_figure(fig, dir)?);
    }
    Ok(written)
}

fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| plotters::style::register_font(FONT, FontStyle::Normal, FONT_TTF).is_ok());
    anyhow::ensure!(ok, "the bundled chart font could not be loaded");
    Ok(())
}

/// Renders `fig` to `dir/NAME.svg` and `dir/NAME.png`.
fn write_figure(fig: &Figure, dir: &Path) -> anyhow::Result<[PathBuf; 2]> {
    let size = fig.size();
    let draw_err = |e: String| anyhow::anyhow!("drawing {} failed: {e}", fig.name);

    let mut svg = String::new();
    figure::draw(fig, &SVGBackend::with_string(&mut svg, size).into_drawing_area()).map_err(draw_err)?;
    let svg_path = dir.join(format!("{}.svg", fig.name));
    write_atomic(&svg_path, |w| Ok(w.write_all(svg.as_bytes())?))?;

    let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
    let bitmap = text::TextFix::new(BitMapBackend::with_buffer(&mut rgb, size), FONT_TTF)
        .map_err(|_| anyhow::anyhow!("the bundled chart font could not be loaded"))?;
    figure::draw(fig, &bitmap.into_drawing_area()).map_err(draw_err)?;
    let png_path = dir.join(format!("{}.png", fig.name));
    write_atomic(&png_path, |w| {
        let mut enc = png::Encoder::new(w, size.0, size.1);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Best);
        let mut png = enc.write_header()?;
        png.write_image_data(&rgb)?;
        png.finish()?;
        Ok(())
    })?;
    Ok([png_path, svg_path])
}

/// Writes `path` through a temporary file renamed into place, replacing an older chart.
fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file = AtomicFile::create(path, true, &[])?;
    let mut w = file.writer()?;
    fill(&mut w).with_context(|| format!("writing {} failed", path.display()))?;
    finish_writer(w)?;
    file.commit()
}

/// Milliseconds with three significant figures or so: `4.27 ms`, `42.7 ms`, `427 ms`.
pub fn fmt_ms(v: f64) -> String {
    if v.abs() < 10.0 {
        format!("{v:.2} ms")
    } else if v.abs() < 100.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds() {
        assert_eq!(fmt_ms(4.271), "4.27 ms");
        assert_eq!(fmt_ms(42.71), "42.7 ms");
        assert_eq!(fmt_ms(427.1), "427 ms");
    }
}
