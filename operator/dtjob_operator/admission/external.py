"""Admission mode "external" as an admission backend (seam.py): someone else decides when a
job runs, through the job's own spec.suspend (docs/admission.md), and places nothing here.
The operator creates the whole gang of every unsuspended job at once; a job that asks to be
packed by topology fails (lifecycle.py), since nobody here would honour it."""

from __future__ import annotations

from collections.abc import Sequence

from dtjob_api.status import AdmissionBackendName
from dtjob_operator.admission.seam import AdmissionBackend, AdmissionVerdict, Obj


class ExternalBackend(AdmissionBackend):
    """Every job is admitted; suspend is the external controller's lever."""

    name = AdmissionBackendName.EXTERNAL

    def view(self, job: Obj, pods: Sequence[Obj]) -> AdmissionVerdict:
        return AdmissionVerdict(by=self.name)
