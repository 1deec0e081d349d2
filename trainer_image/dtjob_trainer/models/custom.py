"""A Custom model: the blocks that trainer.model.factory returns.

The factory is called (by models.iter_blocks) after torch.manual_seed(trainer.seed), so
every process builds the same parameters. It returns an nn.Sequential, whose children are
the blocks pipeline stages split, or a list of modules (the blocks); any other module is
one block, which non-pipeline strategies train as it is and pipeline strategies refuse
(models.split_into_stages). Blocks are renamed by position ("0", "1", ...), as the bundled
models' are, so that checkpoints and stage parameter names follow one scheme.
"""

from __future__ import annotations

from torch import nn

from dtjob_api.spec import TrainerSpec
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.factory import call_factory

FIELD = "trainer.model.factory"


def custom_blocks(trainer: TrainerSpec) -> list[nn.Module]:
    """The blocks of the model trainer.model.factory builds (the caller seeds torch)."""
    m = trainer.model
    assert m.factory is not None  # the API's rules require it for type Custom
    built = call_factory(FIELD, m.factory, m.kwargs, trainer.codePath)
    if isinstance(built, nn.Sequential):
        blocks = list(built.children())
    elif isinstance(built, nn.Module):
        blocks = [built]
    elif isinstance(built, list | tuple) and all(isinstance(b, nn.Module) for b in built):
        blocks = list(built)
    else:
        raise ConfigError(
            f"{FIELD}: {m.factory} returned {type(built).__name__}, not an nn.Module, an "
            "nn.Sequential or a list of modules"
        )
    if not blocks:
        raise ConfigError(f"{FIELD}: {m.factory} returned a model without blocks")
    return blocks
