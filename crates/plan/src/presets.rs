//! Model presets: data in `presets.toml`, compiled into the binary, parsed on use.

use serde::Deserialize;

use super::shape::ModelShape;

const PRESETS_TOML: &str = include_str!("presets.toml");

/// One `[[model]]` entry of presets.toml: its names, where it comes from, and the shape's fields
/// (crates/plan/src/shape.rs), flattened. An unknown key is refused: the file is ours.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    pub name: String,
    #[serde(default)]
    aliases: Vec<String>,
    /// Where the shape was copied from.
    pub source: String,
    /// The published parameter count (checked against the shape in the tests).
    pub params: u64,
    #[serde(flatten)]
    shape: ModelShape,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile {
    model: Vec<Preset>,
}

impl Preset {
    pub fn shape(&self) -> ModelShape {
        ModelShape {
            name: self.name.clone(),
            ..self.shape.clone()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::{Head, Mlp, Norm};

    const ENTRY: &str = "[[model]]\nname = \"m\"\nsource = \"s\"\nparams = 1\nlayers = 1\nhidden = 8\n\
                         heads = 1\nkv_heads = 1\nffn = 32\nvocab = 10\nmlp = \"gated\"\nnorm = \"rmsnorm\"\n";

    #[test]
    fn an_entry_is_its_names_and_the_shape() {
        let file: PresetFile = toml::from_str(&format!("{ENTRY}tied = true\n")).unwrap();
        let shape = file.model[0].shape();
        assert_eq!(shape.name, "m");
        assert!(shape.tied_embeddings && !shape.bias);
        assert_eq!(
            (shape.mlp, shape.norm, shape.head),
            (Mlp::Gated, Norm::RmsNorm, Head::Lm)
        );
    }

    #[test]
    fn unknown_and_missing_keys_are_refused() {
        let typo = toml::from_str::<PresetFile>(&format!("{ENTRY}tied_embedings = true\n")).unwrap_err();
        assert!(typo.to_string().contains("tied_embedings"), "{typo}");
        let head = toml::from_str::<PresetFile>(&format!("{ENTRY}head = \"lm\"\n")).unwrap_err();
        assert!(head.to_string().contains("head"), "{head}");
        let missing = toml::from_str::<PresetFile>(&ENTRY.replace("vocab = 10\n", "")).unwrap_err();
        assert!(missing.to_string().contains("vocab"), "{missing}");
        assert!(toml::from_str::<PresetFile>(&ENTRY.replace("gated", "swiglu")).is_err());
    }
}
