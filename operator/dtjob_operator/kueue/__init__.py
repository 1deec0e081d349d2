"""The Kueue admission backend (docs/kueue.md): a job labelled with a LocalQueue becomes a
Kueue Workload, and Kueue's admission decides when its gang starts and where."""
