//! A bitmap backend wrapper that draws text itself. plotters 0.3.7 rasterises ab_glyph text
//! without each glyph's left side bearing, which spaces letters unevenly ("Tim e"); this places
//! every glyph at its exact (sub-pixel) position instead, keeping plotters' text box and anchors.

use ab_glyph::{point, Font, FontRef, ScaleFont};
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind};

/// `B` with its text drawn from `font` (the only font the charts use).
pub struct TextFix<B> {
    inner: B,
    font: FontRef<'static>,
}

impl<B> TextFix<B> {
    /// Wraps `inner`; `font` is the TrueType data registered for the charts.
    pub fn new(inner: B, font: &'static [u8]) -> Result<TextFix<B>, ab_glyph::InvalidFont> {
        Ok(TextFix { inner, font: FontRef::try_from_slice(font)? })
    }
}

impl<B: DrawingBackend> DrawingBackend for TextFix<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.present()
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.inner.blit_bitmap(pos, size, src)
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        // The text box and anchoring exactly as plotters lays them out.
        let ((min_x, min_y), (max_x, max_y)) =
            style.layout_box(text).map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let (width, height) = (max_x - min_x, max_y - min_y);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let trans = style.transform();
        let (w, h) = self.inner.get_size();
        let size = style.size() as f32;
        let font = self.font.as_scaled(size);
        let mut x = 0f32;
        let mut prev = None;
        let mut pixels = Vec::new();
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                x += font.kern(p, id);
            }
            prev = Some(id);
            let glyph = id.with_scale_and_position(size, point(x, 0.0));
            if let Some(outline) = font.outline_glyph(glyph) {
                let b = outline.px_bounds();
                let (gx, gy) = (b.min.x as i32, (size / 2.0 + b.min.y) as i32);
                outline.draw(|px, py, cover| pixels.push((gx + px as i32, gy + py as i32, cover)));
            }
            x += font.h_advance(id);
        }
        for (px, py, cover) in pixels {
            let (tx, ty) = trans.transform(px + dx - min_x, py + dy - min_y);
            let (tx, ty) = (pos.0 + tx, pos.1 + ty);
            if tx >= 0 && tx < w as i32 && ty >= 0 && ty < h as i32 && cover > 0.0 {
                let c = BackendColor { alpha: color.alpha * f64::from(cover.min(1.0)), rgb: color.rgb };
                self.inner.draw_pixel((tx, ty), c)?;
            }
        }
        Ok(())
    }
}
