"""Gang admission: which queued jobs may create their whole gang now (docs/admission.md).

Pure modules decide: `resources` (quantities and pod requests), `fit` (quota room and
placement of every pod on Ready nodes), `queue` (order and positions), `preemption`
(victims), `messages` (what a waiting job is told), `snapshot` (API objects -> the views the
decision reads) and `decide` (one admission pass). `controller` is the only module here
that talks to the API server: it gathers a snapshot, runs the pass and hands the verdicts
to the per-job reconcile through the `AdmissionBook`.
"""
