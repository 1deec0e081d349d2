# The local control plane (hack/cluster.py): etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and KWOK on 127.0.0.1, with fake GPU nodes. Knobs (make VAR=...):
#   NODES (4), GPUS (per node, 8), NODE_LABELS ("k=v,k2=v2"), NODE=real (plus one real node:
#   kubelet + containerd, docs/real-node.md); everything else via the
#   DTJOB_* variables documented at the top of hack/cluster.py.
# Only system python3 is needed: the cluster does not wait for the venv.
CLUSTER_ENV = $(if $(NODE),DTJOB_NODE=$(NODE)) $(if $(NODES),DTJOB_NODES=$(NODES)) $(if $(GPUS),DTJOB_GPUS_PER_NODE=$(GPUS)) \
	$(if $(NODE_LABELS),DTJOB_NODE_LABELS='$(NODE_LABELS)')
CLUSTER = $(CLUSTER_ENV) python3 $(TOP)/hack/cluster.py
# What the cluster and the chart need; kubelet/kube-proxy are built only for a real node.
CLUSTER_BINARIES = etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl helm

.PHONY: binaries cluster-up cluster-down cluster-status kubeconfig dev-up dev-down

binaries: ## build the pinned cluster binaries once (cached); prints their directory
	@$(TOP)/hack/build-binaries.sh $(CLUSTER_BINARIES)

cluster-up: ## start the local control plane + fake GPU nodes (NODES=4 GPUS=8 NODE_LABELS=k=v NODE=real)
	@$(CLUSTER) up

cluster-down: ## stop exactly what cluster-up started
	@$(CLUSTER) down

cluster-status: ## say which cluster components run, and the nodes
	@$(CLUSTER) status

kubeconfig: ## print the admin kubeconfig path (use: export KUBECONFIG=$$(make -s kubeconfig))
	@$(CLUSTER) kubeconfig

dev-up: cluster-up ## the cluster, the CRDs and the operator running on the host
	@$(if $(wildcard $(TOP)/operator/dtjob_operator/__main__.py),DTJOB_PYTHON=$(PY)) \
		$(TOP)/hack/cluster-dev.sh up

dev-down: ## stop the host operator, then the cluster
	@$(TOP)/hack/cluster-dev.sh down
	@$(CLUSTER) down
