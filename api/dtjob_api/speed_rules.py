"""Where the speed options trainer.compile and trainer.activationCheckpointing apply;
rules.py adds these rows to RULES, so each is enforced as CEL in the CRD and in Python by
the operator, like every other rule.

The trainer checkpoints / compiles every block of the model it builds (speed.py) and the
strategies then wrap, shard, split over tensor-parallel ranks or cut the model into
stages: DataParallel, FSDP, CPUOffload, Auto, ParameterServer, TensorParallel and the
pipelines of torch.distributed.pipelining (Pipeline and Hybrid with GPipe, 1F1B or
Interleaved1F1B, with or without strategy.tensorParallel, and ModelParallel) run the
blocks as built. Each refusal below names a strategy whose blocks are run some other way,
and why.
"""

from __future__ import annotations

from collections.abc import Callable

from dtjob_api.facts import (
    BUNDLED_TRAINER,
    HAS_STAGE_GROUPS,
    SCHEDULE,
    STRATEGY,
    Facts,
    cel_is,
    cel_list,
)
from dtjob_api.rule import Rule
from dtjob_api.spec import PipelineSchedule, StrategyType

_ASYNC = (PipelineSchedule.PIPEDREAM, PipelineSchedule.PIPEDREAM_2BW)
_PIPELINED = cel_is(StrategyType.PIPELINE, StrategyType.HYBRID)

# (CEL, Python, message for activationCheckpointing, for compile) of each refusal; the
# message follows the field's name. Compile is refused where it is untested. The CEL is
# kept short (the CRD is near its size limit): ParameterServerStrategy runs mode Async, so
# only type ParameterServer can run Hogwild.
_REFUSALS: tuple[tuple[str, Callable[[Facts], bool], str, str], ...] = (
    (
        f'{STRATEGY} == "ParameterServer" && has(self.strategy.parameterServer) && '
        'self.strategy.parameterServer.mode == "Hogwild"',
        lambda f: f.strategy == StrategyType.PARAMETER_SERVER and f.mode == "Hogwild",
        "not with ParameterServer mode Hogwild: its model is pickled to spawned processes and "
        "a checkpointed block does not pickle",
        "not with ParameterServer mode Hogwild: untested on a model shared with spawned processes",
    ),
    (
        f"({_PIPELINED} && {SCHEDULE} in {cel_list(tuple(str(s) for s in _ASYNC))}) || "
        f"({HAS_STAGE_GROUPS})",
        lambda f: (
            f.has_stage_groups
            or (f.strategy in (StrategyType.PIPELINE, StrategyType.HYBRID) and f.schedule in _ASYNC)
        ),
        "not with schedule PipeDream, PipeDream2BW or roles.stage.groups: their stages run on "
        "stashed weights, which a recomputation would not use",
        "not with schedule PipeDream, PipeDream2BW or roles.stage.groups: untested on their "
        "stashed weights",
    ),
)


def _refusal(name: str, when: str, when_py: Callable[[Facts], bool], message: str) -> Rule:
    on = f"{BUNDLED_TRAINER} && has(self.trainer.{name}) && self.trainer.{name}"
    return Rule(
        f"trainer.{name}",
        on, lambda f: f.bundled_trainer and bool(getattr(f, name)),
        f"!({when})", lambda f: not when_py(f),
        message,
        "FieldValueForbidden",
    )  # fmt: skip


SPEED_RULES: tuple[Rule, ...] = (
    *(_refusal("compile", when, when_py, message) for when, when_py, _, message in _REFUSALS),
    *(
        _refusal("activationCheckpointing", when, when_py, message)
        for when, when_py, message, _ in _REFUSALS
    ),
)
