"""A Custom model: the blocks that trainer.model.factory returns.

The factory is called (by models.iter_blocks) after torch.manual_seed(trainer.seed), so
every process builds the same parameters. It returns an nn.Sequential, whose children are
the blocks pipeline stages split, or a list of modules (the blocks); any other module is
one block, which non-pipeline strategies train as it is and pipeline strategies refuse
(models.split_into_stages). Blocks are renamed by position ("0", "1", ...), as the bundled
models' are, so that checkpoints and stage parameter names follow one scheme.

A factory may also be a generator that yields the blocks one at a time. Then nothing ever
holds the whole model: FSDP and CPUOffload materialise their shards and pipeline stages
keep their own blocks while the stream is replayed, dropping every other block as soon as
it is made (meta_init, strategies/stage_build), as they do for the bundled models. A
factory that returns the whole model is built whole once in each such process, so for a
model near the size of a host's memory the generator is the form that fits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from torch import nn

from dtjob_api.spec import TrainerSpec
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.factory import call_factory

FIELD = "trainer.model.factory"


def custom_blocks(trainer: TrainerSpec) -> Iterable[nn.Module]:
    """The blocks of the model trainer.model.factory builds (the caller seeds torch): a
    list, or an iterator that makes each block as it is asked for (a generator factory)."""
    m = trainer.model
    assert m.factory is not None  # the API's rules require it for type Custom
    built = call_factory(FIELD, m.factory, m.kwargs, trainer.codePath)
    if isinstance(built, nn.Sequential):
        blocks = list(built.children())
    elif isinstance(built, nn.Module):
        blocks = [built]
    elif isinstance(built, list | tuple) and all(isinstance(b, nn.Module) for b in built):
        blocks = list(built)
    elif isinstance(built, Iterator):
        return _streamed(built, m.factory)
    else:
        raise ConfigError(
            f"{FIELD}: {m.factory} returned {type(built).__name__}, not an nn.Module, an "
            "nn.Sequential, a list of modules or a generator of modules"
        )
    if not blocks:
        raise ConfigError(f"{FIELD}: {m.factory} returned a model without blocks")
    return blocks


def _streamed(stream: Iterator[object], factory: str) -> Iterator[nn.Module]:
    """The blocks of a generator factory, checked as they come: the factory's own errors
    surface here, block by block, and are its config errors like those of a call."""
    index = 0
    while True:
        try:
            block = next(stream)
        except StopIteration:
            break
        except Exception as exc:  # the user's code, as in factory.call_factory
            raise ConfigError(
                f"{FIELD}: {factory} raised {type(exc).__name__} making block {index}: {exc}"
            ) from exc
        if not isinstance(block, nn.Module):
            raise ConfigError(
                f"{FIELD}: {factory} yielded {type(block).__name__} as block {index}, "
                "not an nn.Module"
            )
        yield block
        index += 1
    if index == 0:
        raise ConfigError(f"{FIELD}: {factory} yielded no blocks")
