"""dtjob's Python SDK: `Client` submits, lists, waits for, follows and explains
DistributedTrainingJobs; the `kubectl dtj` plugin (dtjob_client.cli) is built on it."""

from dtjob_client.client import Client
from dtjob_client.errors import (
    ApiRefused,
    DtjobError,
    InvalidJob,
    JobEndedInOtherPhase,
    JobNotFound,
    WaitError,
    WaitTimeout,
)
from dtjob_client.history import History, HistoryPoint
from dtjob_client.jobs import Job
from dtjob_client.logs import LogLine
from dtjob_client.queueing import QueueView
from dtjob_client.why import Why

__all__ = [
    "ApiRefused",
    "Client",
    "DtjobError",
    "History",
    "HistoryPoint",
    "InvalidJob",
    "Job",
    "JobEndedInOtherPhase",
    "JobNotFound",
    "LogLine",
    "QueueView",
    "WaitError",
    "WaitTimeout",
    "Why",
]
