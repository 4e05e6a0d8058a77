"""DeepSpeed: the batch values of its config for the controller's geometry.

What works where:
  * mid-run, only the accumulation: `engine.set_train_batch_size()` changes the number of micro-batches
    per step, never `train_micro_batch_size_per_gpu`, so it cannot shrink the micro-batch and keep the
    effective batch. Use the controller between steps to predict, and when it wants another micro-batch,
    `engine.save_checkpoint(...)` and end the run;
  * at the restart, build the engine with `config_with_geometry` and `engine.load_checkpoint(...)`.
Activation checkpointing is the model's to switch (`deepspeed.checkpointing.checkpoint`, or a Hugging
Face model's `gradient_checkpointing_enable`), from `controller.activation_checkpointing`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .controller import BatchController


def config_with_geometry(config: Dict[str, Any], controller: BatchController, world_size: int,
                         agreement: Optional[Any] = None) -> Dict[str, Any]:
    """A copy of a DeepSpeed config with the three batch values consistent with the controller
    (DeepSpeed refuses train_batch_size != micro x accumulation x data-parallel size). With an
    `agreement` (`gpu_mem_quota.distributed.RankAgreement`, after `deepspeed.init_distributed()`), the
    ranks first agree on the most conservative geometry: every rank's engine gets the same micro-batch."""
    if agreement is not None:
        from .distributed import follow, proposal_of  # torch: only where ranks are agreed on

        follow(controller, agreement.agree(proposal_of(controller)), agreement.rank)
    geometry = controller.geometry
    updated = dict(config)
    updated["train_micro_batch_size_per_gpu"] = geometry.micro
    updated["gradient_accumulation_steps"] = geometry.accum
    updated["train_batch_size"] = geometry.effective * world_size
    return updated
