//! Where the model runs (`--device cpu|cuda[:N]|metal`) and in which float type dense weights compute
//! (`--dtype f32|f16|bf16`).

use std::fmt;
use std::str::FromStr;

use candle_core::Device;

/// Errors choosing a device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The spelling is not `cpu`, `gpu`, `cuda`, `cuda:N` or `metal`.
    #[error("unknown device '{0}': expected cpu, gpu, cuda, cuda:N or metal")]
    Unknown(String),
    /// `gpu` asked for, and the binary was built with no GPU backend.
    #[error(
        "this tgi was built without GPU support; rebuild with `cargo build --release --features cuda` (NVIDIA) or \
         `--features metal` (Apple)"
    )]
    NoGpu,
    /// The binary was built without the backend the device needs.
    #[error("this tgi was built without {feature} support; rebuild with `cargo build --release --features {feature}`")]
    NotBuilt {
        /// The cargo feature that enables it.
        feature: &'static str,
    },
    /// The backend failed to open the device.
    #[error("cannot open {device}: {source}")]
    Open {
        /// The device asked for.
        device: DeviceSpec,
        /// What the backend said.
        source: candle_core::Error,
    },
}

/// A device as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The host CPU (the default).
    #[default]
    Cpu,
    /// An NVIDIA GPU by ordinal.
    Cuda(usize),
    /// The Apple GPU.
    Metal,
}

impl FromStr for DeviceSpec {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, DeviceError> {
        let unknown = || DeviceError::Unknown(s.to_string());
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(DeviceSpec::Cpu),
            "gpu" => DeviceSpec::gpu(),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            "metal" | "mps" => Ok(DeviceSpec::Metal),
            other => match other.strip_prefix("cuda:") {
                Some(n) => n.parse().map(DeviceSpec::Cuda).map_err(|_| unknown()),
                None => Err(unknown()),
            },
        }
    }
}

impl DeviceSpec {
    /// The GPU this build runs on: the first CUDA device, else Metal; refused for a build without either.
    pub fn gpu() -> Result<DeviceSpec, DeviceError> {
        if cfg!(feature = "cuda") {
            Ok(DeviceSpec::Cuda(0))
        } else if cfg!(feature = "metal") {
            Ok(DeviceSpec::Metal)
        } else {
            Err(DeviceError::NoGpu)
        }
    }

    /// The device for the startup log and `--json` reports: on the CPU, with the kernels' instruction-set level.
    pub fn describe(&self) -> String {
        match self {
            DeviceSpec::Cpu => format!("cpu ({} kernels)", crate::kernels::backend().name()),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
            DeviceSpec::Metal => f.write_str("metal"),
        }
    }
}

impl DeviceSpec {
    /// Opens the device, or says which cargo feature the binary lacks.
    pub fn open(self) -> Result<Device, DeviceError> {
        let open = |r: candle_core::Result<Device>| r.map_err(|source| DeviceError::Open { device: self, source });
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(n) if cfg!(feature = "cuda") => open(Device::new_cuda(n)),
            DeviceSpec::Cuda(_) => Err(DeviceError::NotBuilt { feature: "cuda" }),
            DeviceSpec::Metal if cfg!(feature = "metal") => open(Device::new_metal(0)),
            DeviceSpec::Metal => Err(DeviceError::NotBuilt { feature: "metal" }),
        }
    }
}

/// Free memory of a GPU in bytes (what the CUDA driver reports for its context), `None` for the host CPU and
/// Metal, whose budget is the host's available memory.
pub fn free_device_memory(device: &Device) -> candle_core::Result<Option<u64>> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => {
            let (free, _total) = d.cuda_stream().context().mem_get_info().map_err(candle_core::Error::wrap)?;
            Ok(Some(free as u64))
        }
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Ok(None),
        Device::Cpu | Device::Metal(_) => Ok(None),
    }
}

/// The float type dense (unquantized) weights are kept and multiplied in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComputeDType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
}

impl FromStr for ComputeDType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(ComputeDType::F32),
            "f16" | "float16" | "half" => Ok(ComputeDType::F16),
            "bf16" | "bfloat16" => Ok(ComputeDType::BF16),
            _ => Err(format!("unknown dtype '{s}': expected f32, f16 or bf16")),
        }
    }
}

impl ComputeDType {
    /// The candle dtype.
    pub fn candle(self) -> candle_core::DType {
        match self {
            ComputeDType::F32 => candle_core::DType::F32,
            ComputeDType::F16 => candle_core::DType::F16,
            ComputeDType::BF16 => candle_core::DType::BF16,
        }
    }

    /// The GGML tensor type with the same encoding.
    pub fn ggml(self) -> tgi_formats::GgmlType {
        match self {
            ComputeDType::F32 => tgi_formats::GgmlType::F32,
            ComputeDType::F16 => tgi_formats::GgmlType::F16,
            ComputeDType::BF16 => tgi_formats::GgmlType::BF16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices() {
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("CUDA".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
        assert_eq!("metal".parse::<DeviceSpec>().unwrap(), DeviceSpec::Metal);
        assert!("cuda:x".parse::<DeviceSpec>().is_err());
        assert!("tpu".parse::<DeviceSpec>().unwrap_err().to_string().contains("expected cpu"));
        assert_eq!(DeviceSpec::Cuda(1).to_string(), "cuda:1");
    }

    #[test]
    fn unbuilt_backends_are_clear_errors() {
        assert!(DeviceSpec::Cpu.open().unwrap().is_cpu());
        if !cfg!(feature = "cuda") {
            let e = DeviceSpec::Cuda(0).open().unwrap_err().to_string();
            assert!(e.contains("without cuda support") && e.contains("--features cuda"), "{e}");
        }
        if !cfg!(feature = "metal") {
            assert!(DeviceSpec::Metal.open().unwrap_err().to_string().contains("without metal"));
        }
        // `gpu` is the GPU the build has, else a hint naming both GPU features.
        match "GPU".parse::<DeviceSpec>() {
            Ok(d) => assert_ne!(d, DeviceSpec::Cpu),
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("without GPU support") && e.contains("--features cuda") && e.contains("metal"),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn the_host_has_no_device_memory() {
        assert_eq!(free_device_memory(&Device::Cpu).unwrap(), None);
    }

    #[test]
    fn parses_dtypes() {
        assert_eq!("bf16".parse::<ComputeDType>().unwrap(), ComputeDType::BF16);
        assert!("f8".parse::<ComputeDType>().is_err());
    }
}
