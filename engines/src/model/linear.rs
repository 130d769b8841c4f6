//! The one linear layer every model uses, whatever the weights' format: y = x · Wᵀ (+ b).
//! On the CPU the stored bytes (F32/F16/BF16 or any GGML block type) feed tgi's own kernels
//! straight from the memory map; on a GPU dense weights are tensors and quantized ones candle's QMatMul.

use candle_core::backend::BackendStorage;
use candle_core::quantized::{GgmlDType, QMatMul};
use candle_core::{CpuStorage, CustomOp1, Device, Layout, Shape, Tensor};
use tgi_formats::GgmlType;

use super::bnb::Bnb4Tensor;
use super::bytes::{self, WeightBytes};
use crate::kernels::awq::{self, AwqMatrix};
use crate::kernels::bnb4::{self, Bnb4View};
use crate::kernels::interleaved::Interleaved;
use crate::kernels::{self, WeightView};

/// A weight matrix in the form its device computes with.
enum Weight {
    /// Stored bytes multiplied by the host kernels.
    Host { ty: GgmlType, bytes: WeightBytes },
    /// Stored bytes repacked at load into the interleaved layout of the host kernels' level.
    Interleaved(Interleaved),
    /// bitsandbytes 4-bit codes multiplied by the host kernels.
    Bnb4(Bnb4Tensor),
    /// AWQ 4-bit codes, repacked at load, multiplied by the host kernels.
    Awq(AwqMatrix),
    /// A dense device tensor `[rows, cols]`.
    Dense(Tensor),
    /// A quantized device tensor.
    Quant(QMatMul),
}

/// A linear layer: `rows` outputs from `cols` inputs, with an optional bias.
pub struct Linear {
    weight: Weight,
    bias: Option<Tensor>,
    rows: usize,
    cols: usize,
}

impl Linear {
    /// A layer over stored bytes of type `ty` (`[rows, cols]` row-major): multiplied by the host kernels when
    /// `host`, else placed on `device` as a tensor (the GPU path, which also runs on the CPU).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ty: GgmlType,
        bytes: WeightBytes,
        rows: usize,
        cols: usize,
        bias: Option<Tensor>,
        device: &Device,
        dense_dtype: candle_core::DType,
        host: bool,
    ) -> candle_core::Result<Self> {
        let weight = if host {
            let view = WeightView::new(ty, rows, cols, bytes.as_slice()).map_err(candle_core::Error::msg)?;
            match Interleaved::pack(kernels::backend(), view, |part| bytes.release(part)) {
                Some(packed) => Weight::Interleaved(packed),
                None => Weight::Host { ty, bytes },
            }
        } else if let Some(dtype) = candle_ggml(ty) {
            let q = candle_core::quantized::ggml_file::qtensor_from_ggml(
                dtype,
                bytes.as_slice(),
                vec![rows, cols],
                device,
            )?;
            Weight::Quant(QMatMul::from_qtensor(q)?)
        } else {
            dense_weight(rows, cols, device, dense_dtype, |f| {
                tgi_formats::quant::dequantize_row(ty, bytes.as_slice(), f).map_err(candle_core::Error::wrap)
            })?
        };
        Ok(Linear { weight, bias, rows, cols })
    }

    /// A layer over bitsandbytes 4-bit weights (`[rows, cols]`): multiplied from the packed codes when `host`,
    /// else dequantized once to a dense `dense_dtype` tensor on `device` (GPUs have no 4-bit kernel here).
    #[allow(clippy::too_many_arguments)]
    pub fn new_bnb4(
        t: Bnb4Tensor,
        rows: usize,
        cols: usize,
        bias: Option<Tensor>,
        device: &Device,
        dense_dtype: candle_core::DType,
        host: bool,
    ) -> candle_core::Result<Self> {
        let view = Bnb4View::new(rows, cols, t.blocksize, t.packed.as_slice(), &t.absmax, &t.code)
            .map_err(candle_core::Error::msg)?;
        let weight = if host {
            Weight::Bnb4(t)
        } else {
            dense_weight(rows, cols, device, dense_dtype, |f| {
                view.dequantize(f);
                Ok(())
            })?
        };
        Ok(Linear { weight, bias, rows, cols })
    }

    /// A layer over AWQ weights (`[rows, cols]`, repacked): multiplied from the 4-bit codes when `host`, else
    /// dequantized once to a dense `dense_dtype` tensor on `device` (GPUs have no 4-bit kernel here).
    #[allow(clippy::too_many_arguments)]
    pub fn new_awq(
        m: AwqMatrix,
        rows: usize,
        cols: usize,
        bias: Option<Tensor>,
        device: &Device,
        dense_dtype: candle_core::DType,
        host: bool,
    ) -> candle_core::Result<Self> {
        let weight = if host {
            Weight::Awq(m)
        } else {
            dense_weight(rows, cols, device, dense_dtype, |f| {
                m.dequantize(f);
                Ok(())
            })?
        };
        Ok(Linear { weight, bias, rows, cols })
    }

    /// Outputs (rows of the weight matrix).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The layer over the outputs `ids` only, in that order (an output layer limited to some token ids), from
    /// host weights (block types or floats, repacked again where they were); `None` where the weights are not
    /// host bytes or a bias is added. Every id must be below [`Linear::rows`].
    pub fn select_rows(&self, ids: &[u32]) -> candle_core::Result<Option<Linear>> {
        if ids.is_empty() || self.bias.is_some() {
            return Ok(None);
        }
        let (ty, all) = match &self.weight {
            Weight::Host { ty, bytes } => (*ty, std::borrow::Cow::Borrowed(bytes.as_slice())),
            Weight::Interleaved(p) => (p.ty(), std::borrow::Cow::Owned(p.unpack())),
            _ => return Ok(None),
        };
        let row = ty.bytes_for(self.cols as u64).ok_or_else(|| candle_core::Error::msg("rows of partial blocks"))?;
        let row = row as usize;
        let mut bytes = Vec::with_capacity(ids.len() * row);
        for &id in ids {
            let id = id as usize;
            if id >= self.rows {
                return Err(candle_core::Error::msg(format!("row {id} of {}", self.rows)));
            }
            bytes.extend_from_slice(&all[id * row..(id + 1) * row]);
        }
        let (n, device) = (ids.len(), Device::Cpu);
        Linear::new(ty, WeightBytes::Owned(bytes), n, self.cols, None, &device, candle_core::DType::F32, true).map(Some)
    }

    /// Whether the weights compute in f32: stored as F32 on the host, or an f32 tensor on the device (quantized
    /// and 4-bit weights are not, wherever they run).
    pub fn is_f32(&self) -> bool {
        match &self.weight {
            Weight::Host { ty, .. } => *ty == GgmlType::F32,
            Weight::Dense(w) => w.dtype() == candle_core::DType::F32,
            Weight::Interleaved(_) | Weight::Bnb4(_) | Weight::Awq(_) | Weight::Quant(_) => false,
        }
    }

    /// The interleaved matrix the weights were repacked into at load, if they were.
    pub fn interleaved(&self) -> Option<&Interleaved> {
        match &self.weight {
            Weight::Interleaved(p) => Some(p),
            _ => None,
        }
    }

    /// Pins host weight bytes in RAM.
    pub fn lock(&self) -> std::io::Result<()> {
        match &self.weight {
            Weight::Host { bytes, .. } => bytes.lock(),
            Weight::Interleaved(p) => bytes::lock(p.bytes()),
            Weight::Bnb4(t) => t.packed.lock(),
            Weight::Awq(m) => m.buffers().into_iter().try_for_each(bytes::lock),
            _ => Ok(()),
        }
    }

    /// `x · Wᵀ + b` for `x` of shape `[.., cols]`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = match &self.weight {
            Weight::Host { ty, bytes } => {
                let view = WeightView { ty: *ty, rows: self.rows, cols: self.cols, data: bytes.as_slice() };
                x.contiguous()?.apply_op1_no_bwd(&HostMatmul(view))?
            }
            Weight::Interleaved(p) => x.contiguous()?.apply_op1_no_bwd(&HostInterleaved(p, self.rows, self.cols))?,
            Weight::Bnb4(t) => {
                let view = Bnb4View::new(self.rows, self.cols, t.blocksize, t.packed.as_slice(), &t.absmax, &t.code)
                    .map_err(candle_core::Error::msg)?;
                x.contiguous()?.apply_op1_no_bwd(&HostBnb4(view))?
            }
            Weight::Awq(m) => x.contiguous()?.apply_op1_no_bwd(&HostAwq(m, self.rows, self.cols))?,
            Weight::Dense(w) => x.broadcast_matmul(&w.t()?)?,
            Weight::Quant(q) => x.apply(q)?,
        };
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

/// What load repacked into the interleaved layout, for the startup log.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Repacked {
    /// Matrices repacked.
    pub matrices: usize,
    /// Their bytes (as many as stored).
    pub bytes: usize,
    /// The time packing took, all matrices together.
    pub took: std::time::Duration,
}

impl Repacked {
    /// The sum over `linears`.
    pub fn of<'a>(linears: impl Iterator<Item = &'a Linear>) -> Repacked {
        linears.filter_map(Linear::interleaved).fold(Repacked::default(), |r, p| Repacked {
            matrices: r.matrices + 1,
            bytes: r.bytes + p.bytes().len(),
            took: r.took + p.took(),
        })
    }
}

impl std::fmt::Display for Repacked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "weights repacked for the {} kernels: {} matrices, {:.1} MiB, in {} ms",
            kernels::backend().name(),
            self.matrices,
            self.bytes as f64 / (1 << 20) as f64,
            self.took.as_millis()
        )
    }
}

/// A dense `[rows, cols]` weight of `dtype` on `device`, its f32 values written by `fill`.
fn dense_weight(
    rows: usize,
    cols: usize,
    device: &Device,
    dtype: candle_core::DType,
    fill: impl FnOnce(&mut [f32]) -> candle_core::Result<()>,
) -> candle_core::Result<Weight> {
    let mut f = vec![0f32; rows * cols];
    fill(&mut f)?;
    Ok(Weight::Dense(Tensor::from_vec(f, (rows, cols), device)?.to_dtype(dtype)?))
}

/// The candle name of a GGML block type, for the types placed on the device quantized (the float types, the
/// i-quants and the ternary types, which candle lacks, are dequantized once instead).
fn candle_ggml(ty: GgmlType) -> Option<GgmlDType> {
    Some(match ty {
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q5_1 => GgmlDType::Q5_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q2_K => GgmlDType::Q2K,
        GgmlType::Q3_K => GgmlDType::Q3K,
        GgmlType::Q4_K => GgmlDType::Q4K,
        GgmlType::Q5_K => GgmlDType::Q5K,
        GgmlType::Q6_K => GgmlDType::Q6K,
        _ => return None,
    })
}

/// The host kernels as a candle op over an f32 activation tensor.
struct HostMatmul<'a>(WeightView<'a>);

impl CustomOp1 for HostMatmul<'_> {
    fn name(&self) -> &'static str {
        "tgi-host-matmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let w = self.0;
        host_fwd(storage, layout, w.rows, w.cols, |x, n, y| kernels::matmul(w, x, n, y))
    }
}

/// The interleaved host kernel as a candle op over an f32 activation tensor: the matrix, its rows and columns.
struct HostInterleaved<'a>(&'a Interleaved, usize, usize);

impl CustomOp1 for HostInterleaved<'_> {
    fn name(&self) -> &'static str {
        "tgi-host-interleaved"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        host_fwd(storage, layout, self.1, self.2, |x, n, y| self.0.matmul(x, n, y))
    }
}

/// The 4-bit host kernel as a candle op over an f32 activation tensor.
struct HostBnb4<'a>(Bnb4View<'a>);

impl CustomOp1 for HostBnb4<'_> {
    fn name(&self) -> &'static str {
        "tgi-host-bnb4"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let w = self.0;
        host_fwd(storage, layout, w.rows, w.cols, |x, n, y| bnb4::matmul(w, x, n, y))
    }
}

/// The AWQ host kernel as a candle op over an f32 activation tensor: the matrix, its rows and columns.
struct HostAwq<'a>(&'a AwqMatrix, usize, usize);

impl CustomOp1 for HostAwq<'_> {
    fn name(&self) -> &'static str {
        "tgi-host-awq"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        host_fwd(storage, layout, self.1, self.2, |x, n, y| awq::matmul(self.0, x, n, y))
    }
}

/// Runs `matmul(x, n, y)` over a contiguous f32 input `[.., cols]`, giving `[.., rows]`.
fn host_fwd(
    storage: &CpuStorage,
    layout: &Layout,
    rows: usize,
    cols: usize,
    matmul: impl Fn(&[f32], usize, &mut [f32]),
) -> candle_core::Result<(CpuStorage, Shape)> {
    let CpuStorage::F32(x) = storage else {
        candle_core::bail!("host matmul expects f32 activations, got {:?}", storage.dtype())
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("host matmul: input not contiguous")
    };
    let x = &x[start..end];
    let mut dims = layout.dims().to_vec();
    if dims.last() != Some(&cols) {
        candle_core::bail!("host matmul: input {:?} does not end in {} features", dims, cols)
    }
    let n = x.len() / cols;
    let mut y = vec![0f32; n * rows];
    matmul(x, n, &mut y);
    *dims.last_mut().expect("checked above") = rows;
    Ok((CpuStorage::F32(y), Shape::from(dims)))
}
