"""kopf's settings: its API requests retry for ever instead of stopping the operator."""

from __future__ import annotations

import collections.abc
import itertools

import kopf

from dtjob_operator.handlers import EndlessBackoffs, configure_kopf
from dtjob_operator.settings import OperatorSettings


def test_backoffs_never_run_out_and_start_afresh_for_each_request() -> None:
    backoffs = EndlessBackoffs(cap=10)
    # kopf counts attempts down only for a Sized value; it must not be one.
    assert not isinstance(backoffs, collections.abc.Sized)
    first = list(itertools.islice(backoffs, 1000))
    assert len(first) == 1000 and first[:3] == [1, 1, 2] and max(first) == 10
    assert list(itertools.islice(backoffs, 3)) == [1, 1, 2]


def test_kopf_gets_our_timeouts_and_endless_retries() -> None:
    kopf_settings = kopf.OperatorSettings()
    settings = OperatorSettings(api_connect_timeout_seconds=3, api_read_timeout_seconds=20)
    configure_kopf(kopf_settings, settings)
    assert kopf_settings.networking.connect_timeout == 3
    assert kopf_settings.networking.request_timeout == 20
    assert kopf_settings.watching.connect_timeout == 3
    assert isinstance(kopf_settings.networking.error_backoffs, EndlessBackoffs)
    assert kopf_settings.watching.inactivity_timeout == settings.watch_inactivity_seconds
