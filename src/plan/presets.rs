//! Model presets: data in `presets.toml`, compiled into the binary, parsed on use.

use serde::Deserialize;

use super::shape::{Head, Mlp, ModelShape, Norm};

const PRESETS_TOML: &str = include_str!("presets.toml");

/// One `[[model]]` entry of presets.toml.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Where the shape was copied from.
    pub source: String,
    /// The published parameter count (checked against the shape in the tests).
    pub params: u64,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    #[serde(default)]
    pub positions: u64,
    #[serde(default)]
    pub segments: u64,
    pub mlp: PresetMlp,
    pub norm: PresetNorm,
    #[serde(default)]
    pub bias: bool,
    #[serde(default)]
    pub tied: bool,
    #[serde(default)]
    pub dropout: bool,
    #[serde(default)]
    pub embedding_norm: bool,
    #[serde(default)]
    pub final_norm: bool,
    #[serde(default)]
    pub pooler: bool,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PresetMlp {
    Gelu,
    Gated,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PresetNorm {
    LayerNorm,
    RmsNorm,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile {
    model: Vec<Preset>,
}

impl Preset {
    pub fn shape(&self) -> ModelShape {
        ModelShape {
            name: self.name.clone(),
            layers: self.layers,
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads,
            ffn: self.ffn,
            vocab: self.vocab,
            positions: self.positions,
            segments: self.segments,
            mlp: match self.mlp {
                PresetMlp::Gelu => Mlp::Gelu,
                PresetMlp::Gated => Mlp::Gated,
            },
            norm: match self.norm {
                PresetNorm::LayerNorm => Norm::LayerNorm,
                PresetNorm::RmsNorm => Norm::RmsNorm,
            },
            bias: self.bias,
            tied_embeddings: self.tied,
            dropout: self.dropout,
            embedding_norm: self.embedding_norm,
            final_norm: self.final_norm,
            pooler: self.pooler,
            head: Head::Lm,
        }
    }

    fn answers_to(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name) || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// Every preset, in file order. The file is part of the binary, so a parse error is a build defect
/// that the tests catch; at run time it surfaces as an error message, never a panic.
pub fn all() -> Result<Vec<Preset>, String> {
    toml::from_str::<PresetFile>(PRESETS_TOML)
        .map(|file| file.model)
        .map_err(|e| format!("built-in presets.toml is malformed: {e}"))
}

/// The preset called `name` (case-insensitive, aliases included), or an error listing the known ones.
pub fn find(name: &str) -> Result<Preset, String> {
    let presets = all()?;
    match presets.iter().find(|p| p.answers_to(name)) {
        Some(p) => Ok(p.clone()),
        None => {
            let known: Vec<&str> = presets.iter().map(|p| p.name.as_str()).collect();
            Err(format!(
                "unknown model '{name}'; known models: {}",
                known.join(", ")
            ))
        }
    }
}
