"""Pure text (and PNG) renderings of jobs, explanations, queues and loss histories: what
`kubectl dtj` prints. Golden-file tested; no Kubernetes client here."""
