//! A transformer's shape and the parameter tensors it implies.
//!
//! Parameter counts come from the architecture, tensor by tensor, the way the Hugging Face
//! implementations build them, so that a preset's count matches its published checkpoint
//! (Llama-2 7B: 6,738,415,616). The same tensor list feeds tensor parallelism (what splits),
//! LoRA (which linears get adapters), QLoRA (which weights are 4-bit) and Adafactor (its
//! factored state depends on each matrix's rows and columns).

use serde::Deserialize;

/// The feed-forward block (`mlp = "gelu"` or `"gated"` in presets.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mlp {
    /// `down(act(up(x)))` with GeLU: GPT-2, BERT (two matrices).
    Gelu,
    /// `down(silu(gate(x)) * up(x))`: Llama, Mistral (three matrices).
    Gated,
}

/// The normalisation layers (`norm = "layernorm"` or `"rmsnorm"` in presets.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    /// Weight and bias per channel.
    LayerNorm,
    /// Weight only.
    RmsNorm,
}

/// What sits on top of the last layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// A vocabulary projection and a token-level cross-entropy loss (pre-training, causal LM
    /// fine-tuning, masked LM): the logits are `seq x vocab` per sample.
    Lm,
    /// A small task head (sequence classification): logits are negligible.
    None,
}

/// The shape of a decoder- or encoder-only transformer. Deserialized from a presets.toml entry
/// (crates/plan/src/presets.rs), which names it and always has a language-model head.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ModelShape {
    /// The preset's `name` (set by `Preset::shape`).
    #[serde(skip)]
    pub name: String,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    /// Key/value heads: equal to `heads` for multi-head attention, fewer for grouped-query attention.
    pub kv_heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    /// Learned absolute position embeddings (GPT-2, BERT); 0 for rotary embeddings.
    #[serde(default)]
    pub(crate) positions: u64,
    /// Token-type (segment) embeddings (BERT); 0 for none.
    #[serde(default)]
    pub(crate) segments: u64,
    pub(crate) mlp: Mlp,
    pub(crate) norm: Norm,
    /// Linear layers carry biases.
    #[serde(default)]
    pub(crate) bias: bool,
    /// The output projection shares the input embedding matrix (`tied` in presets.toml).
    #[serde(default, rename = "tied")]
    pub(crate) tied_embeddings: bool,
    /// Training-time dropout (p > 0) after attention probabilities and block outputs.
    #[serde(default)]
    pub(crate) dropout: bool,
    /// A norm right after the embeddings (BERT).
    #[serde(default)]
    pub(crate) embedding_norm: bool,
    /// A norm after the last layer (pre-LN models).
    #[serde(default)]
    pub(crate) final_norm: bool,
    /// BERT's pooler (a dense layer on the first token).
    #[serde(default)]
    pub(crate) pooler: bool,
    #[serde(skip, default = "lm_head")]
    pub head: Head,
}

fn lm_head() -> Head {
    Head::Lm
}

/// Where a parameter tensor lives; tensor and pipeline parallelism place them differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Input embeddings (first pipeline stage).
    Embedding,
    /// Inside each transformer layer (counted once per layer).
    Layer,
    /// After the last layer: final norm, pooler, untied output projection (last stage).
    Top,
}

/// The role of a linear layer inside a transformer layer, for LoRA targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linear {
    Query,
    Key,
    Value,
    /// Fused query/key/value projection (GPT-2's `c_attn`).
    QueryKeyValue,
    Output,
    Gate,
    Up,
    Down,
}

/// What kind of tensor a parameter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A weight matrix of a linear layer inside a transformer layer: `rows = in`, `cols = out`.
    Linear { role: Linear, rows: u64, cols: u64 },
    /// An embedding table or the output projection: `rows x cols`, split over the vocabulary.
    Table { rows: u64, cols: u64 },
    /// A bias or a norm's weight/bias: replicated under tensor parallelism.
    Vector,
    /// A linear bias: split with its matrix under tensor parallelism.
    Bias,
}

/// One parameter tensor (per layer for `Place::Layer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub name: &'static str,
    pub place: Place,
    pub(crate) kind: Kind,
    pub(crate) count: u64,
}

impl ModelShape {
    fn head_dim(&self) -> u64 {
        self.hidden / self.heads
    }

    /// Width of the key (and of the value) projection: `kv_heads x head_dim`.
    pub fn kv_dim(&self) -> u64 {
        self.kv_heads * self.head_dim()
    }

    /// Every parameter tensor; `Place::Layer` tensors are listed once and repeat `layers` times.
    pub fn tensors(&self) -> Vec<Tensor> {
        let (h, f, v) = (self.hidden, self.ffn, self.vocab);
        let kv = self.kv_dim();
        let mut out = Vec::new();
        let mut push = |name, place, kind, count| {
            out.push(Tensor {
                name,
                place,
                kind,
                count,
            })
        };
        let table = |rows, cols| Kind::Table { rows, cols };
        let linear = |role, rows, cols| Kind::Linear { role, rows, cols };
        let norm_count = match self.norm {
            Norm::LayerNorm => 2 * h,
            Norm::RmsNorm => h,
        };

        push("token embeddings", Place::Embedding, table(v, h), v * h);
        if self.positions > 0 {
            push(
                "position embeddings",
                Place::Embedding,
                Kind::Vector,
                self.positions * h,
            );
        }
        if self.segments > 0 {
            push(
                "segment embeddings",
                Place::Embedding,
                Kind::Vector,
                self.segments * h,
            );
        }
        if self.embedding_norm {
            push("embedding norm", Place::Embedding, Kind::Vector, norm_count);
        }

        push("attention norm", Place::Layer, Kind::Vector, norm_count);
        if kv == h && self.bias {
            // GPT-2 and BERT: one fused (or three equal) projections with biases.
            push(
                "query/key/value",
                Place::Layer,
                linear(Linear::QueryKeyValue, h, 3 * h),
                3 * h * h,
            );
            push("query/key/value bias", Place::Layer, Kind::Bias, 3 * h);
        } else {
            push("query", Place::Layer, linear(Linear::Query, h, h), h * h);
            push("key", Place::Layer, linear(Linear::Key, h, kv), h * kv);
            push("value", Place::Layer, linear(Linear::Value, h, kv), h * kv);
            if self.bias {
                push("query/key/value bias", Place::Layer, Kind::Bias, h + 2 * kv);
            }
        }
        push(
            "attention output",
            Place::Layer,
            linear(Linear::Output, h, h),
            h * h,
        );
        if self.bias {
            push("attention output bias", Place::Layer, Kind::Vector, h);
        }
        push("mlp norm", Place::Layer, Kind::Vector, norm_count);
        if self.mlp == Mlp::Gated {
            push("mlp gate", Place::Layer, linear(Linear::Gate, h, f), h * f);
        }
        push("mlp up", Place::Layer, linear(Linear::Up, h, f), h * f);
        push("mlp down", Place::Layer, linear(Linear::Down, f, h), f * h);
        if self.bias {
            let up_bias = if self.mlp == Mlp::Gated { 2 * f } else { f };
            push("mlp up bias", Place::Layer, Kind::Bias, up_bias);
            push("mlp down bias", Place::Layer, Kind::Vector, h);
        }

        if self.final_norm {
            push("final norm", Place::Top, Kind::Vector, norm_count);
        }
        if self.pooler {
            push("pooler", Place::Top, Kind::Vector, h * h + h);
        }
        if !self.tied_embeddings {
            push("output projection", Place::Top, table(h, v), h * v);
        }
        out
    }

    /// Sets the learned absolute position embeddings' rows (`--positions`; 0: none, rotary).
    pub fn set_positions(&mut self, rows: u64) {
        self.positions = rows;
    }

    /// Total parameters, as the published checkpoints count them (tied tables once).
    pub fn params(&self) -> u64 {
        self.tensors()
            .iter()
            .map(|t| match t.place {
                Place::Layer => t.count * self.layers,
                _ => t.count,
            })
            .sum()
    }
}

/// The Llama-style defaults used for a shape given by flags alone (no `--model`).
pub fn custom(name: &str, layers: u64, hidden: u64, heads: u64, vocab: u64) -> ModelShape {
    ModelShape {
        name: name.to_string(),
        layers,
        hidden,
        heads,
        kv_heads: heads,
        ffn: 4 * hidden,
        vocab,
        positions: 0,
        segments: 0,
        mlp: Mlp::Gated,
        norm: Norm::RmsNorm,
        bias: false,
        tied_embeddings: false,
        dropout: false,
        embedding_norm: false,
        final_norm: true,
        pooler: false,
        head: Head::Lm,
    }
}

/// A GPT-style shape given by flags (`--arch gpt`), as Megatron-LM's GPT model builds it by
/// default (`gpt_layer_specs`, `megatron/training/arguments.py` defaults): GeLU MLP, LayerNorm,
/// biases on the linear layers, dropout 0.1 on attention and hidden states, learned absolute
/// position embeddings of `positions` rows (`--position-embedding-type learned_absolute`,
/// `--max-position-embeddings`), and an output layer of its own when `tied` is false
/// (`--untie-embeddings-and-output-weights`).
#[allow(clippy::too_many_arguments)]
pub fn gpt(
    name: &str,
    layers: u64,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    vocab: u64,
    positions: u64,
    tied: bool,
) -> ModelShape {
    ModelShape {
        kv_heads,
        positions,
        mlp: Mlp::Gelu,
        norm: Norm::LayerNorm,
        bias: true,
        tied_embeddings: tied,
        dropout: true,
        ..custom(name, layers, hidden, heads, vocab)
    }
}

/// Width over depth of the common dense decoder families: GPT-3 6.7B, 13B and 175B (Brown et al.
/// 2020, table 2.1: 4096/32, 5140/40, 12288/96) and Llama-2 7B and 13B (4096/32, 5120/40) all
/// have `hidden = 128 x layers`.
const HIDDEN_PER_LAYER: f64 = 128.0;

/// The layer count of a model of `params` parameters when only the count is given: a transformer
/// has about `12 L h^2` parameters (Kaplan et al. 2020, "Scaling Laws for Neural Language Models",
/// eq. 2.1: attention 4h^2 and MLP 8h^2 per layer), so with `h = 128 L` the depth is
/// `(params / (12 x 128^2))^(1/3)`: 32 for 6.7B (Llama-2 7B: 32), 96 for 175B (GPT-3: 96), 71
/// for 70B (Llama-2 70B: 80, a narrower MLP per width). Never below 1.
pub fn default_layers(params: u64) -> u64 {
    let layers = (params as f64 / (12.0 * HIDDEN_PER_LAYER * HIDDEN_PER_LAYER)).cbrt();
    (layers.round() as u64).max(1)
}
