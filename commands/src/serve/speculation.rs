//! Speculative decoding as `tgi serve` sets it up: the flags resolved into a plan (method, depth, costs),
//! then, once the target is loaded, the draft model or the Medusa heads loaded beside it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use clap::ValueEnum;
use tgi_engines::model::LoadedModel;
use tgi_engines::speculative::{check_vocabulary, frequent_ids, Medusa, MedusaConfig, Method, SpeculationConfig};

use super::args::{ServeArgs, SpeculateType};
use crate::error::InputError;
use crate::model_args::ModelArgs;

/// Depth with a draft model when `--speculate` does not say.
const DRAFT_DEPTH: usize = 4;

/// Where the drafts will come from.
#[derive(Debug, Clone)]
pub enum Proposal {
    /// Prompt lookup.
    Ngram,
    /// A draft model, loaded with these arguments.
    Draft(ModelArgs),
    /// Medusa heads in this directory.
    Medusa(PathBuf),
}

/// Speculation as the flags ask for it, before the draft model or heads are loaded.
#[derive(Debug, Clone)]
pub struct SpeculationPlan {
    /// Depth, n-gram lengths, costs (method: n-gram until [`SpeculationPlan::load`]).
    pub config: SpeculationConfig,
    /// What proposes.
    pub proposal: Proposal,
    /// A draft model proposes among the ids below this and the single characters only (`--draft-vocab`).
    pub draft_vocab: Option<usize>,
}

impl SpeculationPlan {
    /// The plan the flags of `args` ask for (`None`: speculation off); `medusa_model` is the Medusa directory
    /// given as --model, if it was one. Errors name the flag at fault.
    pub fn from_args(args: &ServeArgs, medusa_model: Option<&Path>) -> Result<Option<Self>, InputError> {
        let medusa = args.medusa.as_deref().or(medusa_model);
        let implied = match (&args.draft_model, medusa) {
            (Some(_), Some(_)) => {
                return Err(InputError("--draft-model and Medusa heads cannot be used together".into()))
            }
            (Some(_), None) => Some(SpeculateType::Draft),
            (None, Some(_)) => Some(SpeculateType::Medusa),
            (None, None) => None,
        };
        let kind = match (args.speculate_type, implied) {
            (Some(asked), Some(got)) if asked != got => {
                return Err(InputError(format!(
                    "--speculate-type {}: {}",
                    asked.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string()),
                    match got {
                        SpeculateType::Draft => "--draft-model is for --speculate-type draft",
                        _ => "Medusa heads are for --speculate-type medusa",
                    }
                )))
            }
            (Some(SpeculateType::Draft), None) => {
                return Err(InputError("--speculate-type draft needs --draft-model".into()))
            }
            (Some(SpeculateType::Medusa), None) => {
                return Err(InputError(
                    "--speculate-type medusa needs --medusa (or a Medusa directory as --model)".into(),
                ))
            }
            (asked, got) => got.or(asked).unwrap_or(SpeculateType::Ngram),
        };
        let proposal = match kind {
            SpeculateType::Ngram => Proposal::Ngram,
            SpeculateType::Draft => Proposal::Draft(ModelArgs {
                model: args.draft_model.clone(),
                quantize: args.draft_quantize,
                lm_head_type: None,
                threads: None,
                ..args.model.clone()
            }),
            SpeculateType::Medusa => Proposal::Medusa(medusa.expect("implied by the heads").to_path_buf()),
        };
        let depth = match (&proposal, args.speculate) {
            (_, Some(n)) => n,
            (Proposal::Ngram, None) if args.speculate_type.is_some() || args.speculate_fixed => {
                return Err(InputError(
                    "--speculate-type and --speculate-fixed need --speculate, --draft-model or --medusa".into(),
                ))
            }
            (Proposal::Ngram, None) if args.speculate_token_cost.is_some() => {
                return Err(InputError("--speculate-token-cost needs --speculate, --draft-model or --medusa".into()))
            }
            (Proposal::Ngram, None) => return Ok(None),
            (Proposal::Draft(_), None) => DRAFT_DEPTH,
            (Proposal::Medusa(dir), None) => {
                let cfg = MedusaConfig::probe(dir).map_err(|e| InputError(format!("--medusa: {e}")))?;
                cfg.ok_or_else(|| InputError(format!("--medusa {}: not a Medusa directory", dir.display())))?
                    .medusa_num_heads
            }
        };
        let config = SpeculationConfig {
            depth,
            ngram_min: args.ngram_min,
            ngram_max: args.ngram_max,
            max_batch: args.speculate_max_batch,
            token_cost: args.speculate_token_cost,
            adaptive: !args.speculate_fixed,
            method: Method::Ngram,
        };
        config.validate().map_err(|e| InputError(format!("--speculate: {e}")))?;
        if args.draft_vocab == Some(0) {
            return Err(InputError("--draft-vocab must be at least 1".into()));
        }
        Ok(Some(SpeculationPlan { config, proposal, draft_vocab: args.draft_vocab }))
    }

    /// The settings with their proposer loaded beside `target` (the draft model, or the heads checked
    /// against the target's width and vocabulary).
    pub fn load(&self, target: &LoadedModel) -> Result<SpeculationConfig> {
        let method = match &self.proposal {
            Proposal::Ngram => Method::Ngram,
            Proposal::Draft(args) => {
                let mut draft = args.load().map_err(|e| e.context("--draft-model"))?;
                check_vocabulary(&target.tokenizer, &draft.tokenizer)
                    .map_err(|e| InputError(format!("--draft-model: {e}")))?;
                if let Some(n) = self.draft_vocab.filter(|&n| n < draft.tokenizer.vocab_size()) {
                    if !draft.model.limit_vocab(frequent_ids(&draft.tokenizer, n))? {
                        return Err(
                            InputError("--draft-vocab: the draft's output layer is not in host memory".into()).into()
                        );
                    }
                }
                Method::Draft(Arc::new(draft))
            }
            Proposal::Medusa(dir) => {
                let c = target.model.config();
                let heads = Medusa::load(dir, c.hidden, c.vocab)
                    .map_err(|e| InputError(format!("--medusa {}: {e}", dir.display())))?;
                Method::Medusa(Arc::new(heads))
            }
        };
        let config = SpeculationConfig { method, ..self.config.clone() };
        config.validate().map_err(|e| InputError(format!("--speculate: {e}")))?;
        Ok(config)
    }
}

/// The base model and heads of a Medusa directory given as `--model` (TGI's convention): `Some(dir)` with
/// `model` pointed at the base model, `None` (and `model` untouched) for any other model.
pub fn take_medusa_model(model: &mut ModelArgs) -> Result<Option<PathBuf>, InputError> {
    let Some(dir) = model.model.as_deref().map(PathBuf::from).filter(|p| p.is_dir()) else { return Ok(None) };
    let Some(cfg) = MedusaConfig::probe(&dir).map_err(|e| InputError(format!("--model: {e}")))? else {
        return Ok(None);
    };
    let base = cfg.base_model(&dir).ok_or_else(|| {
        InputError(format!("--model {}: a Medusa directory without base_model_name_or_path", dir.display()))
    })?;
    model.model = Some(base);
    Ok(Some(dir))
}

/// How the startup log describes speculation.
pub fn describe(cfg: &SpeculationConfig) -> String {
    let what = match &cfg.method {
        Method::Ngram => format!("n-gram ({}..{}-grams)", cfg.ngram_min, cfg.ngram_max),
        Method::Draft(m) if m.model.logit_ids().is_some() => format!(
            "draft model ({} layers, proposing among {} frequent tokens)",
            m.model.config().layers,
            m.model.logit_ids().map_or(0, <[u32]>::len)
        ),
        Method::Draft(m) => format!("draft model ({} layers)", m.model.config().layers),
        Method::Medusa(h) => format!("Medusa ({} heads)", h.num_heads()),
    };
    let depth = match (cfg.adaptive, cfg.token_cost) {
        (false, _) => "fixed depth".to_string(),
        (true, Some(c)) => format!("adaptive (token cost {c})"),
        (true, None) => "adaptive (token cost measured)".to_string(),
    };
    format!("{what}, up to {} tokens, {depth}, off in steps of more than {} sequences", cfg.depth, cfg.max_batch)
}

#[cfg(test)]
mod tests {
    use super::super::settings::tests::settings;
    use super::*;

    fn medusa_dir() -> String {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories-distill-4l/medusa").to_string()
    }

    #[test]
    fn flags_imply_the_method_and_its_depth() {
        let plan = |flags: &[&str]| settings(flags).unwrap().speculation;
        assert!(plan(&[]).is_none());
        let p = plan(&["--speculate=3"]).unwrap();
        assert!(matches!(p.proposal, Proposal::Ngram) && p.config.depth == 3 && p.config.token_cost.is_none());
        let p = plan(&["--draft-model=d.gguf", "--draft-quantize=q8_0"]).unwrap();
        let Proposal::Draft(args) = &p.proposal else { panic!("{p:?}") };
        assert_eq!((args.model.as_deref(), p.config.depth), (Some("d.gguf"), DRAFT_DEPTH));
        assert!(args.quantize.is_some() && p.draft_vocab.is_none());
        assert_eq!(plan(&["--draft-model=d.gguf", "--draft-vocab=32768"]).unwrap().draft_vocab, Some(32768));
        let p = plan(&["--medusa", &medusa_dir(), "--speculate-token-cost=0.2"]).unwrap();
        assert!(matches!(p.proposal, Proposal::Medusa(_)) && p.config.depth == 4);
        assert_eq!(p.config.token_cost, Some(0.2));
        // A Medusa directory as --model: its base model is served, with its heads.
        let s = settings(&["--model", &medusa_dir(), "--speculate=2"]).unwrap();
        assert!(s.model.model.as_deref().unwrap().ends_with("stories-distill-4l/hf"));
        let p = s.speculation.unwrap();
        assert!(matches!(p.proposal, Proposal::Medusa(_)) && p.config.depth == 2);
    }

    #[test]
    fn contradictions_are_refused() {
        let err = |flags: &[&str]| settings(flags).unwrap_err().0;
        assert!(err(&["--speculate=2", "--speculate-type=draft"]).contains("needs --draft-model"));
        assert!(err(&["--speculate=2", "--speculate-type=medusa"]).contains("needs --medusa"));
        assert!(err(&["--draft-model=d", "--medusa", &medusa_dir()]).contains("cannot be used together"));
        assert!(err(&["--draft-model=d", "--speculate-type=ngram"]).contains("--draft-model is for"));
        assert!(err(&["--medusa=/nonexistent"]).contains("not a Medusa directory"));
        assert!(err(&["--speculate-fixed"]).contains("need --speculate, --draft-model or --medusa"));
        assert!(err(&["--speculate-type=ngram"]).contains("need --speculate"));
        assert!(err(&["--speculate-token-cost=0.3"]).contains("needs --speculate"));
        assert!(err(&["--draft-model=d", "--draft-vocab=0"]).contains("--draft-vocab must be at least 1"));
    }

    #[test]
    fn loading_checks_the_heads_against_the_target() {
        let target = ModelArgs { model: None, ..settings(&[]).unwrap().model }.load().unwrap();
        let plan = settings(&["--medusa", &medusa_dir()]).unwrap().speculation.unwrap();
        let err = plan.load(&target).unwrap_err().to_string();
        assert!(err.contains("0.0.linear.weight"), "the heads are for a 256-wide model, the bundled one is 64: {err}");
        let distill = settings(&["--model", &medusa_dir()]).unwrap();
        let target = distill.model.load().unwrap();
        let cfg = distill.speculation.unwrap().load(&target).unwrap();
        assert!(describe(&cfg).starts_with("Medusa (4 heads), up to 4 tokens, adaptive (token cost measured)"));
        let deep = settings(&["--model", &medusa_dir(), "--speculate=5"]).unwrap().speculation.unwrap();
        assert!(deep.load(&target).unwrap_err().to_string().contains("needs 5 Medusa heads"));
    }
}
