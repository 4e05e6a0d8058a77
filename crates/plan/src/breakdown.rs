//! The estimate's result: named terms in bytes, each with its source and the phase of the step in
//! which it is live, and the peak they add up to.

/// When a term occupies memory during a training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// All step long: parameters, gradients, optimizer states, persistent buffers.
    Resident,
    /// From the forward pass through the backward pass: stored activations, gathered parameters,
    /// communication buckets.
    Forward,
    /// Only around the loss: logits and cross-entropy buffers (freed before the layers' backward).
    Loss,
    /// Only while one layer is recomputed in the backward pass.
    Recompute,
    /// Only during the optimizer step (activations are gone by then).
    Step,
    /// Outside PyTorch's caching allocator: CUDA context, NCCL.
    Device,
    /// The caching allocator's reserved-but-unallocated memory.
    Fragmentation,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Resident => "resident",
            Phase::Forward => "forward/backward",
            Phase::Loss => "loss",
            Phase::Recompute => "recompute",
            Phase::Step => "optimizer step",
            Phase::Device => "device",
            Phase::Fragmentation => "allocator",
        }
    }
}

/// One component of the estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    /// A stable machine name (JSON key).
    pub key: &'static str,
    /// What it is, with the numbers that produced it.
    pub label: String,
    pub bytes: u64,
    pub(crate) phase: Phase,
    /// Where the formula comes from (paper, documentation, code).
    pub source: &'static str,
    /// Whether this term is part of the peak (terms of the other phase are shown but not added).
    pub(crate) at_peak: bool,
}

impl Term {
    pub fn new(
        key: &'static str,
        label: impl Into<String>,
        bytes: f64,
        phase: Phase,
        source: &'static str,
    ) -> Term {
        Term {
            key,
            label: label.into(),
            bytes: bytes.max(0.0).round() as u64,
            phase,
            source,
            at_peak: false,
        }
    }
}

/// The peak of one GPU and how it is made up.
#[derive(Debug, Clone, PartialEq)]
pub struct Breakdown {
    pub terms: Vec<Term>,
    /// Where the pipeline stage whose peak this is sits.
    pub stage: String,
    /// Peak of memory held in tensors (`torch.cuda.max_memory_allocated`).
    pub allocated: u64,
    /// The phase of the step at which `allocated` peaks.
    pub(crate) peak_phase: Phase,
    /// Peak held by the caching allocator (`torch.cuda.max_memory_reserved`).
    pub reserved: u64,
    /// What the device shows for the process (`nvidia-smi`, NVML): reserved plus context and NCCL.
    pub peak: u64,
    /// Things the user should know about this estimate.
    pub notes: Vec<String>,
}

fn sum(terms: &[Term], phase: Phase) -> u64 {
    terms.iter().filter(|t| t.phase == phase).map(|t| t.bytes).sum()
}

/// Adds the terms up: resident + the larger of (forward/backward with the larger of loss and
/// recompute) and (optimizer step); then the allocator's overhead (`fragmentation` of the
/// transient part of the allocated peak) and the device terms. Marks the terms that are part of the peak.
pub(crate) fn total(
    mut terms: Vec<Term>,
    fragmentation: f64,
    stage: String,
    notes: Vec<String>,
) -> Breakdown {
    let resident = sum(&terms, Phase::Resident);
    let (loss, recompute) = (sum(&terms, Phase::Loss), sum(&terms, Phase::Recompute));
    let backward = sum(&terms, Phase::Forward) + loss.max(recompute);
    let step = sum(&terms, Phase::Step);
    let peak_phase = if backward >= step {
        Phase::Forward
    } else {
        Phase::Step
    };
    let transient = backward.max(step);
    let allocated = resident + transient;
    // Resident states are allocated once and pack tightly; the churn of transient tensors of
    // varying sizes is what leaves reserved blocks unused.
    let overhead = (transient as f64 * fragmentation).round() as u64;
    let reserved = allocated + overhead + sum(&terms, Phase::Fragmentation);
    terms.push(Term::new(
        "fragmentation",
        format!(
            "allocator fragmentation ({:.0}% of the transient peak)",
            fragmentation * 100.0
        ),
        overhead as f64,
        Phase::Fragmentation,
        "PyTorch caching allocator reserved/allocated ratio; docs/PLAN.md",
    ));
    let device = sum(&terms, Phase::Device);
    for term in &mut terms {
        term.at_peak = match term.phase {
            Phase::Resident | Phase::Device | Phase::Fragmentation => true,
            Phase::Forward => peak_phase == Phase::Forward,
            Phase::Loss => peak_phase == Phase::Forward && loss >= recompute,
            Phase::Recompute => peak_phase == Phase::Forward && recompute > loss,
            Phase::Step => peak_phase == Phase::Step,
        };
    }
    Breakdown {
        terms,
        stage,
        allocated,
        peak_phase,
        reserved,
        peak: reserved + device,
        notes,
    }
}
