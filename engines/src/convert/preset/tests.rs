//! The per-tensor type rules against llama-quantize's choices.

use super::*;
use GgmlType as T;

fn types(preset: Preset, n_layer: usize, row: u64, tied: bool) -> Vec<(String, GgmlType)> {
    let mut names = vec!["token_embd.weight".to_string()];
    if !tied {
        names.insert(0, "output.weight".into());
    }
    for i in 0..n_layer {
        for t in ["attn_k", "attn_output", "attn_q", "attn_v", "ffn_down", "ffn_gate", "ffn_up"] {
            names.push(format!("blk.{i}.{t}.weight"));
        }
    }
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let ov = TypeOverrides::default();
    let shape = ModelShape { n_layer, n_head: 4, n_head_kv: 2, tied_embeddings: tied, n_expert: 0 };
    let rules = TypeRules::new(preset, &ov, shape, &refs);
    let mut iv = 0;
    names
        .iter()
        .map(|n| {
            let t = rules.choose(n, &[row, 256], T::F32, iv).unwrap();
            if n.contains("attn_v") {
                iv += 1;
            }
            (n.clone(), t)
        })
        .collect()
}

/// `preset`'s rules for `shape` (with `--imatrix` or not): the type of a tensor by name and row length.
fn chooser(preset: Preset, shape: ModelShape, imatrix: bool) -> impl Fn(&str, u64) -> GgmlType {
    let ov = TypeOverrides { imatrix, ..Default::default() };
    move |name, row| TypeRules::new(preset, &ov, shape, &[]).choose(name, &[row, 8], T::F32, 0).unwrap()
}

fn type_of(v: &[(String, GgmlType)], name: &str) -> GgmlType {
    v.iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn q4_k_m_two_layers_matches_llama_cpp() {
    // formats.md §1.4: Q6_K = {blk.1.attn_v, blk.1.ffn_down, output}; the rest Q4_K.
    let v = types(Preset::Q4_K_M, 2, 256, false);
    for (n, t) in &v {
        let want = if n == "output.weight" || n == "blk.1.attn_v.weight" || n == "blk.1.ffn_down.weight" {
            T::Q6_K
        } else {
            T::Q4_K
        };
        assert_eq!(*t, want, "{n}");
    }
}

#[test]
fn tied_embeddings_take_the_output_rule() {
    let v = types(Preset::Q4_K_M, 2, 256, true);
    assert_eq!(type_of(&v, "token_embd.weight"), T::Q6_K);
    let v = types(Preset::Q8_0, 2, 256, true);
    assert_eq!(type_of(&v, "token_embd.weight"), T::Q8_0);
}

#[test]
fn narrow_rows_fall_back() {
    let v = types(Preset::Q4_K_M, 2, 64, false);
    assert_eq!(type_of(&v, "output.weight"), T::Q8_0);
    assert_eq!(type_of(&v, "blk.0.attn_q.weight"), T::Q5_0);
    assert_eq!(type_of(&v, "blk.1.attn_v.weight"), T::Q8_0);
    let v = types(Preset::Q5_K_S, 2, 48, false);
    assert_eq!(type_of(&v, "blk.0.attn_q.weight"), T::F16);
}

#[test]
fn norms_and_vectors_are_kept() {
    let ov = TypeOverrides::default();
    let shape = ModelShape { n_layer: 1, n_head: 1, n_head_kv: 1, tied_embeddings: true, n_expert: 0 };
    let rules = TypeRules::new(Preset::Q4_0, &ov, shape, &[]);
    assert_eq!(rules.choose("blk.0.attn_norm.weight", &[256], T::F32, 0).unwrap(), T::F32);
    assert_eq!(rules.choose("blk.0.attn_q.bias", &[256], T::F32, 0).unwrap(), T::F32);
}

#[test]
fn overrides_win() {
    let ov = TypeOverrides {
        output: Some(T::Q8_0),
        token_embedding: Some(T::F16),
        patterns: vec![TypeOverrides::parse_pattern("attn_q=q8_0").unwrap()],
        imatrix: false,
    };
    let shape = ModelShape { n_layer: 1, n_head: 1, n_head_kv: 1, tied_embeddings: false, n_expert: 0 };
    let rules = TypeRules::new(Preset::Q4_K_M, &ov, shape, &[]);
    assert_eq!(rules.choose("output.weight", &[256, 8], T::F32, 0).unwrap(), T::Q8_0);
    assert_eq!(rules.choose("token_embd.weight", &[256, 8], T::F32, 0).unwrap(), T::F16);
    assert_eq!(rules.choose("blk.0.attn_q.weight", &[256, 8], T::F32, 0).unwrap(), T::Q8_0);
    assert!(rules.choose("output.weight", &[64, 8], T::F32, 0).is_ok());
    let bad = TypeOverrides { output: Some(T::Q4_K), ..Default::default() };
    let rules = TypeRules::new(Preset::Q4_K_M, &bad, shape, &[]);
    assert!(rules.choose("output.weight", &[64, 8], T::F32, 0).is_err());
}

#[test]
fn an_imatrix_gives_the_first_ffn_down_layers_a_min() {
    // llama.cpp guards the first eighth of ffn_down layers of Q4_0/Q5_0 files made with an imatrix.
    let shape = ModelShape { n_layer: 16, n_head: 4, n_head_kv: 4, tied_embeddings: false, n_expert: 0 };
    for (preset, plain, guarded) in [(Preset::Q4_0, T::Q4_0, T::Q4_1), (Preset::Q5_0, T::Q5_0, T::Q5_1)] {
        for imatrix in [false, true] {
            let ov = TypeOverrides { imatrix, ..Default::default() };
            let rules = TypeRules::new(preset, &ov, shape, &[]);
            let first = rules.choose("blk.1.ffn_down.weight", &[256, 8], T::F32, 0).unwrap();
            assert_eq!(first, if imatrix { guarded } else { plain }, "{preset}");
            assert_eq!(rules.choose("blk.2.ffn_down.weight", &[256, 8], T::F32, 0).unwrap(), plain);
            assert_eq!(rules.choose("blk.0.ffn_up.weight", &[256, 8], T::F32, 0).unwrap(), plain);
        }
    }
}

#[test]
fn preset_names_parse() {
    for p in Preset::ALL {
        assert_eq!(p.name().parse::<Preset>().unwrap(), p);
    }
    assert!("q4_k_xl".parse::<Preset>().unwrap_err().contains("q4_k_m"));
    assert!("q2_k_s".parse::<Preset>().unwrap_err().contains("--imatrix"));
    assert!(use_more_bits(0, 22) && !use_more_bits(2, 22) && use_more_bits(4, 22));
}

#[test]
fn iq4_mixes_match_llama_cpp() {
    // llama_tensor_get_type_impl for IQ4_NL/IQ4_XS: Q6_K output, Q5_K attn_v when n_gqa >= 4, Q5_K in the
    // first eighth of ffn_down without an imatrix; IQ4_XS rows that are not whole 256-blocks fall back to IQ4_NL.
    for (preset, t) in [(Preset::IQ4_NL, T::IQ4_NL), (Preset::IQ4_XS, T::IQ4_XS)] {
        let shape = ModelShape { n_layer: 16, n_head: 8, n_head_kv: 2, tied_embeddings: false, n_expert: 0 };
        for imatrix in [false, true] {
            let choose = chooser(preset, shape, imatrix);
            assert_eq!(choose("output.weight", 256), T::Q6_K);
            assert_eq!(choose("blk.0.attn_v.weight", 256), T::Q5_K);
            assert_eq!(choose("blk.1.ffn_down.weight", 256), if imatrix { t } else { T::Q5_K });
            assert_eq!(choose("blk.2.ffn_down.weight", 256), t);
            assert_eq!(choose("blk.0.attn_q.weight", 256), t);
            assert_eq!(choose("blk.0.attn_q.weight", 96), T::IQ4_NL);
            assert_eq!(choose("blk.0.attn_q.weight", 48), T::F16);
        }
        let shape = ModelShape { n_head_kv: 8, ..shape };
        let ov = TypeOverrides::default();
        let rules = TypeRules::new(preset, &ov, shape, &[]);
        assert_eq!(rules.choose("blk.0.attn_v.weight", &[256, 8], T::F32, 0).unwrap(), t);
        assert_eq!(
            Preset::ALL.into_iter().find(|p| p.file_type() == if t == T::IQ4_NL { 25 } else { 30 }),
            Some(preset)
        );
    }
}

#[test]
fn iq3_mixes_match_llama_cpp() {
    // llama_tensor_get_type_impl for IQ3_S/IQ3_M: Q6_K output; attn_v Q4_K (IQ3_S only when n_gqa >= 4);
    // IQ3_M: Q4_K attn_output and first eighth of ffn_down; rows that are not whole 256-blocks fall back to IQ4_NL.
    let shape = ModelShape { n_layer: 16, n_head: 8, n_head_kv: 4, tied_embeddings: false, n_expert: 0 };
    for imatrix in [false, true] {
        for (preset, attn_v, attn_output, ffn_down_1) in
            [(Preset::IQ3_S, T::IQ3_S, T::IQ3_S, T::IQ3_S), (Preset::IQ3_M, T::Q4_K, T::Q4_K, T::Q4_K)]
        {
            let choose = chooser(preset, shape, imatrix);
            assert_eq!(choose("output.weight", 256), T::Q6_K);
            assert_eq!(choose("token_embd.weight", 256), T::IQ3_S);
            assert_eq!(choose("blk.0.attn_v.weight", 256), attn_v, "{preset}");
            assert_eq!(choose("blk.0.attn_output.weight", 256), attn_output, "{preset}");
            assert_eq!(choose("blk.1.ffn_down.weight", 256), ffn_down_1, "{preset}");
            assert_eq!(choose("blk.2.ffn_down.weight", 256), T::IQ3_S);
            assert_eq!(choose("blk.0.attn_q.weight", 256), T::IQ3_S);
            assert_eq!(choose("blk.0.attn_q.weight", 96), T::IQ4_NL);
        }
    }
    let gqa = ModelShape { n_head_kv: 2, ..shape };
    let ov = TypeOverrides::default();
    let rules = TypeRules::new(Preset::IQ3_S, &ov, gqa, &[]);
    assert_eq!(rules.choose("blk.0.attn_v.weight", &[256, 8], T::F32, 0).unwrap(), T::Q4_K);
    assert_eq!("IQ3_M".parse::<Preset>().unwrap().file_type(), 27);
    assert_eq!("iq3_s".parse::<Preset>().unwrap().file_type(), 26);
}

#[test]
fn iq2_mixes_match_llama_cpp() {
    // llama_tensor_get_type_impl for the IQ2 ftypes (with a matrix, which they need): Q5_K output; token_embd Q2_K
    // (IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M) or IQ3_S (IQ2_S, IQ2_M); attn_v and the first eighth of ffn_down Q2_K or IQ3_S
    // (Q4_K attn_v when n_gqa >= 4); attn_output IQ3_S for IQ2_S/IQ2_M, IQ2_XXS for IQ1_S/IQ1_M; the 8-expert attn_k Q4_K and attn_output Q5_K.
    let shape = ModelShape { n_layer: 16, n_head: 8, n_head_kv: 4, tied_embeddings: false, n_expert: 0 };
    let ov = TypeOverrides { imatrix: true, ..Default::default() };
    for (preset, ft, t, sensitive, attn_output) in [
        (Preset::IQ2_XXS, 19, T::IQ2_XXS, T::Q2_K, T::IQ2_XXS),
        (Preset::IQ2_XS, 20, T::IQ2_XS, T::Q2_K, T::IQ2_XS),
        (Preset::IQ2_S, 28, T::IQ2_XS, T::IQ3_S, T::IQ3_S),
        (Preset::IQ2_M, 29, T::IQ2_S, T::IQ3_S, T::IQ3_S),
        (Preset::IQ1_S, 24, T::IQ1_S, T::Q2_K, T::IQ2_XXS),
        (Preset::IQ1_M, 31, T::IQ1_M, T::Q2_K, T::IQ2_XXS),
    ] {
        assert_eq!(preset.file_type(), ft);
        let rules = TypeRules::new(preset, &ov, shape, &[]);
        let choose = |name: &str, row: u64| rules.choose(name, &[row, 8], T::F32, 0).unwrap();
        assert_eq!(choose("output.weight", 256), T::Q5_K, "{preset}");
        assert_eq!(choose("output.weight", 96), T::Q8_0, "{preset}");
        let embd = if sensitive == T::Q2_K { T::Q2_K } else { T::IQ3_S };
        assert_eq!(choose("token_embd.weight", 256), embd, "{preset}");
        assert_eq!(choose("blk.0.attn_v.weight", 256), sensitive, "{preset}");
        assert_eq!(choose("blk.1.ffn_down.weight", 256), sensitive, "{preset}");
        assert_eq!(choose("blk.2.ffn_down.weight", 256), t, "{preset}");
        assert_eq!(choose("blk.2.attn_output.weight", 256), attn_output, "{preset}");
        assert_eq!(choose("blk.2.attn_q.weight", 256), t, "{preset}");
        assert_eq!(choose("blk.2.attn_q.weight", 96), T::IQ4_NL, "{preset}");
        let gqa = ModelShape { n_head_kv: 2, ..shape };
        let rules = TypeRules::new(preset, &ov, gqa, &[]);
        assert_eq!(rules.choose("blk.0.attn_v.weight", &[256, 8], T::F32, 0).unwrap(), T::Q4_K);
        let moe = ModelShape { n_expert: 8, ..shape };
        let rules = TypeRules::new(preset, &ov, moe, &[]);
        let choose = |name: &str| rules.choose(name, &[256, 8], T::F32, 0).unwrap();
        assert_eq!(
            [choose("blk.0.attn_v.weight"), choose("blk.0.attn_k.weight"), choose("blk.3.attn_output.weight")],
            [T::Q4_K, T::Q4_K, T::Q5_K]
        );
        // Without a matrix the first tensor that needs one is refused, naming --imatrix.
        let plain = TypeOverrides::default();
        let rules = TypeRules::new(preset, &plain, shape, &[]);
        let err = rules.choose("blk.2.ffn_up.weight", &[256, 8], T::F32, 0).unwrap_err();
        assert!(err.to_string().contains("--imatrix"), "{err}");
    }
}

#[test]
fn iq3_xxs_mix_matches_llama_cpp() {
    // llama_tensor_get_type_impl for IQ3_XXS: Q5_K output, IQ3_S token_embd and attn_output, IQ2_S attn_q and
    // attn_k, IQ3_XXS attn_v with a matrix (IQ3_S without; Q4_K when n_gqa >= 4), Q4_K/Q3_K ffn_down without one.
    let shape = ModelShape { n_layer: 16, n_head: 8, n_head_kv: 4, tied_embeddings: false, n_expert: 0 };
    for imatrix in [false, true] {
        let ov = TypeOverrides { imatrix, ..Default::default() };
        let rules = TypeRules::new(Preset::IQ3_XXS, &ov, shape, &[]);
        let choose = |name: &str| rules.choose(name, &[256, 8], T::F32, 0);
        assert_eq!(choose("output.weight").unwrap(), T::Q5_K);
        assert_eq!(choose("token_embd.weight").unwrap(), T::IQ3_S);
        assert_eq!(choose("blk.0.attn_output.weight").unwrap(), T::IQ3_S);
        assert_eq!(choose("blk.0.attn_v.weight").unwrap(), if imatrix { T::IQ3_XXS } else { T::IQ3_S });
        if imatrix {
            assert_eq!(choose("blk.0.attn_q.weight").unwrap(), T::IQ2_S);
            assert_eq!(choose("blk.0.attn_k.weight").unwrap(), T::IQ2_S);
            assert_eq!(choose("blk.1.ffn_down.weight").unwrap(), T::IQ3_XXS);
            assert_eq!(choose("blk.0.ffn_up.weight").unwrap(), T::IQ3_XXS);
        } else {
            assert_eq!(choose("blk.1.ffn_down.weight").unwrap(), T::Q4_K);
            assert_eq!(choose("blk.2.ffn_down.weight").unwrap(), T::Q3_K);
            assert!(choose("blk.0.attn_q.weight").unwrap_err().to_string().contains("--imatrix"));
        }
    }
    assert_eq!(Preset::IQ3_XXS.file_type(), 23);
}

#[test]
fn ternary_mixes_match_llama_cpp() {
    // llama_tensor_get_type_impl for TQ1_0/TQ2_0: Q6_K output, Q4_K token_embd, everything else ternary with or
    // without a matrix (no attn_v or ffn_down promotion); rows that are not whole 256-blocks fall back to Q4_0.
    for (preset, t, ftype) in [(Preset::TQ1_0, T::TQ1_0, 36), (Preset::TQ2_0, T::TQ2_0, 37)] {
        let shape = ModelShape { n_layer: 16, n_head: 8, n_head_kv: 2, tied_embeddings: false, n_expert: 0 };
        for imatrix in [false, true] {
            let choose = chooser(preset, shape, imatrix);
            assert_eq!(choose("output.weight", 256), T::Q6_K);
            assert_eq!(choose("output.weight", 288), T::Q8_0);
            assert_eq!(choose("token_embd.weight", 256), T::Q4_K);
            assert_eq!(choose("token_embd.weight", 288), T::Q5_0);
            for name in
                ["blk.0.attn_v.weight", "blk.0.ffn_down.weight", "blk.0.attn_output.weight", "blk.3.ffn_up.weight"]
            {
                assert_eq!(choose(name, 256), t, "{name}");
            }
            assert_eq!(choose("blk.0.attn_q.weight", 96), T::Q4_0);
            assert_eq!(choose("blk.0.attn_q.weight", 48), T::F16);
        }
        let tied = ModelShape { tied_embeddings: true, ..shape };
        let ov = TypeOverrides::default();
        assert_eq!(
            TypeRules::new(preset, &ov, tied, &[]).choose("token_embd.weight", &[256, 8], T::F32, 0).unwrap(),
            T::Q6_K
        );
        assert!(!preset.needs_imatrix());
        assert_eq!(preset.name().parse::<Preset>(), Ok(preset));
        assert_eq!(preset.file_type(), ftype);
    }
}
