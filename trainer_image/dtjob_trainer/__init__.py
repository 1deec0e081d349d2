"""The bundled trainer of dtjob: reads the environment contract (docs/env-contract.md),
builds the model and data from the job config and runs the selected strategy.

Entry points: `python -m dtjob_trainer run` (inside a pod) and
`python -m dtjob_trainer launch --nproc N <config>` (one machine, no Kubernetes).
"""

__version__ = "0.1.0"
