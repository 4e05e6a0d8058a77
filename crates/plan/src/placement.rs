//! Which parameters one GPU holds, before data-parallel sharding: tensor parallelism splits the
//! matrices (Megatron column/row parallel layers, vocabulary-parallel embeddings) and replicates the
//! norms; pipeline parallelism gives each stage `layers / pp` layers, the embeddings to the first
//! stage and the final norm and output projection to the last (which keeps its own copy of tied
//! embeddings, as Megatron does).

use super::job::{Finetune, LoraTargets, Model};
use super::shape::{Kind, Linear, ModelShape, Place};

/// A pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stage {
    pub(crate) index: u64,
    pub(crate) count: u64,
    pub(crate) layers: u64,
}

impl Stage {
    pub(crate) fn first(&self) -> bool {
        self.index == 0
    }

    pub(crate) fn last(&self) -> bool {
        self.index + 1 == self.count
    }

    pub(crate) fn name(&self) -> String {
        if self.count == 1 {
            "single stage".into()
        } else if self.first() {
            format!("first of {} pipeline stages", self.count)
        } else {
            format!("last of {} pipeline stages", self.count)
        }
    }
}

/// Parameter counts on one GPU of a stage (elements, before ZeRO/FSDP sharding).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Local {
    /// Parameters the optimizer updates (all of them, or the LoRA adapters).
    pub(crate) trainable: f64,
    /// Trainable elements in tensors of at least `PAGED_MIN_ELEMENTS` on this GPU: the ones a
    /// paged bitsandbytes optimizer keeps in CUDA managed memory.
    pub(crate) trainable_pageable: f64,
    /// Frozen base parameters kept in the training precision (LoRA).
    pub(crate) frozen: f64,
    /// Frozen base linear weights stored as 4-bit NormalFloat (QLoRA).
    pub(crate) frozen_nf4: f64,
    /// Weights of linear layers (layer matrices and the output projection): what autocast casts.
    pub(crate) linear: f64,
    /// One transformer layer (an FSDP/ZeRO-3 unit).
    pub layer: f64,
    /// Embeddings plus the top (final norm, output projection): FSDP's root unit.
    pub(crate) root: f64,
    /// The largest embedding or output table (a ZeRO-3 unit of its own).
    pub(crate) largest_table: f64,
    /// The largest single linear weight of a layer (QLoRA dequantises one at a time).
    pub(crate) largest_linear: f64,
    /// The largest trainable tensor (per-parameter optimizer loops allocate temporaries this big).
    pub(crate) largest_trainable: f64,
    /// Elements of Adafactor's factored state: rows + columns per matrix, every element of vectors.
    pub(crate) adafactor_state: f64,
    /// GaLore: over the trainable weight matrices of the layers, the sum of their longer and of
    /// their shorter dimension (the projected moments are `rank x long`, the projection
    /// `short x rank`), and the trainable elements outside them (plain AdamW states).
    pub(crate) galore_long: f64,
    pub(crate) galore_short: f64,
    pub(crate) galore_other: f64,
}

/// bitsandbytes pages the optimizer states of a tensor only from this many elements on
/// (`Optimizer8bit.get_state_buffer`: `if not self.is_paged or p.numel() < 1e5`).
const PAGED_MIN_ELEMENTS: f64 = 1e5;

/// The elements of a tensor of `per_rank` elements that a paged optimizer pages, `copies` times.
fn pageable(per_rank: f64, copies: f64) -> f64 {
    if per_rank >= PAGED_MIN_ELEMENTS {
        per_rank * copies
    } else {
        0.0
    }
}

/// The stages whose peaks can differ: the first (most in-flight activations) and the last
/// (output projection and logits). One stage when there is no pipeline.
pub(crate) fn stages_to_check(layers: u64, pp: u64) -> Vec<Stage> {
    let per_stage = layers / pp.max(1);
    if pp <= 1 {
        vec![Stage {
            index: 0,
            count: 1,
            layers,
        }]
    } else {
        vec![
            Stage {
                index: 0,
                count: pp,
                layers: per_stage,
            },
            Stage {
                index: pp - 1,
                count: pp,
                layers: per_stage,
            },
        ]
    }
}

fn targeted(role: Linear, targets: LoraTargets) -> bool {
    match targets {
        LoraTargets::All => true,
        LoraTargets::Attention => {
            matches!(
                role,
                Linear::Query | Linear::Key | Linear::Value | Linear::QueryKeyValue | Linear::Output
            )
        }
        LoraTargets::QueryValue => matches!(role, Linear::Query | Linear::Value | Linear::QueryKeyValue),
    }
}

/// What one GPU of `stage` holds, with tensor-parallel size `tp`.
pub(crate) fn local(model: &Model, finetune: Finetune, stage: Stage, tp: u64) -> Local {
    match model {
        Model::ParamsOnly(_) | Model::ParamsLayers { .. } => {
            // No shape: every parameter is taken as a layer parameter and a ZeRO-3/FSDP unit is one
            // of `layers` equal layers (without vocabulary there is no separate embedding unit).
            let n = model.params() as f64;
            let layer = n / model.layers() as f64;
            Local {
                trainable: n,
                // Without a shape every parameter sits in a large layer tensor.
                trainable_pageable: n,
                linear: n,
                layer,
                largest_linear: layer,
                largest_trainable: layer,
                ..Local::default()
            }
        }
        Model::Shaped(shape) => shaped(shape, finetune, stage, tp as f64),
    }
}

fn shaped(shape: &ModelShape, finetune: Finetune, stage: Stage, tp: f64) -> Local {
    let mut out = Local::default();
    let layers = stage.layers as f64;
    for t in shape.tensors() {
        let per_rank = match t.kind {
            Kind::Vector => t.count as f64,
            Kind::Linear { .. } | Kind::Bias | Kind::Table { .. } => t.count as f64 / tp,
        };
        let copies = match t.place {
            Place::Layer => layers,
            Place::Embedding => {
                let head_copy = shape.tied_embeddings && stage.last() && !stage.first();
                if stage.first() || head_copy {
                    1.0
                } else {
                    0.0
                }
            }
            Place::Top => f64::from(u8::from(stage.last())),
        };
        if copies == 0.0 {
            continue;
        }
        let total = per_rank * copies;
        if t.place == Place::Layer {
            out.layer += per_rank;
        } else {
            out.root += total;
        }
        let is_head_table = matches!(t.kind, Kind::Table { .. })
            && (t.place == Place::Top || (shape.tied_embeddings && stage.last()));
        if let Kind::Table { .. } = t.kind {
            out.largest_table = out.largest_table.max(per_rank);
        }
        if let Kind::Linear { .. } = t.kind {
            out.linear += total;
            out.largest_linear = out.largest_linear.max(per_rank);
        } else if is_head_table && shape.head == super::shape::Head::Lm {
            out.linear += per_rank;
        }

        match finetune {
            Finetune::Full => {
                out.trainable += total;
                out.trainable_pageable += pageable(per_rank, copies);
                out.largest_trainable = out.largest_trainable.max(per_rank);
                out.adafactor_state += copies * adafactor_elements(t.kind, per_rank, tp);
                match t.kind {
                    Kind::Linear { rows, cols, .. } => {
                        // Tensor parallelism splits one of the two dimensions; both sums scale with
                        // the per-rank share (an approximation for GaLore under --tp).
                        out.galore_long += copies * rows.max(cols) as f64 / tp;
                        out.galore_short += copies * rows.min(cols) as f64 / tp;
                    }
                    _ => out.galore_other += total,
                }
            }
            Finetune::Lora {
                rank,
                targets,
                quantized,
            } => {
                let r = rank as f64;
                match t.kind {
                    Kind::Linear { role, rows, cols } => {
                        if quantized {
                            out.frozen_nf4 += total;
                        } else {
                            out.frozen += total;
                        }
                        if targeted(role, targets) {
                            // A: rows x r, B: r x cols; tensor parallelism splits one of them.
                            let (rows, cols) = (rows as f64, cols as f64);
                            let adapter = r * (rows + cols) / tp;
                            out.trainable += adapter * copies;
                            // A is rows x r, B is r x cols: two tensors, each paged or not.
                            out.trainable_pageable +=
                                pageable(r * rows / tp, copies) + pageable(r * cols / tp, copies);
                            out.galore_other += adapter * copies;
                            out.largest_trainable = out.largest_trainable.max(r * rows.max(cols) / tp);
                            out.adafactor_state += copies * ((rows + r) + (r + cols)) / tp;
                        }
                    }
                    _ => out.frozen += total,
                }
            }
        }
    }
    out
}

/// Adafactor keeps row and column statistics for a matrix and a full second moment for a vector.
fn adafactor_elements(kind: Kind, per_rank: f64, tp: f64) -> f64 {
    match kind {
        Kind::Linear { rows, cols, .. } | Kind::Table { rows, cols } => (rows + cols) as f64 / tp,
        Kind::Vector | Kind::Bias => per_rank,
    }
}
