//! GGUF quantization presets (llama.cpp "ftypes") and the per-tensor type rules of llama-quantize.

use std::fmt;
use std::str::FromStr;

use regex::Regex;
use tgi_formats::GgmlType;

use super::ConvertError;

/// A whole-file quantization preset, as `llama-quantize` names them.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// Everything F32.
    F32,
    /// Matrices F16, vectors F32.
    F16,
    /// Matrices BF16, vectors F32.
    BF16,
    /// Q8_0 matrices.
    Q8_0,
    /// Q4_0 matrices, Q6_K output.
    Q4_0,
    /// Q4_1 matrices, Q6_K output.
    Q4_1,
    /// Q5_0 matrices, Q6_K output.
    Q5_0,
    /// Q5_1 matrices, Q6_K output.
    Q5_1,
    /// Q2_K mix.
    Q2_K,
    /// Q3_K medium mix.
    Q3_K_M,
    /// Q4_K small mix.
    Q4_K_S,
    /// Q4_K medium mix.
    Q4_K_M,
    /// Q5_K small mix.
    Q5_K_S,
    /// Q5_K medium mix.
    Q5_K_M,
    /// Q6_K matrices.
    Q6_K,
    /// IQ4_NL matrices (4.5 bpw non-linear), Q6_K output.
    IQ4_NL,
    /// IQ4_XS matrices (4.25 bpw non-linear), Q6_K output.
    IQ4_XS,
    /// IQ3_S matrices (3.44 bpw lattice codebook), Q6_K output.
    IQ3_S,
    /// IQ3_S mix with Q4_K attention V, output and first ffn_down layers (3.66 bpw).
    IQ3_M,
    /// IQ3_XXS mix (3.06 bpw) with IQ2_S attention Q and K, IQ3_S attention output; needs an importance matrix.
    IQ3_XXS,
    /// IQ2_XXS mix (2.06 bpw) with Q2_K attention V and first ffn_down layers; needs an importance matrix.
    IQ2_XXS,
    /// IQ2_XS mix (2.31 bpw) with Q2_K attention V and first ffn_down layers; needs an importance matrix.
    IQ2_XS,
    /// IQ2_XS mix (2.5 bpw) with IQ3_S attention V, output and first ffn_down layers; needs an importance matrix.
    IQ2_S,
    /// IQ2_S mix (2.7 bpw) with IQ3_S attention V, output and first ffn_down layers; needs an importance matrix.
    IQ2_M,
    /// IQ1_M mix (1.75 bpw) with IQ2_XXS attention output, Q2_K attention V and first ffn_down layers; needs an
    /// importance matrix.
    IQ1_M,
    /// IQ1_S mix (1.56 bpw) with IQ2_XXS attention output, Q2_K attention V and first ffn_down layers; needs an
    /// importance matrix.
    IQ1_S,
    /// TQ1_0 ternary matrices (1.69 bpw), Q4_K token embeddings, Q6_K output.
    TQ1_0,
    /// TQ2_0 ternary matrices (2.06 bpw), Q4_K token embeddings, Q6_K output.
    TQ2_0,
}

impl Preset {
    /// Every preset, in the order `--help` lists them.
    pub const ALL: [Preset; 28] = [
        Preset::F32,
        Preset::F16,
        Preset::BF16,
        Preset::Q8_0,
        Preset::Q4_0,
        Preset::Q4_1,
        Preset::Q5_0,
        Preset::Q5_1,
        Preset::Q2_K,
        Preset::Q3_K_M,
        Preset::Q4_K_S,
        Preset::Q4_K_M,
        Preset::Q5_K_S,
        Preset::Q5_K_M,
        Preset::Q6_K,
        Preset::IQ4_NL,
        Preset::IQ4_XS,
        Preset::IQ3_S,
        Preset::IQ3_M,
        Preset::IQ3_XXS,
        Preset::IQ2_M,
        Preset::IQ2_S,
        Preset::IQ2_XS,
        Preset::IQ2_XXS,
        Preset::IQ1_M,
        Preset::IQ1_S,
        Preset::TQ1_0,
        Preset::TQ2_0,
    ];

    /// llama-quantize's aliases: a bare K type names its medium mix.
    pub const ALIASES: [(&'static str, Preset); 3] =
        [("q3_k", Preset::Q3_K_M), ("q4_k", Preset::Q4_K_M), ("q5_k", Preset::Q5_K_M)];

    /// The lower-case name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Preset::F32 => "f32",
            Preset::F16 => "f16",
            Preset::BF16 => "bf16",
            Preset::Q8_0 => "q8_0",
            Preset::Q4_0 => "q4_0",
            Preset::Q4_1 => "q4_1",
            Preset::Q5_0 => "q5_0",
            Preset::Q5_1 => "q5_1",
            Preset::Q2_K => "q2_k",
            Preset::Q3_K_M => "q3_k_m",
            Preset::Q4_K_S => "q4_k_s",
            Preset::Q4_K_M => "q4_k_m",
            Preset::Q5_K_S => "q5_k_s",
            Preset::Q5_K_M => "q5_k_m",
            Preset::Q6_K => "q6_k",
            Preset::IQ4_NL => "iq4_nl",
            Preset::IQ4_XS => "iq4_xs",
            Preset::IQ3_S => "iq3_s",
            Preset::IQ3_M => "iq3_m",
            Preset::IQ3_XXS => "iq3_xxs",
            Preset::IQ2_XXS => "iq2_xxs",
            Preset::IQ2_XS => "iq2_xs",
            Preset::IQ2_S => "iq2_s",
            Preset::IQ2_M => "iq2_m",
            Preset::IQ1_M => "iq1_m",
            Preset::IQ1_S => "iq1_s",
            Preset::TQ1_0 => "tq1_0",
            Preset::TQ2_0 => "tq2_0",
        }
    }

    /// The `general.file_type` value (llama_ftype) llama.cpp writes for this preset.
    pub fn file_type(self) -> u32 {
        match self {
            Preset::F32 => 0,
            Preset::F16 => 1,
            Preset::Q4_0 => 2,
            Preset::Q4_1 => 3,
            Preset::Q8_0 => 7,
            Preset::Q5_0 => 8,
            Preset::Q5_1 => 9,
            Preset::Q2_K => 10,
            Preset::Q3_K_M => 12,
            Preset::Q4_K_S => 14,
            Preset::Q4_K_M => 15,
            Preset::Q5_K_S => 16,
            Preset::Q5_K_M => 17,
            Preset::Q6_K => 18,
            Preset::IQ2_XXS => 19,
            Preset::IQ2_XS => 20,
            Preset::IQ3_XXS => 23,
            Preset::IQ1_S => 24,
            Preset::IQ4_NL => 25,
            Preset::IQ3_S => 26,
            Preset::IQ3_M => 27,
            Preset::IQ2_S => 28,
            Preset::IQ2_M => 29,
            Preset::IQ4_XS => 30,
            Preset::IQ1_M => 31,
            Preset::BF16 => 32,
            Preset::TQ1_0 => 36,
            Preset::TQ2_0 => 37,
        }
    }

    /// The type most matrices get (llama_ftype_get_default_type).
    pub fn default_type(self) -> GgmlType {
        match self {
            Preset::F32 => GgmlType::F32,
            Preset::F16 => GgmlType::F16,
            Preset::BF16 => GgmlType::BF16,
            Preset::Q8_0 => GgmlType::Q8_0,
            Preset::Q4_0 => GgmlType::Q4_0,
            Preset::Q4_1 => GgmlType::Q4_1,
            Preset::Q5_0 => GgmlType::Q5_0,
            Preset::Q5_1 => GgmlType::Q5_1,
            Preset::Q2_K => GgmlType::Q2_K,
            Preset::Q3_K_M => GgmlType::Q3_K,
            Preset::Q4_K_S | Preset::Q4_K_M => GgmlType::Q4_K,
            Preset::Q5_K_S | Preset::Q5_K_M => GgmlType::Q5_K,
            Preset::Q6_K => GgmlType::Q6_K,
            Preset::IQ4_NL => GgmlType::IQ4_NL,
            Preset::IQ4_XS => GgmlType::IQ4_XS,
            Preset::IQ3_S | Preset::IQ3_M => GgmlType::IQ3_S,
            Preset::IQ3_XXS => GgmlType::IQ3_XXS,
            Preset::IQ2_XXS => GgmlType::IQ2_XXS,
            Preset::IQ2_XS | Preset::IQ2_S => GgmlType::IQ2_XS,
            Preset::IQ2_M => GgmlType::IQ2_S,
            Preset::IQ1_M => GgmlType::IQ1_M,
            Preset::IQ1_S => GgmlType::IQ1_S,
            Preset::TQ1_0 => GgmlType::TQ1_0,
            Preset::TQ2_0 => GgmlType::TQ2_0,
        }
    }

    /// Whether this is one of llama.cpp's 1-2 bit mixes (IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ1_S, IQ1_M), whose
    /// per-tensor rules differ from the rest.
    fn is_low_bit_mix(self) -> bool {
        matches!(self, Preset::IQ2_XXS | Preset::IQ2_XS | Preset::IQ2_S | Preset::IQ2_M | Preset::IQ1_S | Preset::IQ1_M)
    }

    /// Whether llama-quantize writes this preset only with an importance matrix (its default type needs one).
    pub fn needs_imatrix(self) -> bool {
        self.is_low_bit_mix() || self == Preset::IQ3_XXS
    }

    /// Whether this is IQ2_S or IQ2_M, which give their sensitive tensors IQ3_S.
    fn is_iq2_s_mix(self) -> bool {
        matches!(self, Preset::IQ2_S | Preset::IQ2_M)
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// llama-quantize's presets that it writes only with an importance matrix and tgi does not write (Q2_K_S).
const IMATRIX_ONLY: [&str; 1] = ["q2_k_s"];

impl FromStr for Preset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        if IMATRIX_ONLY.contains(&lower.as_str()) {
            return Err(format!(
                "llama-quantize writes '{s}' only with an importance matrix (--imatrix) and tgi does not write it; \
                 the lowest-bit types tgi writes are iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s and iq2_m (with --imatrix FILE)"
            ));
        }
        let alias = Preset::ALIASES.iter().find(|(n, _)| *n == lower).map(|(_, p)| *p);
        alias.or_else(|| Preset::ALL.into_iter().find(|p| p.name() == lower)).ok_or_else(|| {
            let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
            format!(
                "unknown type '{s}'; expected one of: {} (any case; q3_k, q4_k, q5_k mean the _m mixes)",
                names.join(", ")
            )
        })
    }
}

/// What role a tensor plays, from its GGUF name (llama.cpp's tensor_category).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnDown,
    Other,
}

fn category(name: &str) -> Category {
    if name == "output.weight" {
        Category::Output
    } else if name == "token_embd.weight" {
        Category::TokenEmbd
    } else if name.contains("attn_v.weight") {
        Category::AttnV
    } else if name.contains("attn_k.weight") {
        Category::AttnK
    } else if name.contains("attn_q.weight") {
        Category::AttnQ
    } else if name.contains("attn_output.weight") {
        Category::AttnOutput
    } else if name.contains("ffn_down") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

/// Whether llama-quantize would quantize a tensor at all (2-D+ `*weight`, not a norm).
pub fn allows_quantization(name: &str, n_dims: usize) -> bool {
    n_dims >= 2 && name.ends_with("weight") && !name.contains("_norm.weight") && !name.contains("ffn_gate_inp.weight")
}

/// User overrides of the preset's choices (`--output-tensor-type`, `--token-embedding-type`, `--tensor-type`).
#[derive(Clone, Debug, Default)]
pub struct TypeOverrides {
    /// Type for `output.weight`.
    pub output: Option<GgmlType>,
    /// Type for `token_embd.weight`.
    pub token_embedding: Option<GgmlType>,
    /// `REGEX=TYPE` rules; the first whose regex matches the GGUF name wins.
    pub patterns: Vec<(Regex, GgmlType)>,
    /// Whether an importance matrix weighs the encoding (`--imatrix`): llama.cpp then stores the
    /// first eighth of a Q4_0 (Q5_0) file's ffn_down layers as Q4_1 (Q5_1).
    pub imatrix: bool,
}

impl TypeOverrides {
    /// Parses one `REGEX=TYPE` rule.
    pub fn parse_pattern(rule: &str) -> Result<(Regex, GgmlType), String> {
        let (re, ty) = rule.rsplit_once('=').ok_or_else(|| format!("--tensor-type '{rule}': expected REGEX=TYPE"))?;
        let ty = GgmlType::parse(ty).ok_or_else(|| format!("--tensor-type '{rule}': unknown type '{ty}'"))?;
        let re = Regex::new(re).map_err(|e| format!("--tensor-type '{rule}': bad regex: {e}"))?;
        Ok((re, ty))
    }
}

/// Model facts the per-tensor rules depend on.
#[derive(Clone, Copy, Debug)]
pub struct ModelShape {
    /// Number of decoder layers.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Whether the file has no `output.weight` (token_embd doubles as output).
    pub tied_embeddings: bool,
    /// Experts per mixture layer (0 for a dense model): llama.cpp gives 8-expert models (Mixtral) more bits
    /// in attention.
    pub n_expert: usize,
}

/// Chooses the GGUF type of every tensor for a preset, exactly as llama-quantize does.
pub struct TypeRules<'a> {
    preset: Preset,
    overrides: &'a TypeOverrides,
    shape: ModelShape,
    n_attention_wv: usize,
}

impl<'a> TypeRules<'a> {
    /// Rules for a model whose tensors are named `names` (GGUF names).
    pub fn new(preset: Preset, overrides: &'a TypeOverrides, shape: ModelShape, names: &[&str]) -> Self {
        let n_attention_wv = names.iter().filter(|n| category(n) == Category::AttnV).count();
        TypeRules { preset, overrides, shape, n_attention_wv }
    }

    /// The type for one tensor. `current` is its type in the source, `dims` its GGML dims
    /// (ne[0] = row length); `layer` the `blk.N` index. Tensors must be visited in layer order
    /// for `i_attention_wv` to match llama.cpp, which the caller guarantees by sorting.
    pub fn choose(
        &self,
        name: &str,
        dims: &[u64],
        current: GgmlType,
        i_attention_wv: usize,
    ) -> Result<GgmlType, ConvertError> {
        if !allows_quantization(name, dims.len()) {
            return Ok(current);
        }
        let cat = category(name);
        let row = dims[0];
        let explicit = match cat {
            Category::TokenEmbd => self.overrides.token_embedding,
            Category::Output => self.overrides.output,
            _ => None,
        };
        if let Some(ty) = explicit {
            return check_fits(name, row, ty);
        }
        let default = self.preset.default_type();
        if !default.is_quantized() {
            return Ok(default);
        }
        let manual = self.overrides.patterns.iter().find(|(re, _)| re.is_match(name)).map(|(_, t)| *t);
        let ty = match manual {
            Some(t) => t,
            None => self.mix_type(name, cat, row, i_attention_wv),
        };
        let ty = fallback(ty, row);
        if !self.overrides.imatrix && requires_imatrix(name, ty) {
            return Err(ConvertError::ImatrixRequired { tensor: name.to_string(), ty });
        }
        Ok(ty)
    }

    /// llama_tensor_get_type_impl restricted to the presets tgi writes (dense and 8-expert cases).
    fn mix_type(&self, name: &str, cat: Category, row: u64, i_attention_wv: usize) -> GgmlType {
        use GgmlType as T;
        let p = self.preset;
        let mut t = p.default_type();
        let n_layer = self.shape.n_layer;
        let n_gqa = self.shape.n_head / self.shape.n_head_kv.max(1);
        let eight_experts = self.shape.n_expert == 8;
        // llama.cpp's 70B is a dense 80-layer Llama (an 8-expert model of 80 layers is not).
        let is_70b = n_layer == 80 && !eight_experts;
        if cat == Category::Output || (self.shape.tied_embeddings && cat == Category::TokenEmbd) {
            if !row.is_multiple_of(t.block_size() as u64) {
                return T::Q8_0;
            }
            if p.is_low_bit_mix() || p == Preset::IQ3_XXS {
                return T::Q5_K;
            }
            return if t != T::Q8_0 { T::Q6_K } else { t };
        }
        if cat == Category::TokenEmbd {
            return match p {
                Preset::IQ2_XXS | Preset::IQ2_XS | Preset::IQ1_S | Preset::IQ1_M => T::Q2_K,
                Preset::IQ2_S | Preset::IQ2_M | Preset::IQ3_XXS => T::IQ3_S,
                Preset::TQ1_0 | Preset::TQ2_0 => T::Q4_K,
                _ => t,
            };
        }
        if p.is_low_bit_mix() {
            return self.low_bit_type(name, cat);
        }
        match cat {
            Category::AttnV => {
                let i = i_attention_wv;
                t = match p {
                    Preset::Q2_K => {
                        if n_gqa >= 4 {
                            T::Q4_K
                        } else {
                            T::Q3_K
                        }
                    }
                    Preset::Q3_K_M => {
                        if i < 2 {
                            T::Q5_K
                        } else {
                            T::Q4_K
                        }
                    }
                    Preset::Q4_K_M | Preset::Q5_K_M if use_more_bits(i, self.n_attention_wv) => T::Q6_K,
                    Preset::IQ4_NL | Preset::IQ4_XS if n_gqa >= 4 => T::Q5_K,
                    Preset::IQ3_S if n_gqa >= 4 => T::Q4_K,
                    Preset::IQ3_XXS if n_gqa >= 4 => T::Q4_K,
                    Preset::IQ3_XXS if !self.overrides.imatrix => T::IQ3_S,
                    Preset::IQ3_M => T::Q4_K,
                    Preset::Q4_K_S if i < 4 => T::Q5_K,
                    _ => t,
                };
                if is_70b && (t == T::Q3_K || t == T::Q4_K) {
                    t = T::Q5_K;
                }
                if eight_experts {
                    t = T::Q8_0;
                }
            }
            Category::AttnK if eight_experts => t = T::Q8_0,
            Category::AttnK | Category::AttnQ if p == Preset::IQ3_XXS => t = T::IQ2_S,
            Category::FfnDown => {
                let i = layer_of(name).unwrap_or(0);
                t = match p {
                    Preset::Q2_K => T::Q3_K,
                    Preset::IQ3_XXS if !self.overrides.imatrix => {
                        if i < n_layer / 8 {
                            T::Q4_K
                        } else {
                            T::Q3_K
                        }
                    }
                    Preset::Q3_K_M => {
                        if i < n_layer / 16 {
                            T::Q5_K
                        } else {
                            T::Q4_K
                        }
                    }
                    Preset::Q4_K_M if use_more_bits(i, n_layer) => T::Q6_K,
                    Preset::Q5_K_M if use_more_bits(i, n_layer) => T::Q6_K,
                    Preset::IQ3_M if i < n_layer / 8 || (eight_experts && use_more_bits(i, n_layer)) => T::Q4_K,
                    Preset::IQ4_NL | Preset::IQ4_XS if !self.overrides.imatrix && i < n_layer / 8 => T::Q5_K,
                    Preset::Q4_K_S if i < n_layer / 8 => T::Q5_K,
                    Preset::Q4_0 if self.overrides.imatrix && i < n_layer / 8 => T::Q4_1,
                    Preset::Q5_0 if self.overrides.imatrix && i < n_layer / 8 => T::Q5_1,
                    _ => t,
                };
            }
            Category::AttnOutput if eight_experts => {
                if matches!(
                    p,
                    Preset::Q2_K
                        | Preset::Q3_K_M
                        | Preset::Q4_K_S
                        | Preset::Q4_K_M
                        | Preset::IQ4_NL
                        | Preset::IQ4_XS
                        | Preset::IQ3_S
                        | Preset::IQ3_M
                        | Preset::IQ3_XXS
                ) {
                    t = T::Q5_K;
                }
            }
            Category::AttnOutput => {
                t = match p {
                    Preset::Q2_K => T::Q3_K,
                    Preset::Q3_K_M | Preset::IQ3_M => T::Q4_K,
                    Preset::IQ3_XXS => T::IQ3_S,
                    _ => t,
                };
            }
            _ => {}
        }
        t
    }

    /// llama_tensor_get_type_impl's branch for the IQ2 mixes (the tensors other than output and token_embd).
    fn low_bit_type(&self, name: &str, cat: Category) -> GgmlType {
        use GgmlType as T;
        let p = self.preset;
        let sensitive = if p.is_iq2_s_mix() { T::IQ3_S } else { T::Q2_K };
        let n_gqa = self.shape.n_head / self.shape.n_head_kv.max(1);
        match cat {
            Category::AttnV if n_gqa >= 4 || self.shape.n_expert >= 4 => T::Q4_K,
            Category::AttnV => sensitive,
            Category::AttnK if self.shape.n_expert == 8 => T::Q4_K,
            Category::FfnDown if layer_of(name).unwrap_or(0) < self.shape.n_layer / 8 => sensitive,
            Category::AttnOutput if self.shape.n_expert == 8 => T::Q5_K,
            Category::AttnOutput if p.is_iq2_s_mix() => T::IQ3_S,
            Category::AttnOutput if matches!(p, Preset::IQ1_S | Preset::IQ1_M) => T::IQ2_XXS,
            _ => p.default_type(),
        }
    }
}

/// llama-quantize's `tensor_requires_imatrix`: the very low-bit types it writes only with an importance matrix
/// (never for token_embd or output, which it keeps at more bits).
pub fn requires_imatrix(name: &str, ty: GgmlType) -> bool {
    use GgmlType as T;
    let low_bit = matches!(ty, T::IQ3_XXS | T::IQ2_XXS | T::IQ2_XS | T::IQ2_S | T::IQ1_M | T::IQ1_S);
    low_bit && !matches!(category(name), Category::TokenEmbd | Category::Output)
}

/// llama.cpp's `use_more_bits`: the first and last eighth of layers and every third in between.
fn use_more_bits(i: usize, n: usize) -> bool {
    let (i, n) = (i as i64, n as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The `N` of a `blk.N.` tensor name.
pub fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// llama.cpp's tensor_type_fallback: a compatible type when the row is not a multiple of the block.
fn fallback(ty: GgmlType, row: u64) -> GgmlType {
    use GgmlType as T;
    if row.is_multiple_of(ty.block_size() as u64) {
        return ty;
    }
    let fb = match ty {
        T::Q2_K | T::Q3_K | T::TQ1_0 | T::TQ2_0 => T::Q4_0,
        T::Q4_K => T::Q5_0,
        T::Q5_K => T::Q5_1,
        T::Q6_K => T::Q8_0,
        T::IQ4_XS | T::IQ3_XXS | T::IQ3_S | T::IQ2_XXS | T::IQ2_XS | T::IQ2_S | T::IQ1_S | T::IQ1_M => T::IQ4_NL,
        other => other,
    };
    if !row.is_multiple_of(fb.block_size() as u64) {
        T::F16
    } else {
        fb
    }
}

fn check_fits(name: &str, row: u64, ty: GgmlType) -> Result<GgmlType, ConvertError> {
    if !row.is_multiple_of(ty.block_size() as u64) {
        return Err(ConvertError::TypeDoesNotFit { tensor: name.to_string(), row, ty });
    }
    Ok(ty)
}

#[cfg(test)]
mod tests;
